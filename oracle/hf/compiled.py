"""Decoder layers compiled once with torch.compile for the decode step (regional compilation).

Why: under CUDA-graph replay a decode step costs what its kernels cost, and at batch 1 most of
them are transformers' own small ones (an RMSNorm is 6-8 kernels, rotary, residual adds, the
router's softmax/top-k), shared by every engine. Inductor fuses those; the oracle kernels stay
opaque custom ops (oracle.integration.ops), so it never traces into them.

One compiled code object serves every layer: `compile_layers` routes each decoder layer's decode
call (one new token per row) through `_layer_step(layer, ..., keys, values, length)`, which takes the
layer's static KV-cache tensors as arguments and hands the layer a one-layer cache (`_LayerCache`)
whose `update` ignores the layer index. Compiled directly, each layer would guard on its own
index and its own cache tensors (48 recompiles for a 48-layer model). Layers whose modules differ
(gpt-oss sliding-window layers, DeepSeek's dense first layers) get one variant each.
Prefill (several tokens per row) stays eager; `torch.compile` happens at the first decode call.
The same function wraps the BF16 baseline, so both sides of a benchmark run the same compiled code.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
from torch import nn

from ..errors import InputError
from ..integration import ops

#: layer variants one process may compile (Dynamo's default of 8 is per code object, shared by all layers)
MAX_VARIANTS = 64


class _LayerCache:
    """What one decoder layer's attention sees as past_key_values in the compiled step."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: torch.Tensor):
        self.keys, self.values, self.length = keys, values, length

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        """transformers' StaticLayer.update: write the new rows at the device-side length, advance it."""
        pos = torch.arange(key_states.shape[-2], device=key_states.device) + self.length
        self.length.add_(key_states.shape[-2])
        self.keys.index_copy_(2, pos, key_states)
        self.values.index_copy_(2, pos, value_states)
        return self.keys, self.values


def _layer_step(layer: nn.Module, forward: Any, hidden: torch.Tensor, mask: Any, position_ids: torch.Tensor,
                position_embeddings: Any, keys: torch.Tensor, values: torch.Tensor, length: torch.Tensor,
                kwargs: dict) -> torch.Tensor:
    return forward(layer, hidden, attention_mask=mask, position_ids=position_ids,
                   past_key_values=_LayerCache(keys, values, length), use_cache=True,
                   position_embeddings=position_embeddings, **kwargs)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's decoder layers (`model.model.layers` in every transformers decoder we load)."""
    base = getattr(model, "model", None)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise InputError(f"{type(model).__name__} has no model.layers list of decoder layers to compile",
                         field="--decode")
    return layers


def compile_layers(model: nn.Module, backend: str = "inductor") -> None:
    """Let every decoder layer's single-token calls run through one compiled step, inside
    `active(model)` blocks only (idempotent; the compile itself happens at the first such call)."""
    if getattr(model, "_oracle_compiled_layers", None) == backend:
        return
    import torch._dynamo

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, MAX_VARIANTS)
    options = None
    from . import topk
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    if backend == "inductor" and topk.enabled() and topk.works(device):   # routers' top-k: one launch, any engine
        options = {"post_grad_custom_post_pass": topk.post_grad_pass()}
    step = torch.compile(_layer_step, backend=backend, dynamic=False, options=options)
    templates: dict[tuple, dict[str, Any]] = {}
    for layer in decoder_layers(model):
        plain = layer._oracle_plain_forward if hasattr(layer, "_oracle_plain_forward") else type(layer).forward
        layer._oracle_plain_forward = plain
        layer.forward = _routed(layer, plain, step, _share_handles(layer, templates),
                                lambda: model._oracle_compiled_on)
    model._oracle_compiled_layers = backend
    model._oracle_compiled_on = False


@contextlib.contextmanager
def active(model: nn.Module) -> Iterator[None]:
    """Within the block, the model's decoder layers run their compiled step (after `compile_layers`)."""
    saved, model._oracle_compiled_on = model._oracle_compiled_on, True
    try:
        yield
    finally:
        model._oracle_compiled_on = saved


def _kernel_holders(layer: nn.Module) -> dict[str, Any]:
    """The layer's objects that call an oracle op (fused runners, experts), by name within the layer."""
    from .modules import KernelExperts, KernelLinear

    out: dict[str, Any] = {}
    for name, module in layer.named_modules():
        holder = module.runner if isinstance(module, KernelLinear) else \
            module if isinstance(module, KernelExperts) else None
        if holder is not None and all(h is not holder for h in out.values()):
            out[name] = holder
    return out


def _share_handles(layer: nn.Module, templates: dict[tuple, dict[str, Any]]) -> dict[int, int]:
    """Point the layer's traced op handles at the first layer of the same kernel shapes; returns the
    binding (first layer's handle -> this layer's) its calls run under. Without it every layer's
    handles, constants to Dynamo, would compile a code variant of their own."""
    holders = _kernel_holders(layer)
    signature = tuple((name, type(h.kernel).__name__, h.kernel.layer.signature) for name, h in holders.items())
    first = templates.setdefault(signature, holders)
    binding = {}
    for name, holder in holders.items():
        holder.traced_handle = first[name].handle
        if holder.handle != holder.traced_handle:
            binding[holder.traced_handle] = holder.handle
    return binding


def _routed(layer: nn.Module, plain: Any, step: Any, binding: dict[int, int], model_on: Any) -> Any:
    def forward(hidden_states: torch.Tensor, attention_mask: Any = None, position_ids: Any = None,
                past_key_values: Any = None, use_cache: bool = False, position_embeddings: Any = None,
                **kwargs: Any) -> Any:
        idx = layer.self_attn.layer_idx
        cache = getattr(past_key_values, "layers", None)
        static = cache is not None and getattr(cache[idx], "keys", None) is not None and \
            hasattr(cache[idx], "cumulative_length") and not getattr(cache[idx], "is_sliding", False)
        if hidden_states.shape[1] != 1 or not static or not model_on():   # prefill, eager, or another cache
            return plain(layer, hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=past_key_values, use_cache=use_cache,
                         position_embeddings=position_embeddings, **kwargs)
        one = cache[idx]
        for t in (one.keys, one.values, one.cumulative_length):   # transformers marks them for its own
            if hasattr(t, "_dynamo_static_input_type"):           # compile with an identity guard: one
                del t._dynamo_static_input_type                    # recompile per layer; ours are inputs
        with ops.bound(binding):
            return step(layer, plain, hidden_states, attention_mask, position_ids, position_embeddings,
                        one.keys, one.values, one.cumulative_length, kwargs)
    return forward
