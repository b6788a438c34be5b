"""One activation row of FP8 W8A8 with scales constant along K: each program's whole weight tile in one load
(cfg ROWGEMV 3, a tuned entry's option at M = 1).

Why: gemlite 0.6's GEMV streams 8192x8192 FP8 at about 3.9 TB/s (19.5 us per call including its
per-token quantizer launch, eleventh pass R27) where our swap-AB float8 GEMM took 21.1 and our
earlier row GEMVs (fp8_gemv.py, ROWGEMV 1 and 2, since removed) 26.9-50.4 with gemlite's very tiling (2 weight rows x
the whole K per program, 8 warps). Compiled for sm_90 side by side (tests/sm90_compile.py), the
difference is the order of the loads, not the tiling: gemlite passes K as a compile-time constant, so
its 2-chunk K loop is unrolled and ptxas issues all four 16-byte weight loads of a thread (the
program's 16 KB) before the first product; ours looped over runtime chunks, one chunk's loads in
flight at a time, waiting for each before asking for the next. Here a program's K range is one
[BLOCK_N, BLOCK_K] tile (BLOCK_K >= K / SPLIT_K), loaded by one tl.load: every byte a program needs is
requested at once, whatever K is at run time.

Two forms:
  - CODES_IN (cfg PDL 0/1): the row's E4M3 codes and scale come from the per-token quantizer launched
    before (launch.quantize_activation_codes, gemm.act_qdq_kernel), as gemlite reads its quantizer's
    codes. With GDC (sm_90, the GEMV launched with launch_pdl after the quantizer's GDC launch) each
    program issues its weight loads, then waits for the quantizer's grid (griddepcontrol.wait), so the
    weights stream while the row is quantized; gemlite's two launches run one after the other.
  - one launch (cfg QUANT_IN 1): each program loads the whole bf16 row (from L2) for its amax besides its
    weight tile and rounds its own K range itself (as act_qdq_kernel does); without a K split the row is
    the program's K range, loaded once.

Numerics (W8A8 per token / per tensor): code(x / s_x) with s_x = amax / 448 (IEEE division, 1 for a
zero row), times the weights' E4M3 codes: each product of two E4M3 values is exact in fp32; the
products are summed in fp32 (tl.sum's tree order, then the split-K slices in a fixed order), times
s_x * s_w[n], plus the bias.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .dequant import e4m3_bytes, e4m3_rounded, e4m3_values, finish_tile, fp8_scale, scaled_quotients
from .pdl import gdc_launch_dependents, gdc_wait


@triton.jit
def _row_codes(x_ptr, as_ptr, offs_k, k_ok, EVEN: tl.constexpr, HW_FP8: tl.constexpr):
    """The quantizer's scale and the fp32 values of the row's codes at offs_k (CODES_IN: x_ptr holds uint8 codes)."""
    xs = tl.load(as_ptr)
    if EVEN:
        xc = tl.load(x_ptr + offs_k)
    else:
        xc = tl.load(x_ptr + offs_k, mask=k_ok, other=0)
    return xs, e4m3_values(xc, HW_FP8)


@triton.jit
def fp8_tile_gemv_kernel(x_ptr, as_ptr, w_ptr, s_ptr, b_ptr, y_ptr, part_ptr, cnt_ptr, N, K, stride_wn, stride_sn,
                         A_CODES: tl.constexpr, HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, ROW_K: tl.constexpr,
                         HW_FP8: tl.constexpr, EXACT_BF16: tl.constexpr, EVEN: tl.constexpr,
                         CODES_IN: tl.constexpr, GDC: tl.constexpr = False, EVICT: tl.constexpr = False):
    """y[0, n] = s_x * s_w[n] * sum_k code(x[k] / s_x) * code(w[n, k]) (+ bias). Grid (cdiv(N, BLOCK_N),
    SPLIT_K = cdiv(K, BLOCK_K)): program (i, j) multiplies rows [i*BLOCK_N, +BLOCK_N) by K range
    [j*BLOCK_K, +BLOCK_K), loaded as one tile. CODES_IN: x_ptr holds the row's codes (uint8) and as_ptr
    its scale; else x_ptr is the row itself and as_ptr the per-tensor scale (A_CODES 3) or unused
    (A_CODES 2: the amax of the whole row: from the program's own K range at SPLIT_K 1, else from one
    ROW_K >= K wide load). EVEN: N % BLOCK_N == 0 and K % BLOCK_K == 0
    (no masks). EVICT: the weights loaded evict-first (they are read once)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    n_ok = offs_n < N
    k_ok = offs_k < K
    w_ptrs = w_ptr + offs_n[:, None].to(tl.int64) * stride_wn + offs_k[None, :]
    if EVEN:
        w = tl.load(w_ptrs, eviction_policy="evict_first" if EVICT else "")
    else:
        w = tl.load(w_ptrs, mask=n_ok[:, None] & k_ok[None, :], other=0,
                    eviction_policy="evict_first" if EVICT else "")
    if GDC:
        gdc_wait()          # the quantizer's codes and scale are visible from here on
    if CODES_IN:
        xs, xq = _row_codes(x_ptr, as_ptr, offs_k, k_ok, EVEN, HW_FP8)
    else:
        if EVEN:
            xv = tl.load(x_ptr + offs_k).to(tl.float32)
        else:
            xv = tl.load(x_ptr + offs_k, mask=k_ok, other=0.0).to(tl.float32)
        if A_CODES == 2 and SPLIT_K == 1:       # the program's K range is the whole row: its amax from xv
            xs = fp8_scale(tl.max(tl.abs(xv), axis=0))
        elif A_CODES == 2:
            offs_r = tl.arange(0, ROW_K)
            row = tl.load(x_ptr + offs_r, mask=offs_r < K, other=0.0).to(tl.float32)
            xs = fp8_scale(tl.max(tl.abs(row), axis=0))
        else:
            xs = tl.load(as_ptr)
        xq = e4m3_rounded(tl.math.div_rn(xv, xs), HW_FP8)
    acc = tl.sum(e4m3_values(w, HW_FP8) * xq[None, :], axis=1)
    ws = tl.load(s_ptr + offs_n * stride_sn, mask=n_ok, other=0.0)
    y = acc * xs * ws
    finish_tile(y[None, :], part_ptr, cnt_ptr, pid_n, pid_k, b_ptr, y_ptr, tl.arange(0, 1), offs_n, 1, N, N,
                SPLIT_K, HAS_BIAS, EXACT_BF16)


@triton.jit
def row_codes_kernel(x_ptr, codes_ptr, scales_ptr, K, stride_xm, ROW_K: tl.constexpr, HW_FP8: tl.constexpr,
                     GDC: tl.constexpr = False, FAST_DIV: tl.constexpr = False):
    """Per-token E4M3 codes of one row per program (cfg ROWQ 1 of ROWGEMV 3): the row loaded once (ROW_K >= K
    wide), its scale amax / 448 and the codes of x / scale by the hardware conversion (cvt.rn.satfinite on
    >= 8.9; round_e4m3 + e4m3_encode in the interpreter): the bytes and scale gemm.act_qdq_kernel writes, in
    fewer instructions. GDC: the GEMV launched next with launch_pdl may start at once. FAST_DIV: x / scale from the
    scale's reciprocal (dequant.scaled_quotients: the division's bits, bf16 rows on a GPU)."""
    if GDC:
        gdc_launch_dependents()
    row = tl.program_id(0)
    offs = tl.arange(0, ROW_K)
    ok = offs < K
    x = tl.load(x_ptr + row * stride_xm + offs, mask=ok, other=0.0).to(tl.float32)
    s = fp8_scale(tl.max(tl.abs(x), axis=0))
    c = e4m3_bytes(scaled_quotients(x, s, s, s, FAST_DIV), HW_FP8)
    tl.store(codes_ptr + row * K + offs, c, mask=ok)
    tl.store(scales_ptr + row, s)


@triton.jit
def split_codes_kernel(x_ptr, codes_ptr, scales_ptr, K, stride_xm, CHUNK: tl.constexpr, AMAX_K: tl.constexpr,
                       N_FULL: tl.constexpr, TAIL: tl.constexpr, HW_FP8: tl.constexpr, GDC: tl.constexpr = False,
                       FAST_DIV: tl.constexpr = False):
    """Per-token E4M3 codes with the rows split along K (cfg ROWQ CHUNK >= 128 of ROWGEMV 3 and of the FP8 swap
    GEMM): grid (M, cdiv(K, CHUNK)); program (r, c) loads its CHUNK values, then takes row r's amax itself over
    the whole row (from L2: the row's other programs read it too) in N_FULL = K // AMAX_K unmasked AMAX_K-wide
    loads (unrolled: ptxas issues them before the first max) and, with TAIL, one masked load of the rest; then
    it writes its CHUNK codes, and program (r, 0) the scale. The bytes and scales row_codes_kernel writes (a
    max is exact in any order; the same division and conversion), with no program waiting for another and no
    partial-max buffer to clear: at few rows and large K the row's divisions and stores are spread over
    cdiv(K, CHUNK) programs instead of one. GDC: the GEMM launched next with launch_pdl may start at once.
    FAST_DIV: as row_codes_kernel's."""
    if GDC:
        gdc_launch_dependents()
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    x_row = x_ptr + row.to(tl.int64) * stride_xm
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    ok = offs < K
    x = tl.load(x_row + offs, mask=ok, other=0.0)
    offs_a = tl.arange(0, AMAX_K)
    run = tl.zeros([AMAX_K], tl.float32)
    for i in tl.static_range(N_FULL):
        run = tl.maximum(run, tl.abs(tl.load(x_row + i * AMAX_K + offs_a).to(tl.float32)))
    if TAIL:
        xt = tl.load(x_row + N_FULL * AMAX_K + offs_a, mask=N_FULL * AMAX_K + offs_a < K, other=0.0)
        run = tl.maximum(run, tl.abs(xt.to(tl.float32)))
    s = fp8_scale(tl.max(run, axis=0))
    c = e4m3_bytes(scaled_quotients(x.to(tl.float32), s, s, s, FAST_DIV), HW_FP8)
    tl.store(codes_ptr + row.to(tl.int64) * K + offs, c, mask=ok)
    if chunk == 0:
        tl.store(scales_ptr + row, s)
