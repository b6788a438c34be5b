"""The vocabulary of formats, ops and MoE activations, with the facts of each format.

Every other module takes its strings from here, so a typo in a policy, a kernel
declaration or a layer is caught against one list.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

WeightFormat = Literal[
    "bf16", "fp16", "fp32",
    "fp8_tensor", "fp8_channel", "fp8_block",
    "mxfp8", "nvfp4", "mxfp4", "int4",
    "q8_0", "iq2_xs", "iq2_xxs",
]
ActivationFormat = Literal["bf16", "fp16", "fp8", "mxfp8", "nvfp4", "mxfp4"]
Op = Literal["linear", "moe", "embedding"]
MoEActivation = Literal[
    "silu", "situ", "swigluoai", "swigluoai_uninterleave", "relu2", "relu2_no_mul", "gelu",
]
DType = Literal["bfloat16", "float16", "float32"]
#: How FP8 activations get their scale: one static per-tensor scale from the checkpoint
#: (`input_scale`), or computed at run time per tensor, per token (row), or per 1 x K-block
#: group (1x128 for 128x128 weight blocks; the group width is the weight block's K).
ActivationScale = Literal["static_tensor", "dynamic_tensor", "dynamic_token", "dynamic_group"]

WEIGHT_FORMATS: tuple[str, ...] = get_args(WeightFormat)
ACTIVATION_FORMATS: tuple[str, ...] = get_args(ActivationFormat)
OPS: tuple[str, ...] = get_args(Op)
MOE_ACTIVATIONS: tuple[str, ...] = get_args(MoEActivation)
DTYPES: tuple[str, ...] = get_args(DType)
ACTIVATION_SCALES: tuple[str, ...] = get_args(ActivationScale)
#: Weight formats whose scales cover a 2-D block that a checkpoint chooses (`weight_block`).
BLOCK_WEIGHT_FORMATS = frozenset({"fp8_block"})

UNQUANTIZED_FORMATS = frozenset({"bf16", "fp16", "fp32"})
#: Activation formats that do not quantize ("A16").
UNQUANTIZED_ACTIVATIONS = frozenset({"bf16", "fp16"})

#: MoE activations whose expert FC1 produces gate and up halves (w13 has 2*I rows).
GATED_ACTIVATIONS = frozenset({"silu", "situ", "swigluoai", "swigluoai_uninterleave", "gelu"})


@dataclass(frozen=True)
class FormatFacts:
    """What a weight format is, as the checkpoint stores it."""

    name: str
    element: str            # element encoding
    bits: int               # bits per stored element (codecs: average bits per weight)
    scale: str              # scale encoding
    block: tuple[int, int] | None   # (rows, cols) sharing one scale; None = whole tensor
    block_bytes: int | None = None  # GGML codecs: bytes per encoded block
    note: str = ""

    @property
    def quantized(self) -> bool:
        return self.name not in UNQUANTIZED_FORMATS


FORMAT_FACTS: dict[str, FormatFacts] = {f.name: f for f in (
    FormatFacts("bf16", "bf16", 16, "none", None),
    FormatFacts("fp16", "fp16", 16, "none", None),
    FormatFacts("fp32", "fp32", 32, "none", None),
    FormatFacts("fp8_tensor", "e4m3", 8, "fp32 per tensor", None,
                note="plus an activation scale when static"),
    FormatFacts("fp8_channel", "e4m3", 8, "fp32 per output channel", (1, 0),
                note="activations per token (compressed-tensors)"),
    FormatFacts("fp8_block", "e4m3", 8, "fp32 or ue8m0 per 128x128 block", (128, 128),
                note="activations quantized per 1x128 group"),
    FormatFacts("mxfp8", "e4m3", 8, "e8m0 per 32 along K", (1, 32), note="OCP MX"),
    FormatFacts("nvfp4", "e2m1", 4, "e4m3 per 16 along K + fp32 global", (1, 16),
                note="two elements per byte, low nibble first"),
    FormatFacts("mxfp4", "e2m1", 4, "e8m0 per 32 along K", (1, 32), note="OCP MX"),
    FormatFacts("int4", "int4", 4, "fp16 per group (+ zero point)", (1, 128),
                note="GPTQ/AWQ/compressed-tensors pack-quantized; group 32/64/128"),
    FormatFacts("q8_0", "int8", 8, "fp16 per 32", (1, 32), block_bytes=34, note="GGML block codec"),
    FormatFacts("iq2_xs", "2-bit codebook", 2, "per 256", (1, 256), block_bytes=74,
                note="GGML block codec"),
    FormatFacts("iq2_xxs", "2-bit codebook", 2, "per 256", (1, 256), block_bytes=66,
                note="GGML block codec"),
)}

#: GGML block codecs: (block size in weights, encoded block bytes).
CODEC_BLOCKS: dict[str, tuple[int, int]] = {"q8_0": (32, 34), "iq2_xs": (256, 74), "iq2_xxs": (256, 66)}


def is_quantized(weight_format: str) -> bool:
    return weight_format not in UNQUANTIZED_FORMATS
