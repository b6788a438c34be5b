"""Fused FP8 activation quantizers for CUDA (Triton): one pass per 1x128 group or row, instead of
the five or six passes of the eager torch functions in `quantize`, which stay the reference.

Same arithmetic as `quantize`: scale = amax / 448 by IEEE division (`div_rn`: a plain `/` on
fp32 compiles to an approximate division), a zero scale becomes 1, x / scale by IEEE division,
clamp to +-448, then round to nearest even on the E4M3 grid. The rounding is done in fp32
arithmetic (3 mantissa bits, exponent floor -6) so the final cast only converts values that
are already E4M3, whatever rounding mode the cast uses (Triton's CPU interpreter, for one,
does not round the cast to nearest even). The 1x128 group scales are written
M-major (strides (1, M)), the layout cuBLASLt's blockwise scaling reads, so no copy follows.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from oracle.formats import E4M3_MAX

_E4M3_MAX = tl.constexpr(E4M3_MAX)   # the format's limit, as a compile-time constant for the kernels


@triton.jit
def _round_half_even(t):
    """Nearest integer of t >= 0, ties to the even one."""
    r = tl.floor(t + 0.5)
    tie = (r - t) == 0.5
    odd = (r - 2.0 * tl.floor(r * 0.5)) == 1.0
    return tl.where(tie & odd, r - 1.0, r)


@triton.jit
def _exp2i(e):
    """2**e, exactly, for integer e in the float32 normal range."""
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _e4m3_values(x, s):
    """x / s rounded to the E4M3 grid, as fp32 values (exactly the codes' values)."""
    v = tl.math.div_rn(x, s)
    a = tl.minimum(tl.abs(v), _E4M3_MAX)
    e = tl.maximum(((a.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, -6)   # floor(log2 a), >= -6
    q = _round_half_even(a * _exp2i(3 - e)) * _exp2i(e - 3)                     # exact power-of-two scalings
    return tl.where(v < 0, -q, q)


@triton.jit
def _to_e4m3(x, s):
    return _e4m3_values(x, s).to(tl.float8e4nv)


@triton.jit
def _scale_of(amax):
    s = tl.math.div_rn(amax, tl.full(amax.shape, _E4M3_MAX, tl.float32))
    return tl.where(s > 0, s, 1.0)


@triton.jit
def _group_kernel(x_ptr, q_ptr, s_ptr, M, K, GROUP: tl.constexpr):
    row = tl.program_id(0)
    g = tl.program_id(1)
    offs = g * GROUP + tl.arange(0, GROUP)
    x = tl.load(x_ptr + row * K + offs).to(tl.float32)
    s = _scale_of(tl.max(tl.abs(x), axis=0))
    tl.store(q_ptr + row * K + offs, _to_e4m3(x, s))
    tl.store(s_ptr + g * M + row, s)                      # M-major scales


@triton.jit
def _row_kernel(x_ptr, q_ptr, s_ptr, K, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, K, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * K + offs, mask=offs < K, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    s = _scale_of(tl.max(amax, axis=0))
    for start in range(0, K, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * K + offs, mask=offs < K, other=0.0).to(tl.float32)
        tl.store(q_ptr + row * K + offs, _to_e4m3(x, s), mask=offs < K)
    tl.store(s_ptr + row, s)


@triton.jit
def _scaled_kernel(x_ptr, q_ptr, s_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    s = tl.load(s_ptr)
    x = tl.load(x_ptr + offs, mask=offs < N, other=0.0).to(tl.float32)
    tl.store(q_ptr + offs, _to_e4m3(x, s), mask=offs < N)


def fp8_per_group(x: torch.Tensor, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, K] contiguous CUDA -> (e4m3 [M, K], fp32 M-major scales [M, K/group])."""
    m, k = x.shape
    q = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty_strided((m, k // group), (1, m), dtype=torch.float32, device=x.device)
    _group_kernel[(m, k // group)](x, q, s, m, k, GROUP=group)
    return q, s


def fp8_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, K] contiguous CUDA -> (e4m3 [M, K], fp32 scales [M, 1])."""
    m, k = x.shape
    q = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty(m, 1, dtype=torch.float32, device=x.device)
    _row_kernel[(m,)](x, q, s, k, BLOCK=1024)
    return q, s


def fp8_per_tensor(x: torch.Tensor, scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, K] contiguous CUDA -> (e4m3 [M, K], fp32 scale []); amax by one torch reduction when dynamic."""
    if scale is None:
        amax = torch.linalg.vector_norm(x, float("inf")).float()      # max |x|, exact, one pass
        scale = amax / torch.full_like(amax, E4M3_MAX)
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    else:
        scale = scale.float().reshape(())
    q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    n = x.numel()
    _scaled_kernel[(triton.cdiv(n, 4096),)](x, q, scale, n, BLOCK=4096)
    return q, scale
