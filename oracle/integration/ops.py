"""Opaque torch custom ops that run a registered oracle kernel: one op per layer for torch.compile and CUDA graphs.

Why: an oracle kernel's `apply` is Python that launches Triton/cuBLAS work, sometimes with
shape-dependent host logic. torch.compile must not trace into it (Dynamo would break the graph
or specialise on internals), and vLLM's piecewise compilation needs every layer to be one node
with a known output shape. So each kernel instance is registered under an integer handle and the
model calls one of these ops with that handle; the op's real implementation calls `apply`, its
fake (meta) implementation only computes the output's shape and dtype from the kernel's layer.

API (used by oracle.hf and the vLLM plugin alike):

    from oracle.integration import ops
    handle = ops.register(kernel)      # after kernel.process_weights(...); returns an int
    y = torch.ops.oracle.linear(x, handle)                      # x [..., K] -> [..., N]
    y = torch.ops.oracle.moe(x, topk_weights, topk_ids, handle)  # x [M, H] -> [M, H]
    y = torch.ops.oracle.embedding(ids, handle)                 # ids [...] -> [..., D]

  * the output dtype is the layer's dtype (`layer.dtype`); the output never aliases an input;
  * handles are process-local integers, stable for the kernel's lifetime; the registry holds
    kernels weakly (the model's modules own them), so a dropped model frees its weights;
    `ops.unregister(handle)` removes one explicitly; `ops.kernel(handle)` looks one up;
  * a handle is a plain int argument: store it on the module as a Python int so Dynamo treats it
    as a constant (one compiled graph for a whole model, one op node per layer);
  * the ops run whatever `apply` does: CUDA-graph capture is safe when the kernel's `apply` is
    (no host synchronisation, no allocation outside the capture pool), see oracle.kernel.
"""
from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from typing import Any, Iterator

import torch

from ..formats import torch_dtype

_kernels: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
_next = itertools.count(1)
_lock = threading.Lock()
_bound: dict[int, int] = {}       # handle -> handle whose kernel runs instead (see `bound`)


def register(kernel: Any) -> int:
    """A new handle for `kernel` (held weakly); the kernel must already have its weights."""
    with _lock:
        handle = next(_next)
        _kernels[handle] = kernel
    return handle


def unregister(handle: int) -> None:
    _kernels.pop(int(handle), None)


@contextlib.contextmanager
def bound(mapping: dict[int, int]) -> Iterator[None]:
    """Within the block, an op called with handle `h` runs kernel `mapping[h]` (others unchanged).

    For code compiled once and run for several layers (oracle.hf.compiled): the compiled graph holds
    the first layer's handles as constants; each later layer's call binds them to its own kernels,
    whose shapes the caller checked are equal. Ops read the binding when they run (eagerly, or while
    a CUDA graph records them), never when a graph replays."""
    global _bound
    saved, _bound = _bound, {**_bound, **mapping}
    try:
        yield
    finally:
        _bound = saved


def kernel(handle: int) -> Any:
    """The kernel registered under `handle`; a clear error for an unknown or freed one."""
    try:
        return _kernels[_bound.get(int(handle), int(handle))]
    except KeyError:
        raise KeyError(f"oracle op handle {handle}: no kernel registered under it (never registered, "
                       "unregistered, or its model was freed)") from None


def _dtype(k: Any) -> torch.dtype:
    return torch_dtype(k.layer.dtype)


@torch.library.custom_op("oracle::linear", mutates_args=())
def linear(x: torch.Tensor, handle: int) -> torch.Tensor:
    """y = kernel(handle).apply(x): x [..., K] -> [..., N] in the layer's dtype."""
    k = kernel(handle)
    y = k.apply(x).to(_dtype(k))
    return y.clone() if _aliases(y, x) else y


@linear.register_fake
def _linear_fake(x: torch.Tensor, handle: int) -> torch.Tensor:
    layer = kernel(handle).layer
    return x.new_empty((*x.shape[:-1], layer.out_features), dtype=torch_dtype(layer.dtype))


@torch.library.custom_op("oracle::moe", mutates_args=())
def moe(x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, handle: int) -> torch.Tensor:
    """y = kernel(handle).apply(x, topk_weights, topk_ids): x [M, H] -> [M, H] in the layer's dtype."""
    k = kernel(handle)
    y = k.apply(x, topk_weights, topk_ids).to(_dtype(k))
    return y.clone() if _aliases(y, x) else y


@moe.register_fake
def _moe_fake(x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, handle: int) -> torch.Tensor:
    layer = kernel(handle).layer
    return x.new_empty((x.shape[0], layer.hidden_size), dtype=torch_dtype(layer.dtype))


@torch.library.custom_op("oracle::embedding", mutates_args=())
def embedding(ids: torch.Tensor, handle: int) -> torch.Tensor:
    """y = kernel(handle).apply(ids): ids [...] -> [..., D] in the layer's dtype."""
    k = kernel(handle)
    return k.apply(ids).to(_dtype(k))


@embedding.register_fake
def _embedding_fake(ids: torch.Tensor, handle: int) -> torch.Tensor:
    layer = kernel(handle).layer
    return torch.empty((*ids.shape, layer.embedding_dim), dtype=torch_dtype(layer.dtype), device=ids.device)


def _aliases(y: torch.Tensor, x: torch.Tensor) -> bool:
    """A custom op's output may not share storage with an input (torch.library's rule)."""
    try:
        return y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return False
