"""Per-format quantizers (float weights -> checkpoint tensors) and dequantizers (back).

Each weight format's module offers `quantize(w, ...) -> dict of checkpoint tensors`
(named as in `oracle.kernel`) and `dequantize(...) -> float32`. `codec_for` maps a
weight-format name to its module; this package imports torch.
"""
from __future__ import annotations

from types import ModuleType


def codec_for(weight_format: str) -> ModuleType:
    """The module that packs and unpacks `weight_format` (imported on demand)."""
    import importlib

    module = {
        "fp8_tensor": "fp8", "fp8_channel": "fp8", "fp8_block": "fp8",
        "mxfp8": "mxfp", "mxfp4": "mxfp", "nvfp4": "nvfp4", "int4": "int4", "int8": "int8",
        "q8_0": "ggml_q8_0", "iq2_xs": "ggml_iq2", "iq2_xxs": "ggml_iq2",
    }.get(weight_format)
    if module is None:
        raise KeyError(f"no emulation codec for weight format {weight_format!r}")
    return importlib.import_module(f"{__name__}.{module}")
