"""The vocabulary of formats, ops and MoE activations, with the facts of each format.

Every other module -- the engine and every plugin -- takes its strings and numbers from
here (a typo in a policy, a kernel declaration or a layer is caught against one list, and
a block size or float limit is written once). No torch: `torch_dtype` imports it lazily.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

WeightFormat = Literal[
    "bf16", "fp16", "fp32",
    "fp8_tensor", "fp8_channel", "fp8_block",
    "mxfp8", "nvfp4", "mxfp4", "int4", "int8",
    "q8_0", "iq2_xs", "iq2_xxs",
]
ActivationFormat = Literal["bf16", "fp16", "fp8", "mxfp8", "nvfp4", "mxfp4", "int8"]
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

#: MoE activations whose expert FC1 produces gate and up halves (w13 has 2*I rows).
GATED_ACTIVATIONS = frozenset({"silu", "situ", "swigluoai", "swigluoai_uninterleave", "gelu"})
#: Gated activations whose gate and up rows alternate (gate = h[:, 0::2], as gpt-oss stores them);
#: the others stack them ([gate; up], the w13 layout of oracle.kernel).
INTERLEAVED_ACTIVATIONS = frozenset({"swigluoai"})
#: Each MoE activation's parameters (MoELayer.activation_params) and their defaults; None: off.
#: `limit` clamps gate from above and up to [-limit, limit]; situ's beta/linear_beta scale its
#: tanh; swigluoai's alpha scales the sigmoid and beta offsets up (defaults as gpt-oss).
MOE_ACTIVATION_DEFAULTS: dict[str, dict[str, float | None]] = {
    "silu": {"limit": None},
    "gelu": {"limit": None},
    "situ": {"beta": 4.0, "linear_beta": 25.0},
    "swigluoai": {"limit": 7.0, "alpha": 1.702, "beta": 1.0},
    "swigluoai_uninterleave": {"limit": 7.0, "alpha": 1.702, "beta": 1.0},
    "relu2": {},
    "relu2_no_mul": {},
}
#: The named parameters each MoE activation takes; any other is an error, so a relu2 layer carrying
#: SwiGLU's limit/alpha is refused before selection, not by a kernel at load.
ACTIVATION_PARAMS: dict[str, tuple[str, ...]] = {act: tuple(params) for act, params in MOE_ACTIVATION_DEFAULTS.items()}


#: Largest finite magnitude of FP8 E4M3 (the "fn" variant, no infinities): 1.75 * 2**8.
E4M3_MAX = 448.0
#: Largest magnitude of FP4 E2M1: 1.5 * 2**2.
E2M1_MAX = 6.0
#: Elements along K that share one scale.
MX_BLOCK = 32       # OCP MX (mxfp8, mxfp4): one E8M0 scale per 32
NV_BLOCK = 16       # NVFP4: one E4M3 scale per 16 (plus an fp32 global scale)
FP8_BLOCK = 128     # fp8_block: 128x128 weight blocks; activations in 1x128 groups
#: GGML block codecs: (weights per block, encoded bytes per block).
CODEC_BLOCKS: dict[str, tuple[int, int]] = {"q8_0": (32, 34), "iq2_xs": (256, 74), "iq2_xxs": (256, 66)}


def torch_dtype(name: str):
    """The torch dtype of a layer dtype name ("bfloat16" -> torch.bfloat16); imports torch."""
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPES)}")
    import torch

    return getattr(torch, name)


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
    FormatFacts("fp8_block", "e4m3", 8, f"fp32 or ue8m0 per {FP8_BLOCK}x{FP8_BLOCK} block", (FP8_BLOCK, FP8_BLOCK),
                note=f"activations quantized per 1x{FP8_BLOCK} group"),
    FormatFacts("mxfp8", "e4m3", 8, f"e8m0 per {MX_BLOCK} along K", (1, MX_BLOCK), note="OCP MX"),
    FormatFacts("nvfp4", "e2m1", 4, f"e4m3 per {NV_BLOCK} along K + fp32 global", (1, NV_BLOCK),
                note="two elements per byte, low nibble first"),
    FormatFacts("mxfp4", "e2m1", 4, f"e8m0 per {MX_BLOCK} along K", (1, MX_BLOCK), note="OCP MX"),
    FormatFacts("int4", "int4", 4, "fp16 per group (+ zero point)", (1, 128),
                note="GPTQ/AWQ/compressed-tensors pack-quantized; group 32/64/128"),
    FormatFacts("int8", "int8", 8, "fp32 per output channel or per group along K", (1, 0),
                note="symmetric (compressed-tensors W8A8 / W8A16); int8 activations per token"),
    *(FormatFacts(name, element, bits, f"{scale} per {weights}", (1, weights), block_bytes=size,
                  note="GGML block codec")
      for name, element, bits, scale in (("q8_0", "int8", 8, "fp16"), ("iq2_xs", "2-bit codebook", 2, "fp16"),
                                         ("iq2_xxs", "2-bit codebook", 2, "fp16"))
      for weights, size in [CODEC_BLOCKS[name]]),
)}


def is_quantized(weight_format: str) -> bool:
    return weight_format not in UNQUANTIZED_FORMATS
