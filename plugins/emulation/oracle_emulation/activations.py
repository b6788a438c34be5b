"""Activation quantize-dequantize: the rounding a real kernel applies to its inputs.

A W4A8 or W4A4 kernel quantizes activations on the fly; emulating only the weights
would hide that error. Each function returns x's dtype with values exactly on the
format's grid (times its scales):
  fp8    E4M3 with an fp32 scale per tensor (static `scale` or dynamic amax/448),
         per token (row), or per 1x128 group along K
  mxfp8  E4M3, E8M0 scale per 32 (pow2-ceil of amax/448, as the b12x/cuBLAS quantizers)
  mxfp4  E2M1, E8M0 scale per 32 (pow2-ceil of amax/6)
  nvfp4  E2M1, E4M3 scale per 16 times an fp32 global scale (ModelOpt input_scale;
         dynamic amax/(6*448) per tensor when none is given)
  int8   symmetric int8 per token (row): scale amax/127, round half to even, clamp to +-127
         (compressed-tensors' W8A8/W4A8 dynamic token activations)
MX scale rule (mxfp8, mxfp4): the E8M0 exponent is ceil(log2(amax / element max)), the smallest
power of two that keeps the block's largest value on the grid, as the b12x and cuBLAS quantizers
that the emulation stands for compute it. It is neither the OCP MX v1.0 rule (floor(log2 amax) minus
the element's emax, which clips the top of the block) nor compressed-tensors' (amax rounded to a power
of two at the element's mantissa width, then floor); tests/test_emulation_mx_rule.py pins all three.
On CUDA a Triton kernel (activations_triton) does the same arithmetic in one pass
(set ORACLE_EMULATION_QDQ=eager to run the torch functions instead); the eager torch
functions here are the reference, and both round bit for bit alike.
"""
from __future__ import annotations

import os
from typing import Callable

import torch

from oracle.formats import FP8_BLOCK, MX_BLOCK, NV_BLOCK

from .formats import e2m1, e8m0, fp8
from .formats.ieee import div as _ieee_div


ACT_BLOCK = MX_BLOCK
FP8_GROUP = FP8_BLOCK
GRANULARITIES = ("tensor", "token", "group")


def _safe(s: torch.Tensor) -> torch.Tensor:
    return torch.where(s > 0, s, torch.ones_like(s))


def fp8_qdq(x: torch.Tensor, granularity: str = "tensor", scale: torch.Tensor | None = None) -> torch.Tensor:
    xf = x.float()
    if scale is not None:                                    # static per-tensor scale
        s = scale.float().reshape(())
        return (fp8.to_e4m3(xf / s).float() * s).to(x.dtype)
    if granularity == "tensor":
        s = _safe(_ieee_div(xf.abs().amax(), fp8.E4M3_MAX))
        return (fp8.to_e4m3(xf / s).float() * s).to(x.dtype)
    if granularity == "token":
        s = _safe(_ieee_div(xf.abs().amax(dim=-1, keepdim=True), fp8.E4M3_MAX))
        return (fp8.to_e4m3(xf / s).float() * s).to(x.dtype)
    if granularity != "group":
        raise ValueError(f"unknown fp8 activation granularity {granularity!r}; expected {GRANULARITIES}")
    k = xf.shape[-1]
    pad = (-k) % FP8_GROUP
    if pad:
        xf = torch.nn.functional.pad(xf, (0, pad))
    g = xf.unflatten(-1, (-1, FP8_GROUP))
    s = _safe(_ieee_div(g.abs().amax(dim=-1, keepdim=True), fp8.E4M3_MAX))
    out = (fp8.to_e4m3(g / s).float() * s).flatten(-2)
    return out[..., :k].to(x.dtype)


def _mx_qdq(x: torch.Tensor, element_max: float) -> torch.Tensor:
    g = x.float().unflatten(-1, (-1, ACT_BLOCK))
    amax = g.abs().amax(dim=-1, keepdim=True)
    exponent = torch.where(amax > 0, e8m0.ceil_log2(_ieee_div(amax, element_max)), torch.full_like(amax, -127, dtype=torch.int32))
    byte = e8m0.encode_exponent(exponent)
    s, inv = e8m0.decode(byte), e8m0.decode(254 - byte)   # 2**e and its exact inverse 2**-e
    v = g * inv                                           # exact: a power-of-two scaling
    if element_max == fp8.E4M3_MAX:
        q = fp8.to_e4m3(v).float()
    else:
        q = e2m1.round_to_e2m1(v)
    return (q * s).flatten(-2).to(x.dtype)


def mxfp8_qdq(x: torch.Tensor) -> torch.Tensor:
    return _mx_qdq(x, fp8.E4M3_MAX)


def mxfp4_qdq(x: torch.Tensor) -> torch.Tensor:
    return _mx_qdq(x, e2m1.E2M1_MAX)


def int8_qdq(x: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    s = _safe(_ieee_div(xf.abs().amax(dim=-1, keepdim=True), 127.0))
    return (torch.round(xf / s).clamp(-127, 127) * s).to(x.dtype)


def nvfp4_qdq(x: torch.Tensor, global_scale: torch.Tensor | None = None) -> torch.Tensor:
    xf = x.float()
    if global_scale is None:
        gs = _safe(_ieee_div(xf.abs().amax(), e2m1.E2M1_MAX * fp8.E4M3_MAX))
    else:
        gs = global_scale.float().reshape(())
    blocks = xf.unflatten(-1, (-1, NV_BLOCK))
    s = fp8.to_e4m3(_ieee_div(blocks.abs().amax(dim=-1, keepdim=True), e2m1.E2M1_MAX) / gs).float() * gs
    q = e2m1.round_to_e2m1(blocks / _safe(s))
    return (q * s).flatten(-2).to(x.dtype)


_EAGER: dict[str, Callable[..., torch.Tensor]] = {
    "fp8": fp8_qdq, "mxfp8": mxfp8_qdq, "mxfp4": mxfp4_qdq, "nvfp4": nvfp4_qdq, "int8": int8_qdq,
}
#: formats activations_triton implements (the others run eagerly on CUDA too)
_TRITON_FORMATS = frozenset({"fp8", "mxfp8", "mxfp4", "nvfp4"})
BLOCK_OF = {"mxfp8": ACT_BLOCK, "mxfp4": ACT_BLOCK, "nvfp4": NV_BLOCK}


def _backend() -> str:
    return os.environ.get("ORACLE_EMULATION_QDQ", "triton")


_TRITON_FAILED: set[str] = set()


def _triton(x: torch.Tensor, fmt: str, params: dict) -> torch.Tensor:
    from . import activations_triton as tk

    if fmt == "fp8":
        scale = params.get("scale")
        granularity = params.get("granularity", "tensor")
        if scale is None and granularity == "tensor":   # dynamic per tensor: the kernel divides the amax
            return tk.qdq(x, tk.FP8_STATIC, scale=tk.abs_max(x), divisor=fp8.E4M3_MAX)
        if scale is not None:
            return tk.qdq(x, tk.FP8_STATIC, scale=scale.float().reshape(1).to(x.device))
        if granularity not in GRANULARITIES:
            raise ValueError(f"unknown fp8 activation granularity {granularity!r}; expected {GRANULARITIES}")
        return tk.qdq(x, tk.FP8_DYNAMIC, group=FP8_GROUP if granularity == "group" else None)
    if fmt == "nvfp4":
        g = params.get("global_scale")
        if g is None:
            return tk.qdq(x, tk.NVFP4, scale=tk.abs_max(x), divisor=e2m1.E2M1_MAX * fp8.E4M3_MAX)
        return tk.qdq(x, tk.NVFP4, scale=g.float().reshape(1).to(x.device))
    return tk.qdq(x, tk.MXFP8 if fmt == "mxfp8" else tk.MXFP4)


def quantize_dequantize(x: torch.Tensor, fmt: str, **params) -> torch.Tensor:
    """Round `x` through activation format `fmt` ("bf16"/"fp16" leave it as is)."""
    if fmt in ("bf16", "fp16"):
        return x
    fn = _EAGER.get(fmt)
    if fn is None:
        raise ValueError(f"no activation emulation for {fmt!r}; expected bf16, fp16, {', '.join(_EAGER)}")
    block = BLOCK_OF.get(fmt)
    if block and x.shape[-1] % block:
        from oracle.errors import TensorError
        raise TensorError("x", f"last dimension divisible by {block} ({fmt} activation blocks)",
                          f"shape {list(x.shape)}")
    if x.is_cuda and _backend() == "triton" and fmt in _TRITON_FORMATS and fmt not in _TRITON_FAILED:
        try:
            return _triton(x, fmt, params)
        except Exception as exc:  # a compiler problem must not stop the reference: run eagerly, on the GPU
            _TRITON_FAILED.add(fmt)
            import structlog
            structlog.get_logger("oracle_emulation").warning(
                "activation_kernel_failed", format=fmt, error=f"{type(exc).__name__}: {exc}"[:500],
                fallback="eager torch on the same CUDA device")
    return fn(x, **params)
