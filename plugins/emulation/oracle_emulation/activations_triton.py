"""Triton kernels for activation quantize-dequantize on CUDA: one pass, read x, write qdq(x).

They compute exactly what the eager functions in `activations` compute (same IEEE
divisions, E4M3 and E2M1 rounding done arithmetically with ties to even), so CPU and
GPU agree bit for bit; tests run them under TRITON_INTERPRET=1 on the CPU as well.
Each program handles NB blocks of B elements of one row.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from oracle.formats import E2M1_MAX, E4M3_MAX

# the format limits, as compile-time constants the kernels below may read
_E4M3_MAX = tl.constexpr(E4M3_MAX)
_E2M1_MAX = tl.constexpr(E2M1_MAX)

# modes
FP8_DYNAMIC, FP8_STATIC, MXFP8, MXFP4, NVFP4 = 0, 1, 2, 3, 4


@triton.jit
def _rne(t):
    """Round to nearest integer, ties to even (t >= 0, small)."""
    r = tl.floor(t + 0.5)
    odd = (r - 2.0 * tl.floor(r * 0.5)) == 1.0
    tie = (r - t) == 0.5
    return tl.where(tie & odd, r - 1.0, r)


@triton.jit
def _div(a, b):
    """IEEE division (plain `/` on fp32 compiles to an approximate division)."""
    a, b = tl.broadcast(a, b)
    return tl.math.div_rn(a, b)


@triton.jit
def _pow2(e):
    """2**e as float32 for integer e in [-127, 127] (e = -127 is the subnormal 0x00400000)."""
    bits = tl.where(e <= -127, 0x00400000, (e + 127) << 23)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _floor_log2(a):
    return ((a.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127


@triton.jit
def _ceil_log2(a):
    bits = a.to(tl.int32, bitcast=True)
    return ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).to(tl.int32)


@triton.jit
def _e4m3(v):
    """Nearest E4M3 value (saturating at 448), ties to even: 3 mantissa bits, min exponent -6."""
    a = tl.minimum(tl.abs(v), _E4M3_MAX)
    e = tl.maximum(_floor_log2(a), -6)
    q = _rne(a * _pow2(3 - e)) * _pow2(e - 3)
    return tl.where(v < 0, -q, q)


@triton.jit
def _e2m1(v):
    """Nearest E2M1 value (saturating at 6), ties to even: spacing 0.5 / 1 / 2."""
    a = tl.minimum(tl.abs(v), _E2M1_MAX)
    # the spacing of the binade (0.5, 1 or 2) first, so one rounding serves all three
    # (tl.where evaluates both sides); scaling by a power of two is exact
    step = tl.where(a < 2.0, 0.5, tl.where(a < 4.0, 1.0, 2.0))
    inverse = tl.where(a < 2.0, 2.0, tl.where(a < 4.0, 1.0, 0.5))
    q = _rne(a * inverse) * step
    return tl.where(v < 0, -q, q)


@triton.jit
def _qdq_kernel(x_ptr, o_ptr, s_ptr, K, B: tl.constexpr, NB: tl.constexpr, MODE: tl.constexpr,
                FROM_AMAX: tl.constexpr = False, DIVISOR: tl.constexpr = 1.0):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    blocks = chunk * NB + tl.arange(0, NB)
    cols = blocks[:, None] * B + tl.arange(0, B)[None, :]
    mask = cols < K
    offs = row * K + cols
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if MODE == 1:                                            # FP8, one given scale
        s = tl.load(s_ptr).to(tl.float32)
        if FROM_AMAX:                                        # dynamic: s_ptr holds the tensor's amax
            s = _div(s, s * 0.0 + DIVISOR)
            s = tl.where(s > 0, s, 1.0)
        out = _e4m3(_div(x, s)) * s
    else:
        amax = tl.max(tl.abs(x), axis=1)[:, None]
        if MODE == 0:                                        # FP8, dynamic scale per block
            s = _div(amax, tl.full(amax.shape, _E4M3_MAX, tl.float32))
            s = tl.where(s > 0, s, 1.0)
            out = _e4m3(_div(x, s)) * s
        elif MODE == 2 or MODE == 3:                         # MX: E8M0 pow2-ceil scale
            emax = _E4M3_MAX if MODE == 2 else _E2M1_MAX
            e = tl.where(amax > 0, _ceil_log2(_div(amax, tl.full(amax.shape, emax, tl.float32))), -127)
            e = tl.minimum(tl.maximum(e, -127), 127)
            v = x * _pow2(-e)
            q = _e4m3(v) if MODE == 2 else _e2m1(v)
            out = q * _pow2(e)
        else:                                                # NVFP4: E4M3 scale per 16 times global
            g = tl.load(s_ptr).to(tl.float32)
            if FROM_AMAX:                                    # dynamic global scale from the amax
                g = _div(g, g * 0.0 + DIVISOR)
                g = tl.where(g > 0, g, 1.0)
            s = _e4m3(_div(_div(amax, tl.full(amax.shape, _E2M1_MAX, tl.float32)), g)) * g
            safe = tl.where(s > 0, s, 1.0)
            out = _e2m1(_div(x, safe)) * s
    tl.store(o_ptr + offs, out.to(o_ptr.dtype.element_ty), mask=mask)


_LAYOUT = {MXFP8: (32, 32), MXFP4: (32, 32), NVFP4: (16, 64)}


def abs_max(x: torch.Tensor) -> torch.Tensor:
    """max |x| in one read pass (exact: the maximum of the values as they are), as a float32 [1]."""
    return torch.linalg.vector_norm(x, ord=float("inf")).float().reshape(1)


def qdq(x: torch.Tensor, mode: int, scale: torch.Tensor | None = None, group: int | None = None,
        divisor: float | None = None) -> torch.Tensor:
    """Launch the kernel over x viewed as [rows, K]; `scale` is the per-tensor scale (FP8_STATIC)
    or global scale (NVFP4), or, with `divisor`, the tensor's amax that the kernel divides by it
    to get that scale; `group` is the FP8_DYNAMIC block (None: the whole row, per token)."""
    k = x.shape[-1]
    xc = x.contiguous()
    out = torch.empty_like(xc)
    rows = xc.numel() // k if k else 0
    if rows == 0:
        return out
    if mode == FP8_STATIC:
        b, nb = 1024, 1
    elif mode == FP8_DYNAMIC:
        b = group if group is not None else triton.next_power_of_2(k)
        nb = max(1, 1024 // b)
    else:
        b, nb = _LAYOUT[mode]
    dummy = scale if scale is not None else xc
    grid = (rows, triton.cdiv(triton.cdiv(k, b), nb))
    _qdq_kernel[grid](xc, out, dummy, k, B=b, NB=nb, MODE=mode,
                      FROM_AMAX=divisor is not None, DIVISOR=float(divisor or 1.0))
    return out
