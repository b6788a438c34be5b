"""Engine-neutral quantization facts -> oracle layers.

Engines name the same facts differently (vLLM: `QuantKey(dtype, ScaleDesc(static,
group_shape))` and `ScalarType`; SGLang: its own quant configs). An adapter states them
as `WeightQuant` / `ActQuant`; this module alone decides which oracle weight format,
activation format and activation scale they are, so two engines cannot disagree on it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..errors import InputError
from ..layer import LinearLayer, MoELayer

Element = Literal["float8_e4m3", "int4", "uint4", "int8", "fp4_e2m1", "bf16", "fp16", "fp32"]
Granularity = Literal["tensor", "channel", "token", "group", "block"]


@dataclass(frozen=True)
class WeightQuant:
    """How an engine stores one layer's weights: element type, scale granularity, group or block."""

    element: str
    granularity: str = "tensor"
    group_size: int | None = None          # along K, for "group"
    block: tuple[int, int] | None = None   # (rows, cols), for "block"
    scale: str = "fp32"                    # scale encoding: fp32 | fp16 | bf16 | e8m0 | e4m3
    zero_point: bool = False


@dataclass(frozen=True)
class ActQuant:
    """How an engine quantizes one layer's activations (None in the layer call: not quantized)."""

    element: str
    dynamic: bool
    granularity: str = "tensor"            # tensor | token | group
    group_size: int | None = None
    scale: str = "fp32"                    # scale encoding: fp32 | e8m0 (MX) | e4m3 (NVFP4)


_FLOAT_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def weight_format(w: WeightQuant) -> tuple[str, int | None, tuple[int, int] | None]:
    """(oracle weight format, group_size, weight_block) of an engine's weight description."""
    el, gran = w.element, w.granularity
    if el in _FLOAT_DTYPES:
        return el, None, None
    if el == "float8_e4m3":
        if gran == "tensor":
            return "fp8_tensor", None, None
        if gran == "channel":
            return "fp8_channel", None, None
        if gran == "block" and w.block is not None:
            return "fp8_block", None, tuple(w.block)  # type: ignore[return-value]
        if gran == "group" and w.group_size == 32 and w.scale == "e8m0":
            return "mxfp8", None, None
    if el in ("int4", "uint4") and gran in ("group", "channel"):
        return "int4", (w.group_size if gran == "group" else None), None
    if el == "fp4_e2m1" and gran == "group":
        if w.group_size == 16 and w.scale == "e4m3":
            return "nvfp4", None, None
        if w.group_size == 32 and w.scale == "e8m0":
            return "mxfp4", None, None
    raise InputError(f"no oracle weight format stores {el} weights with {gran} scales"
                     + (f" (group {w.group_size}, {w.scale})" if w.group_size else "")
                     + (f" (block {list(w.block)})" if w.block else ""), field="weight_format")


def activation(a: ActQuant | None) -> tuple[str | None, str | None]:
    """(activation_format, activation_scale) of an engine's activation description (None: 16-bit)."""
    if a is None:
        return None, None
    if a.element == "float8_e4m3" and a.granularity == "group" and a.group_size == 32 and a.scale == "e8m0":
        return "mxfp8", None
    if a.element == "float8_e4m3":
        kind = {"tensor": "tensor", "token": "token", "group": "group"}.get(a.granularity)
        if kind is None:
            raise InputError(f"FP8 activations with {a.granularity} scales have no oracle activation scale",
                             field="activation_scale")
        if not a.dynamic and kind != "tensor":
            raise InputError(f"static FP8 activations with {a.granularity} scales have no oracle activation scale "
                             "(static scales are per tensor)", field="activation_scale")
        return "fp8", ("dynamic_" if a.dynamic else "static_") + kind
    if a.element == "fp4_e2m1":
        return "nvfp4", None
    raise InputError(f"no oracle activation format quantizes activations to {a.element}", field="activation_format")


def linear_layer(name: str, *, in_features: int, out_features: int, weight: WeightQuant,
                 act: ActQuant | None = None, has_bias: bool = False, dtype: str = "bfloat16",
                 tp_size: int = 1) -> LinearLayer:
    """The LinearLayer of one engine linear (shapes per rank, as the kernel sees them)."""
    fmt, group, block = weight_format(weight)
    act_fmt, act_scale = activation(act)
    return LinearLayer(name=name, in_features=in_features, out_features=out_features, weight_format=fmt,
                       activation_format=act_fmt, activation_scale=act_scale, group_size=group,
                       weight_block=block, has_bias=has_bias, dtype=dtype, tp_size=tp_size)


def moe_layer(name: str, *, num_experts: int, top_k: int, hidden_size: int, intermediate_size: int,
              weight: WeightQuant, act: ActQuant | None = None, **fields: Any) -> MoELayer:
    """The MoELayer of one engine fused-MoE layer (`intermediate_size` is the full size)."""
    fmt, group, block = weight_format(weight)
    act_fmt, act_scale = activation(act)
    return MoELayer(name=name, num_experts=num_experts, top_k=top_k, hidden_size=hidden_size,
                    intermediate_size=intermediate_size, weight_format=fmt, activation_format=act_fmt,
                    activation_scale=act_scale, group_size=group, weight_block=block, **fields)


def torch_dtype_name(dtype: Any) -> str:
    """'bfloat16' for torch.bfloat16 (or its str), without importing torch."""
    return str(dtype).removeprefix("torch.")
