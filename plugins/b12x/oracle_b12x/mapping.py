"""How an oracle layer and mode translate into b12x's vocabulary. Pure Python, no torch.

One place for the translation, so the kernels, the planner check and the
conformance test all ask b12x the same question.
"""
from __future__ import annotations

from typing import Any, Mapping

#: oracle activation format of a MoE mode -> b12x ActivationMode value.
ACTIVATION_MODE = {"bf16": "a16", "fp16": "a16", "mxfp8": "a8", "nvfp4": "a4"}

#: oracle MoE activation -> b12x nonlinearity. b12x's "relu2" is the non-gated ReLU^2,
#: which the oracle vocabulary calls relu2_no_mul (as vLLM does).
_B12X_ACTIVATIONS = {
    "silu": "silu",
    "situ": "situ",
    "swigluoai_uninterleave": "swigluoai_uninterleave",
    "relu2_no_mul": "relu2",
    "relu2": "relu2",
}


def b12x_activation(activation: str) -> str:
    """b12x's name for an oracle activation; unknown names pass through for b12x to reject."""
    return _B12X_ACTIVATIONS.get(activation, activation)


def swiglu_args(activation: str, params: Mapping[str, float] | None) -> tuple[float | None, float | None, float | None]:
    """(swiglu_limit, swiglu_alpha, swiglu_beta) as b12x takes them.

    The layer's limit is always passed on (b12x rejects a limit on SiTU and non-gated
    ReLU^2 rather than the plugin dropping it silently); alpha/beta mean the SwiGLU
    alpha/beta only for swigluoai_uninterleave (for SiTU, `beta` is SiTU's own constant).
    """
    params = params or {}
    limit = params.get("limit")
    if activation == "swigluoai_uninterleave":
        return limit, params.get("alpha"), params.get("beta")
    return limit, None, None


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


#: mode -> (recipe, call kind, K padding, input dtype; None = the layer's dtype) of b12x's fixed contract.
_FIXED = {
    "tensor_fp8": ("tensor_fp8", "packed", 128, "float8_e4m3fn"),
    "block_fp8": ("block_fp8", "serialized", 1, "float8_e4m3fn"),
    "mxfp4_w4a4": ("mxfp4", "serialized", 1, "uint8"),
}
#: fp16 layers: MXFP8 runs packed with fp16 input (quantized inside b12x), NVFP4 W4A4 serialized.
_FIXED_FP16 = {
    "mxfp8_w8a8": ("mxfp8", "packed", 128, None),
    "nvfp4_w4a4": ("nvfp4", "serialized", 1, "uint8"),
}


def is_fixed_contract(layer: Any, mode: Any) -> bool:
    """Whether b12x serves (layer, mode) through its fixed contract rather than the BF16 precision one."""
    return mode.name in _FIXED or (layer.dtype == "float16" and mode.name in _FIXED_FP16)


def dense_query_args(layer: Any, mode: Any, *, tokens: int, expected_m: int | None = None
                     ) -> tuple[dict[str, Any], bool]:
    """Keyword arguments of b12x's dense GEMM query for this layer and mode, and whether the
    query is the fixed contract (FixedBlockscaledQuery) rather than the BF16 precision one."""
    k, n = layer.in_features, layer.out_features
    name = mode.name
    fixed = _FIXED.get(name)
    if fixed is None and layer.dtype == "float16":
        fixed = _FIXED_FP16.get(name)          # b12x's BF16 precision contract has no fp16 path
    if fixed is not None:
        recipe, call_kind, pad_to, input_dtype = fixed
        return {"recipe": recipe, "call_kind": call_kind, "max_rows": tokens, "in_features": k,
                "padded_in_features": round_up(k, pad_to), "out_features": n,
                "input_dtype": input_dtype or layer.dtype, "output_dtype": layer.dtype,
                "expected_m": expected_m}, True
    if name.startswith("mxfp8"):
        recipe, padded = "mxfp8", round_up(k, 128)        # pack_weight pads K to 128 with unit scales
    elif name.startswith("nvfp4"):
        recipe, padded = "nvfp4", k                       # NVFP4 packs unpadded (stored K % 16)
    elif name in ("iq2_xs", "iq2_xxs", "q8_0"):
        recipe, padded = name, k
    else:
        raise KeyError(f"no b12x dense query for mode {name!r}")
    activation_mode = mode.params.get("activation_mode", "a16")
    return {"recipe": recipe, "num_tokens": tokens, "in_features": k, "padded_in_features": padded,
            "out_features": n, "activation_mode": activation_mode,
            # NVFP4 W4A4 quantizes activations with the checkpoint's activation scale, if it has one.
            "activation_scale_available": (recipe == "nvfp4" and activation_mode == "quantized"
                                           and getattr(layer, "activation_format", None) == "nvfp4"),
            "expected_m": expected_m}, False
