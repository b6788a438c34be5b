"""FP8 W8A8 activations rounded inside the swap GEMM program that multiplies them (QUANT_IN 2).

Each program rounds only the activation rows of its own tile: it first takes their scales (per token:
each row's amax over the whole K, read from the layer-dtype activations, which at a few hundred rows
stay in L2; per tensor: the given scale), then rounds each K tile to E4M3 in registers just before the
float8 MMA. No program waits for another and no quantizer launch runs before the GEMM. The codes and
scales are act_qdq_kernel's (CODES, ACT 2 / 3) and are applied in the same order, so the product is bit
for bit the two launches'. The price is every column tile re-reading its rows (once for the amax, once
for the codes) instead of reading one-byte codes once.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .dequant import act_tile, fp8_scale, round_e4m3


@triton.jit
def rows_scales(a_rows, row_ok, as_ptr, K, A_CODES: tl.constexpr, AMAX_K: tl.constexpr):
    """The activation scale [BM] of each row (a_rows: the rows' base pointers [BM, 1]): per token
    (A_CODES 2) fp8_scale of the row's amax over all of K, in AMAX_K-wide chunks, the next chunk
    loaded before the current one is reduced (two loads in flight); per tensor (3) the scale at as_ptr."""
    if A_CODES == 2:        # an elementwise running max, reduced across the threads once at the end
        offs = tl.arange(0, AMAX_K)
        xa = tl.load(a_rows + offs[None, :], mask=row_ok[:, None] & (offs < K)[None, :], other=0.0)
        run = tl.zeros([a_rows.shape[0], AMAX_K], tl.float32)
        for c in range(AMAX_K, K, AMAX_K):
            xn = tl.load(a_rows + c + offs[None, :], mask=row_ok[:, None] & (c + offs < K)[None, :], other=0.0)
            run = tl.maximum(run, tl.abs(xa.to(tl.float32)))
            xa = xn
        xs = fp8_scale(tl.max(tl.maximum(run, tl.abs(xa.to(tl.float32))), axis=1))
    else:
        xs = tl.load(as_ptr + tl.zeros([a_rows.shape[0]], tl.int32))
    return xs


@triton.jit
def rows_tile(a_rows, row_ok, t, t1, K, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """K tile min(t, t1 - 1) of the rows in the layer dtype (zeros past K and in rows not ok): the
    kernels load the next tile while the current one is rounded and multiplied."""
    return act_tile(a_rows, row_ok, tl.minimum(t, t1 - 1) * BLOCK_K, K, BLOCK_K, EVEN_K)


@triton.jit
def rows_codes(x, xs, FP8_DOT: tl.constexpr, dot_t: tl.constexpr):
    """A layer-dtype tile [BM, BK] rounded to E4M3 with its rows' scales xs [BM] (act_qdq_kernel's
    codes) as a dot operand: float8 (FP8_DOT) or the codes' values in dot_t (exact).

    FP8_DOT: the IEEE quotient goes straight to the hardware conversion (cvt.rn.satfinite.e4m3x2.f32:
    round half to even onto the E4M3 grid, subnormals included, saturating at 448), the rounding
    round_e4m3 spells out in integer steps for the interpreter: the same codes in fewer instructions
    per element (|x / s| <= 448 up to one rounding anyway, s being the rows' amax / 448)."""
    v = tl.math.div_rn(x.to(tl.float32), xs[:, None])
    if FP8_DOT:
        op = v.to(tl.float8e4nv)
    else:
        op = round_e4m3(v).to(dot_t)
    return op
