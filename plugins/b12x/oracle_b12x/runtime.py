"""The device-side requirement: b12x's own `is_supported()` on a detected device.

The engine calls `is_supported(spec, platform)` only for detected platforms (on a
simulated preset it cannot run and the trace says it was assumed). It must be
cheap: `b12x._lib.gating` imports neither cutlass nor triton, and its
`default_is_supported` is exactly what b12x's fused_moe, blockscaled,
block_fp8_linear and embedding ops return. Only the tensor-FP8 and MXFP8 ops add
a check of their own (cutlass's MmaMXF8Op), and that op module is imported only
once the cheap check has passed, i.e. on an SM12x device about to run it anyway.
"""
from __future__ import annotations

from typing import Any

from .library import B12xUnavailableError, load

#: kernel name -> the b12x op whose own is_supported() needs more than the gating check.
_EXTRA_CHECK = {
    "b12x.linear.fp8_tensor": "gemm.tensor_fp8_linear",
    "b12x.linear.mxfp8": "gemm.mxfp8_linear",
}


def is_supported(spec: Any, platform: Any) -> tuple[bool, str | None]:
    try:
        gating = load("_lib.gating")
    except B12xUnavailableError as exc:
        return False, str(exc)
    if not hasattr(gating, "default_is_supported"):  # another b12x layout: ask the op itself
        return _op_check(_EXTRA_CHECK.get(spec.name, "moe.fused_moe"))
    if not gating.default_is_supported(None, requires=("triton",)):
        return False, _explain(gating)
    extra = _EXTRA_CHECK.get(spec.name)
    return _op_check(extra) if extra else (True, None)


def _op_check(module: str) -> tuple[bool, str | None]:
    try:
        ok = bool(load(module).is_supported())
    except B12xUnavailableError as exc:
        return False, str(exc)
    return (True, None) if ok else (False, f"b12x.{module}.is_supported() is false on this device")


def _explain(gating: Any) -> str:
    """Which of b12x's own conditions failed, in its terms."""
    cap = gating.get_compute_capability()
    if cap is None or cap[0] != 12 or cap[1] not in (0, 1):
        where = "no CUDA device" if cap is None else f"compute capability {cap[0]}.{cap[1]}"
        return f"b12x.is_b12x() is false: {where} (b12x needs SM120/SM121)"
    if not gating.has_cutlass_dsl():
        found = gating.cutlass_dsl_version() or "not installed"
        return f"b12x needs nvidia-cutlass-dsl>={gating.MIN_CUTLASS_DSL} (found {found})"
    if not gating.has_triton():
        return "b12x needs triton, which is not importable (pip install triton)"
    return "b12x's default_is_supported() is false"
