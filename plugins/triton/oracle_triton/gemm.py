"""Dense tiled GEMM y = x @ dequant(W)^T (+ b) with W packed in memory, and the
activation quantize-dequantize pass W8A8/W4A4 modes run before it.

GEMM: each program owns a BLOCK_M x BLOCK_N output tile and a slice of K (split-K when the
output has too few tiles to fill the GPU); dequant.finish_tile sums the partials in a fixed
order. One activation row is served by gemv.py instead (launch.use_gemv).

Activation pass: quantizing inside the GEMM's prologue repeats the work in every one of the
N/BLOCK_N programs (and on 16-row tiles at M = 1); measured on an H200 it cost 4x the GEMM at
M = 1, so the activations are rounded once, in their own launch, to the values the reference
gives (codes times scales, in the layer's dtype), and the GEMM reads those.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .dequant import (act_codes_tile, act_tile, e4m3_encode, finish_tile, fp8_codes_product, fp8_codes_scale,
                      fp8_scale, fp8_tile_scales, quantize_tile, quantize_tile_codes, split_range, tile_product,
                      to_dtype, w4_product)


@triton.jit
def act_qdq_kernel(x_ptr, xs_ptr, out_ptr, M, K, stride_xm, stride_om, ACT: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, EXACT_BF16: tl.constexpr,
                   scales_ptr=None, CODES: tl.constexpr = False):
    """Programs over (BLOCK_M rows, K tiles pid(1), pid(1) + grid(1), ...); per-token scales read the
    whole row's amax first (launched with one program along K and wide K tiles, so each row is read
    twice in few steps: launch.TOKEN_ROWS / TOKEN_K).

    CODES (FP8 activations for the float8 GEMM): out gets the E4M3 bytes (uint8) and scales_ptr
    the fp32 scales: [ceil(K/128), M] per 1x128 group (ACT 1), [M] per token (ACT 2); per tensor
    (ACT 3) the scale is xs_ptr's. Same codes and scales as the values written otherwise
    (values = codes x scales, rounded to out's dtype)."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs_m < M
    amax_rows = tl.zeros([BLOCK_M], dtype=tl.float32)
    k_tiles = tl.cdiv(K, BLOCK_K)
    if ACT == 2:
        for t in range(0, k_tiles):
            offs_k = t * BLOCK_K + tl.arange(0, BLOCK_K)
            xa = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                         mask=row_ok[:, None] & (offs_k[None, :] < K), other=0.0).to(tl.float32)
            amax_rows = tl.maximum(amax_rows, tl.max(tl.abs(xa), axis=1))
        if CODES:
            tl.store(scales_ptr + offs_m, fp8_scale(amax_rows), mask=row_ok & (tl.program_id(1) == 0))
    for t in range(tl.program_id(1), k_tiles, tl.num_programs(1)):
        offs_k = t * BLOCK_K + tl.arange(0, BLOCK_K)
        mask = row_ok[:, None] & (offs_k[None, :] < K)
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=mask, other=0.0).to(tl.float32)
        outp = out_ptr + offs_m[:, None] * stride_om + offs_k[None, :]
        if CODES:
            q, s = quantize_tile_codes(x, amax_rows, ACT, xs_ptr)
            tl.store(outp, e4m3_encode(q, x).to(tl.uint8), mask=mask)
            if ACT == 1:
                tl.store(scales_ptr + t * M + offs_m, s, mask=row_ok)
        else:
            xq = quantize_tile(x, amax_rows, ACT, xs_ptr, BLOCK_M, BLOCK_K)
            tl.store(outp, to_dtype(xq, out_ptr.dtype.element_ty, EXACT_BF16), mask=mask)


@triton.jit
def wgemm_kernel(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, y_ptr, part_ptr, cnt_ptr, as_ptr,
                 M, N, K, stride_xm, stride_ym,
                 stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, stride_as,
                 ELEM: tl.constexpr, PACK: tl.constexpr, GROUP: tl.constexpr,
                 SCALE_ROWS: tl.constexpr, HAS_ZERO: tl.constexpr, EXACT_W: tl.constexpr, HAS_BIAS: tl.constexpr,
                 SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, HW_FP8: tl.constexpr, DOT_F32: tl.constexpr,
                 OUT_F16: tl.constexpr, A_CODES: tl.constexpr = 0, FP8_DOT: tl.constexpr = False,
                 FULL_TILE: tl.constexpr = False, GROUP_M: tl.constexpr = 1, UNIFORM_WS: tl.constexpr = False,
                 EVEN_K: tl.constexpr = False):
    """A_CODES 1-3: x holds E4M3 codes with scales per 1x128 group (as_ptr [K/128, M], row
    stride 1, group stride stride_as), per row (as_ptr [M]) or per tensor (as_ptr [1]); the
    product runs on the codes (FP8_DOT: float8 tensor cores) and the scales multiply the fp32
    result, per K tile where a scale changes along K, else once at the end (UNIFORM_WS: the
    tile's weight rows share one 128-row scale block, read as one scalar). FULL_TILE: 4-bit
    weights decoded to whole tiles (one dot per K tile). GROUP_M > 1: programs walk the output
    tiles in column bands of GROUP_M tile rows, so concurrent programs share weight tiles in L2."""
    if GROUP_M > 1:
        grid_n = tl.num_programs(0)
        grid_m = tl.num_programs(1)
        pid = tl.program_id(1) * grid_n + tl.program_id(0)
        band = pid // (GROUP_M * grid_n)
        first_m = band * GROUP_M
        rows_in_band = tl.minimum(grid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % (GROUP_M * grid_n)) % rows_in_band
        pid_n = (pid % (GROUP_M * grid_n)) // rows_in_band
    else:
        pid_n = tl.program_id(0)
        pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    io_t = tl.float16 if OUT_F16 else tl.bfloat16
    dot_t = tl.float32 if DOT_F32 else io_t
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = offs_m < M
    a_rows = x_ptr + offs_m[:, None] * stride_xm
    k_tiles = tl.cdiv(K, BLOCK_K)
    t0, t1 = split_range(K, BLOCK_K, SPLIT_K, pid_k)
    gscale = 1.0
    if ELEM == 2:
        gscale = tl.load(g_ptr)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if A_CODES > 0:
        PER_TILE: tl.constexpr = A_CODES == 1 or GROUP > 1      # scales change along K
        n0 = pid_n * BLOCK_N
        xs, ws = fp8_tile_scales(as_ptr, offs_m, row_ok, stride_as, tl.minimum(t0, k_tiles - 1) * BLOCK_K,
                                 offs_n, n0, s_ptr, N, stride_sn, stride_sk, A_CODES, GROUP, SCALE_ROWS, UNIFORM_WS)
        for t in range(t0, t1):
            a = act_codes_tile(a_rows, row_ok, t * BLOCK_K, K, BLOCK_K, FP8_DOT, HW_FP8, dot_t, EVEN_K)
            if PER_TILE:                            # the next tile's scales, loaded one tile ahead
                xs_next, ws_next = fp8_tile_scales(as_ptr, offs_m, row_ok, stride_as,
                                                   tl.minimum(t + 1, t1 - 1) * BLOCK_K, offs_n, n0, s_ptr, N,
                                                   stride_sn, stride_sk, A_CODES, GROUP, SCALE_ROWS, UNIFORM_WS)
            acc = fp8_codes_product(acc, a, xs, ws, t * BLOCK_K, offs_n, w_ptr, K, N, stride_wn, stride_wk,
                                    PER_TILE, HW_FP8, FP8_DOT, BLOCK_K, dot_t, DOT_F32, UNIFORM_WS, EVEN_K)
            if PER_TILE:
                xs, ws = xs_next, ws_next
        if not PER_TILE:                            # scales constant along K: applied once
            acc = fp8_codes_scale(acc, as_ptr, offs_m, row_ok, offs_n, s_ptr, N, stride_sn, SCALE_ROWS, A_CODES)
    elif FULL_TILE:
        for t in range(t0, t1):
            x = act_tile(a_rows, row_ok, t * BLOCK_K, K, BLOCK_K, EVEN_K).to(dot_t)
            acc = w4_product(acc, x, t * BLOCK_K, offs_n, w_ptr, s_ptr, z_ptr, gscale, K, N,
                             stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                             ELEM, PACK, GROUP, HAS_ZERO, BLOCK_N, BLOCK_K, io_t, dot_t, DOT_F32, EVEN_K)
    else:
        for t in range(t0, t1):
            acc += tile_product(a_rows, row_ok, t * BLOCK_K, offs_n, w_ptr, s_ptr, z_ptr, gscale, K, N,
                                stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                                ELEM, PACK, GROUP, SCALE_ROWS, HAS_ZERO, HW_FP8, EXACT_W,
                                BLOCK_M, BLOCK_N, BLOCK_K // PACK, io_t, dot_t, DOT_F32)
    finish_tile(acc, part_ptr, cnt_ptr, pid_m * tl.num_programs(0) + pid_n, pid_k, b_ptr, y_ptr, offs_m, offs_n,
                M, N, stride_ym, SPLIT_K, HAS_BIAS, DOT_F32)


