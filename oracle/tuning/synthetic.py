"""Synthetic checkpoint tensors and inputs for timing a layer (torch; imported by the runner only).

Weights are random normal values quantized to the layer's checkpoint format by a plugin's
`quantize_weight` hook (oracle-emulation offers the reference codec of every format), named as
in `oracle.kernel`, so every candidate receives exactly what a loader would hand it. The
quantizer is passed in (`Quantize`): the core names no plugin.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import torch

from ..formats import E2M1_MAX, E4M3_MAX, torch_dtype

#: (weight=, weight_format=, group_size=) -> checkpoint tensors, or None: e.g. `registry.pm.hook.quantize_weight`
Quantize = Callable[..., "dict[str, torch.Tensor] | None"]
#: int4 checkpoints carry a group size; a layer that states none is timed at the common one
DEFAULT_INT4_GROUP = 128

#: amax of the synthetic activations (randn): a stand-in calibration for static input scales
ACTIVATION_AMAX = 6.0


_generators: dict[str, "torch.Generator"] = {}


def _gen(device: torch.device) -> torch.Generator:
    """A private, seeded generator per device: synthetic data never touches torch's default one
    (which a failed graph capture inside a plugin's kernel could leave unusable)."""
    import torch
    key = str(device)
    if key not in _generators:
        _generators[key] = torch.Generator(device=device)
        _generators[key].manual_seed(0)
    return _generators[key]


def randn(*shape: int, device: torch.device) -> torch.Tensor:
    import torch
    return torch.randn(*shape, device=device, generator=_gen(device))


def _quantize(quantize: Quantize, w: torch.Tensor, fmt: str, group_size: int | None) -> dict[str, torch.Tensor]:
    group = (group_size or DEFAULT_INT4_GROUP) if fmt == "int4" else None
    found = quantize(weight=w, weight_format=fmt, group_size=group)
    if found is None:
        raise RuntimeError(f"no plugin quantizes {fmt} weights (the quantize_weight hook); oracle tune makes its "
                           "synthetic weights with one: install oracle-emulation (pip install -e plugins/emulation)")
    return found


def _input_global_scale(lead: list[int], device: torch.device) -> torch.Tensor:
    """NVFP4's per-tensor input scale for the synthetic activations: amax / (E2M1 max x E4M3 max)."""
    import torch
    return torch.full(lead or [], ACTIVATION_AMAX / (E2M1_MAX * E4M3_MAX), device=device)


def linear_weights(layer: Any, device: torch.device, quantize: Quantize) -> dict[str, torch.Tensor]:
    n, k = layer.out_features, layer.in_features
    w = randn(n, k, device=device) * 0.02
    q = {key: v for key, v in _quantize(quantize, w, layer.weight_format, layer.group_size).items()
         if v is not None}
    if layer.weight_format == "nvfp4":
        q["input_global_scale"] = _input_global_scale([], device).reshape(())
    if layer.has_bias:
        q["bias"] = randn(n, device=device).to(torch_dtype(layer.dtype))
    return q


def moe_weights(layer: Any, device: torch.device, quantize: Quantize) -> dict[str, torch.Tensor]:
    import torch
    e = layer.num_experts // layer.ep_size
    h, i = layer.hidden_size, layer.intermediate_size // layer.tp_size
    rows = layer.w13_rows
    out: dict[str, torch.Tensor] = {}
    for name, shape in (("w13", (e, rows, h)), ("w2", (e, h, i))):
        q = _quantize(quantize, randn(*shape, device=device) * 0.02, layer.weight_format, layer.group_size)
        out[name] = q["weight"]
        for role, suffix in (("weight_scale", "_scale"), ("weight_global_scale", "_global_scale"),
                             ("weight_zero_point", "_zero_point")):
            if q.get(role) is not None:
                out[name + suffix] = q[role]
        if layer.weight_format == "nvfp4":
            out[name + "_input_scale"] = _input_global_scale([e], device)
    if layer.has_bias:
        dtype = torch_dtype(layer.dtype)
        out["w13_bias"] = randn(e, rows, device=device).to(dtype)
        out["w2_bias"] = randn(e, h, device=device).to(dtype)
    return out


def embedding_weights(layer: Any, device: torch.device, quantize: Quantize) -> dict[str, torch.Tensor]:
    w = randn(layer.num_embeddings, layer.embedding_dim, device=device) * 0.02
    return {"weight": _quantize(quantize, w, layer.weight_format, None)["weight"]}


def weights(layer: Any, device: torch.device, quantize: Quantize) -> dict[str, torch.Tensor]:
    """Checkpoint tensors for `layer` (one rank), on `device`, made by `quantize`."""
    make = {"linear": linear_weights, "moe": moe_weights, "embedding": embedding_weights}[layer.op]
    return make(layer, device, quantize)


def inputs(layer: Any, m: int, device: torch.device) -> tuple:
    """The positional arguments of `apply` for M tokens."""
    import torch
    if layer.op == "linear":
        return (randn(m, layer.in_features, device=device).to(torch_dtype(layer.dtype)),)
    if layer.op == "moe":
        e = layer.num_experts // layer.ep_size
        x = randn(m, layer.hidden_size, device=device).to(torch_dtype(layer.dtype))
        logits = randn(m, e, device=device)
        top = min(layer.top_k, e)
        weights_, ids = torch.softmax(logits, dim=-1).topk(top, dim=-1)
        return x, weights_.float().contiguous(), ids.to(torch.int32).contiguous()
    return (torch.randint(0, layer.num_embeddings, (m,), device=device, generator=_gen(device)),)


def expected_shape(layer: Any, m: int) -> tuple[int, ...]:
    if layer.op == "linear":
        return (m, layer.out_features)
    if layer.op == "moe":
        return (m, layer.hidden_size)
    return (m, layer.embedding_dim)


def weight_bytes(tensors: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())
