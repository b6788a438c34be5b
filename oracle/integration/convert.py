"""An engine's loaded parameters -> a kernel's `process_weights` arguments, through oracle.checkpoints.

Engines load checkpoint tensors into their own parameters, keeping the checkpoint's
layout but fusing along N (q/k/v, gate/up) and stacking experts along E. Rather than
teach every kernel every engine, the parameters are put back under checkpoint names in
a `DictSource` and read by the same `Adapter` the oracle's own loader uses: the layout
checks (dtype, shape) and conversions (int4 repacking, requantizing fused FP8 scales)
live in one place, and an engine whose parameters do not match the layout gets the
adapter's error naming the tensor.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..checkpoints import CheckpointError, DictSource, adapter_for

Tensors = Mapping[str, Any]     # checkpoint suffix (weight, weight_scale, weight_packed, ...) -> tensor


def split_parts(tensors: Tensors, rows: list[int], *, per_part: Iterable[str] = (),
                drop: Iterable[str] = ()) -> list[dict[str, Any]]:
    """One fused parameter set -> one set per part. Tensors named in `per_part` hold one value per
    part (e.g. per-tensor FP8 scales of q, k, v); tensors with a single value are shared; the rest
    are split along their first dimension by `rows`."""
    per_part, drop = set(per_part), set(drop)
    out: list[dict[str, Any]] = [{} for _ in rows]
    for suffix, t in tensors.items():
        if suffix in drop:
            continue
        if suffix in per_part:
            flat = t.reshape(-1)
            values = [flat[i].reshape(1) for i in range(len(rows))] if flat.numel() == len(rows) \
                else [flat.max().reshape(1)] * len(rows)
        elif t.numel() == 1:
            values = [t.reshape(1)] * len(rows)
        else:
            values = list(t.split(rows, dim=0)) if len(rows) > 1 else [t]
        for part, value in zip(out, values):
            part[suffix] = value
    return out


def refuse_act_order(tensors: Tensors, k: int, group: int | None, name: str) -> None:
    """An int4 layer whose groups are permuted (act-order `g_idx`) cannot be converted: the kernels
    take groups in K order. A trivial g_idx (k // group, the engine's default) is accepted."""
    import torch

    g_idx = tensors.get("weight_g_idx")
    if g_idx is None or g_idx.numel() == 0:
        return
    want = torch.arange(k, device=g_idx.device) // (group or k)
    if not torch.equal(g_idx.reshape(-1, k).long(), want.expand(g_idx.numel() // k, k)):
        raise CheckpointError("act-order groups (a permuted weight_g_idx): the int4 kernels take groups in K "
                              "order only", tensor=f"{name}.weight_g_idx")


def linear_arguments(dialect: str, layer: Any, parts: list[dict[str, Any]], rows: list[int]) -> dict[str, Any]:
    """process_weights arguments of `layer` whose parts (checkpoint suffix -> tensor) have `rows` rows each."""
    names = [f"{layer.name}.part{i}" if len(parts) > 1 else layer.name for i in range(len(parts))]
    src = DictSource({f"{n}.{suffix}": t for n, part in zip(names, parts) for suffix, t in part.items()},
                     file=f"<engine parameters of {layer.name}>")
    return adapter_for(dialect).linear(src, layer, list(zip(names, rows)))


def moe_arguments(dialect: str, layer: Any, w13: Tensors, w2: Tensors, *, per_shard: Iterable[str] = (),
                  drop: Iterable[str] = ()) -> dict[str, Any]:
    """process_weights arguments of a fused-MoE layer from stacked expert parameters.

    `w13` holds [E, 2I, ...] tensors (gate rows, then up rows) and `w2` [E, H, ...] ones, keyed
    by checkpoint suffix; `per_shard` names w13 tensors with one value per shard ([E, 2]: the
    gate's and the up projection's per-tensor scales)."""
    per_shard, drop = set(per_shard), set(drop)
    i = layer.intermediate_size // layer.tp_size
    tensors: dict[str, Any] = {}
    for e in range(layer.num_experts):
        base = f"{layer.name}.{e}"
        for suffix, t in w13.items():
            if suffix in drop:
                continue
            if suffix in per_shard:
                gate, up = t[e].reshape(-1)[0].reshape(1), t[e].reshape(-1)[-1].reshape(1)
            elif t[e].numel() == 1:
                gate = up = t[e].reshape(1)
            else:
                gate, up = t[e][:i], t[e][i:]
            tensors[f"{base}.gate_proj.{suffix}"] = gate
            tensors[f"{base}.up_proj.{suffix}"] = up
        for suffix, t in w2.items():
            if suffix not in drop:
                tensors[f"{base}.down_proj.{suffix}"] = t[e].reshape(1) if t[e].numel() == 1 else t[e]
    src = DictSource(tensors, file=f"<engine parameters of {layer.name}>")
    parts = tuple(f"{layer.name}.0.{p}" for p in ("gate_proj", "up_proj", "down_proj"))
    return adapter_for(dialect).moe(src, layer, parts)
