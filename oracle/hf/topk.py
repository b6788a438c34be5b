"""A one-launch top-k over the last dimension for MoE routers in compiled decode steps.

Why: at one token a router's `torch.topk` over 128 expert scores is two kernels on CUDA (a radix
select and a bitonic sort of the selection), 9 us of a Qwen3-30B layer's ~90 under graph replay
(bench/results/bench_decode_h200.md, r5 kernel profile), while the scores are one 512-byte row.
Inductor keeps aten.topk as a library call, so `compile_layers` hands inductor a post-grad pass
(`RouterTopK`) that replaces a top-k over a last dimension of at most MAX_WIDTH with the custom op
`oracle::topk`: one Triton program per row picks the k largest one after another.

Same result as torch.topk(x, k, dim=-1, largest=True, sorted=True): the k largest values in
descending order (copied, not recomputed) and their indices; among equal values the smaller index
comes first (torch leaves that order unspecified); NaN counts as larger than any number, as in
torch.topk, so every index is one of the row's own. The CPU (and anything not CUDA) runs torch.topk itself. The pass is part of the compiled
decode mode, so a benchmark's BF16 baseline, compiled by the same `compile_layers`, gets it too;
ORACLE_ROUTER_TOPK=0 leaves torch.topk in place.
"""
from __future__ import annotations

import functools
import os
from typing import Any

import torch

#: widest last dimension served (one program holds the row); wider top-ks stay torch.topk
MAX_WIDTH = 1024
#: most values picked (the picks are sequential passes over the row)
MAX_K = 32


@torch.library.custom_op("oracle::topk", mutates_args=())
def topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices) of the k largest entries of each row of x [..., E], descending."""
    if not x.is_cuda or x.shape[-1] > MAX_WIDTH or k > MAX_K or x.numel() == 0:
        return tuple(t.contiguous() for t in torch.topk(x, k, dim=-1))   # type: ignore[return-value]
    rows = x.reshape(-1, x.shape[-1])
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    values = torch.empty(rows.shape[0], k, dtype=x.dtype, device=x.device)
    indices = torch.empty(rows.shape[0], k, dtype=torch.int64, device=x.device)
    _kernel()[(rows.shape[0],)](rows, values, indices, rows.shape[1], rows.stride(0), K=k,
                                BLOCK=max(16, 1 << (rows.shape[1] - 1).bit_length()), num_warps=1)
    shape = (*x.shape[:-1], k)
    return values.reshape(shape), indices.reshape(shape)


@topk.register_fake
def _topk_fake(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (*x.shape[:-1], k)
    return x.new_empty(shape), x.new_empty(shape, dtype=torch.int64)


def _kernel() -> Any:
    """The Triton kernel (oracle.hf.topk_triton), imported at the first CUDA call: a CPU process never
    imports triton."""
    from .topk_triton import topk_rows
    return topk_rows


def _eligible(node: Any) -> int | None:
    """k, where `node` is an aten.topk this op computes identically (last dim, largest, sorted)."""
    if node.op != "call_function" or node.target is not torch.ops.aten.topk.default:
        return None
    args = list(node.args) + [None] * (6 - len(node.args))
    x, k, dim, largest, sorted_ = args[0], args[1], args[2], args[3], args[4]
    dim = node.kwargs.get("dim", -1 if dim is None else dim)
    largest = node.kwargs.get("largest", True if largest is None else largest)
    sorted_ = node.kwargs.get("sorted", True if sorted_ is None else sorted_)
    meta = getattr(x, "meta", {}).get("val")
    if meta is None or not isinstance(k, int) or not largest or meta.dim() == 0:
        return None
    width = meta.shape[-1]
    if dim not in (-1, meta.dim() - 1) or not isinstance(width, int) or width > MAX_WIDTH or k > MAX_K \
            or not meta.dtype.is_floating_point:
        return None
    return k           # sorted=False asks for less than this gives: descending order satisfies it too


def rewrite(graph: Any) -> int:
    """Replace every eligible aten.topk in an FX graph with oracle::topk; returns how many."""
    count = 0
    for node in list(graph.nodes):
        k = _eligible(node)
        if k is None:
            continue
        with graph.inserting_before(node):
            new = graph.call_function(torch.ops.oracle.topk.default, (node.args[0], k))
            new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        count += 1
    return count


def enabled() -> bool:
    """On unless ORACLE_ROUTER_TOPK is "0" (benchmarks compare the two)."""
    from ..envvars import ROUTER_TOPK, flag
    return os.environ.get(ROUTER_TOPK) is None or flag(os.environ, ROUTER_TOPK)


@functools.cache
def works(device: torch.device) -> bool:
    """Whether the op gives torch.topk's result on `device` (a probe run once per device before a compile
    relies on it; a failure is one warning and compiled steps keep torch.topk, never a failed decode)."""
    if device.type != "cuda":
        return True                       # the op runs torch.topk itself there
    try:
        x = torch.randperm(256, device=device).float().reshape(2, 128)
        got, want = topk(x, 8), torch.topk(x, 8)
        if all(torch.equal(a, b) for a, b in zip(got, want)):
            return True
        why = "it disagreed with torch.topk"
    except Exception as exc:  # noqa: BLE001 - a Triton problem must not stop the decode
        why = f"{type(exc).__name__}: {str(exc)[:300]}"
    import warnings
    warnings.warn(f"oracle::topk is not used in compiled decode steps on {device}: {why}", RuntimeWarning,
                  stacklevel=2)
    return False


def post_grad_pass() -> Any:
    """The inductor post-grad pass object (`torch.compile(options={"post_grad_custom_post_pass": ...})`)."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class RouterTopK(CustomGraphPass):
        def __call__(self, graph: Any) -> None:
            rewrite(graph)

        def uuid(self) -> Any:
            return f"oracle.hf.topk:{MAX_WIDTH}:{MAX_K}:1"

    return RouterTopK()
