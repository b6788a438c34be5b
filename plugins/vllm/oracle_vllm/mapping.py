"""vLLM's words -> oracle facts: quant keys, scalar types, kernel classes, backend flags, the device.

This is the only module that knows how vLLM 0.32 names a layer's quantization
(`QuantKey(dtype, ScaleDesc(dtype, static, GroupShape))`, `ScalarType`), its kernel
choices (`_LINEAR_BACKEND_KERNEL_MAP`, `*MoeBackend` enums) and its platform. Each is
translated into `oracle.integration.layers` facts; the oracle formats come from there.
"""
from __future__ import annotations

from typing import Any

from oracle.integration.layers import ActQuant, WeightQuant
from oracle.platform import Platform

#: vLLM's `linear_backend_per_quant` keys -> the oracle weight formats they cover (config/kernel.py:379)
PER_QUANT_FORMATS = {"fp8_w8a8": ("fp8_tensor", "fp8_channel"), "fp8_block_w8a8": ("fp8_block",),
                     "mixed_precision": ("int4",), "mxfp8": ("mxfp8",), "mxfp4": ("mxfp4",),
                     "nvfp4_w4a16": ("nvfp4",), "nvfp4_w4a4": ("nvfp4",), "w8a16_fp8": ("fp8_channel",)}
#: backend names vLLM's --linear-backend/--moe-backend share with the oracle (same meaning)
SHARED_BACKENDS = ("b12x", "emulation", "torch")

#: the QuantKeys the plugin maps (name in vllm's quant_utils -> role); tests check each
WEIGHT_KEYS = ("kFp8StaticTensorSym", "kFp8StaticChannelSym", "kFp8Static128BlockSym",
               "kFp8Static128BlockE8M0Sym", "kMxfp8Static", "kNvfp4Static", "kMxfp4Static",
               "kInt4Static", "kInt4Static32", "kInt4StaticAsym", "kInt4Static32Asym")
ACTIVATION_KEYS = ("kFp8StaticTensorSym", "kFp8DynamicTensorSym", "kFp8DynamicTokenSym", "kFp8Dynamic128Sym",
                   "kNvfp4Dynamic", "kMxfp8Dynamic")


def _dtype_name(dtype: Any) -> str:
    name = getattr(dtype, "name", None)          # vllm ScalarType: uint4b8, int4, ...
    if name is not None and not str(dtype).startswith("torch."):
        return str(name)
    return str(dtype).removeprefix("torch.")


def _scale_kind(dtype: Any) -> str:
    return {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "uint8": "e8m0", "float8_e8m0fnu": "e8m0",
            "float8_e4m3fn": "e4m3", "float8_e4m3fnuz": "e4m3"}.get(_dtype_name(dtype), _dtype_name(dtype))


def _granularity(group_shape: Any, group_size: int | None) -> tuple[str, int | None, tuple[int, int] | None]:
    row, col = int(group_shape[0]), int(group_shape[1])
    if (row, col) == (-1, -1):
        return "tensor", None, None
    if (row, col) == (-1, 1):
        return "channel", None, None
    if row == 1 and col == -1:              # per token (activations) / group of unstated size (int weights)
        return ("group", group_size, None) if group_size else ("token", None, None)
    if row == 1:
        return "group", col, None
    return "block", None, (row, col)


def _element(dtype: Any, scale: Any) -> str:
    name = _dtype_name(dtype)
    if name.startswith("float8_e4m3"):
        return "float8_e4m3"
    if name in ("uint8",) and scale is not None:      # FP4_DTYPE is torch.uint8 (two E2M1 per byte)
        return "fp4_e2m1"
    if name in ("uint4b8", "int4"):
        return "int4"
    if name == "uint4":
        return "uint4"
    return name


def weight_quant(key: Any, group_size: int | None = None) -> WeightQuant:
    """A vLLM weight QuantKey -> WeightQuant; `group_size` where the key says "group" without a size."""
    scale = key.scale
    gran, group, block = _granularity(scale.group_shape, group_size if group_size and group_size > 0 else None)
    if gran == "token":              # an int weight key with an unstated group: per channel
        gran = "channel"
    return WeightQuant(element=_element(key.dtype, scale), granularity=gran, group_size=group, block=block,
                       scale=_scale_kind(scale.dtype), zero_point=not getattr(key, "symmetric", True))


def act_quant(key: Any | None) -> ActQuant | None:
    """A vLLM activation QuantKey (None: 16-bit activations) -> ActQuant."""
    if key is None:
        return None
    scale = key.scale
    gran, group, _ = _granularity(scale.group_shape, None)
    return ActQuant(element=_element(key.dtype, scale), dynamic=not scale.static, granularity=gran, group_size=group,
                    scale=_scale_kind(scale.dtype))


def scalar_weight_quant(scalar_type: Any, group_size: int | None, zero_points: bool = False) -> WeightQuant:
    """A WNA16 `ScalarType` (uint4b8, uint4, ...) with vLLM's group size (-1: per channel) -> WeightQuant."""
    group = group_size if group_size and group_size > 0 else None
    return WeightQuant(element=_element(scalar_type, None), granularity="group" if group else "channel",
                       group_size=group, scale="fp16", zero_point=zero_points)


# ---------------------------------------------------------------- vLLM's choices, in oracle names
def linear_backend_of(kernel_cls: type | None) -> str | None:
    """The oracle backend a vLLM linear kernel class belongs to (via vLLM's own backend map), if any."""
    if kernel_cls is None:
        return None
    from vllm.model_executor.kernels.linear import _LINEAR_BACKEND_KERNEL_MAP
    for name in SHARED_BACKENDS:
        if kernel_cls in _LINEAR_BACKEND_KERNEL_MAP.get(name, ()):
            return name
    return None


def moe_backend_of(backend: Any) -> str | None:
    """The oracle backend a vLLM MoE backend enum member stands for, if any."""
    value = str(getattr(backend, "value", backend) or "").lower()
    return value if value in SHARED_BACKENDS else None


def kernel_flags(kernel_config: Any) -> tuple[Any, Any, list[str]]:
    """vLLM's --linear-backend (with linear_backend_per_quant) and --moe-backend as oracle choices.

    Only names both sides define carry over (same meaning: a backend without a kernel for the layer
    falls back to automatic selection); others are reported as notes."""
    notes: list[str] = []

    def carry(flag: str, value: Any) -> str | None:
        if value in (None, "auto"):
            return None
        if value in SHARED_BACKENDS:
            return value
        notes.append(f"vLLM's {flag} {value} names no oracle backend; the oracle selects automatically")
        return None

    linear: Any = carry("--linear-backend", getattr(kernel_config, "linear_backend", None))
    per_quant = getattr(kernel_config, "linear_backend_per_quant", None) or {}
    if per_quant:
        table: dict[str, str] = {"default": linear or "auto"}
        for quant, name in per_quant.items():
            chosen = carry(f"linear_backend_per_quant[{quant}]", name)
            for fmt in PER_QUANT_FORMATS.get(quant, ()):
                table[fmt] = chosen or "auto"
        linear = table
    moe = carry("--moe-backend", getattr(kernel_config, "moe_backend", None))
    return linear, moe, notes


def platform_from_vllm(preset: str | None = None) -> Platform:
    """vLLM's device as an oracle Platform (or the named preset, for shadow reports of another machine)."""
    if preset:
        return Platform.preset(preset)
    from vllm.platforms import current_platform as cp
    if cp.is_cpu():
        return Platform.cpu()
    cap = cp.get_device_capability()
    vendor = "amd" if cp.is_rocm() else ("intel" if cp.is_xpu() else "nvidia")
    capability = (cap.major, cap.minor) if cap is not None else None
    return Platform(vendor=vendor, capability=capability, device_name=str(cp.get_device_name()))
