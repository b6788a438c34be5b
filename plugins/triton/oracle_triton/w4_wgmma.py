"""Many-row 4-bit W4A16 GEMM on Hopper's asynchronous tensor cores (issue 26, M >= 64).

y^T[BN, BM] = W_dec[BN, BK] @ x^T[BK, BM] per K tile: the DECODED WEIGHT tile is the MMA's A
operand (wgmma takes A from registers, B from shared memory), the activation tile its B operand,
loaded by the pipelined dot (Triton stages loads that feed tl.dot through cp.async: num_stages).
The weight words are plain loads issued a tile ahead, so the decode of tile t+1 runs while the
asynchronous wgmma of tile t is in flight (the accumulator stays in the dot, no wait per tile).

Weights in GPTQ's word layout [K/8, N] (int32 words of 8 codes along K, N contiguous): INT4 as the
checkpoint stores it, MXFP4 / NVFP4 repacked at load (weights.repack_words). Each weight is decoded
to the reference's value (value x scale rounded once to the layer dtype), so the sum is the
reference's product in fp32. No BF16 copy of the weight exists at any time (unlike DEQUANT_MM).
"""
from __future__ import annotations

import triton
import triton.language as tl

from .dequant import finish_tile, group_scales_hw, int4_group_row, k_in, split_range, to_dtype
from .gemm import e2m1_word_values, int4_word_values, interleave8


@triton.jit
def _wg_words(t, offs_n, n_ok, w_ptr, s_ptr, z_ptr, K, stride_wk, stride_sk, stride_zk, ELEM: tl.constexpr,
              HAS_ZERO: tl.constexpr, GROUP: tl.constexpr, UJ: tl.constexpr, EVEN_K: tl.constexpr):
    """K tile t's words [BN, UJ] (N contiguous in memory), scales and zero points: INT4 one group per
    tile ([BN]; BLOCK_K divides GROUP), E2M1 each word's scale [BN, UJ] (raw bytes)."""
    jrow = t * UJ + tl.arange(0, UJ)
    ok = n_ok[:, None] & k_in(jrow, K // 8, EVEN_K)[None, :]
    u = tl.load(w_ptr + jrow[None, :] * stride_wk + offs_n[:, None], mask=ok, other=0)
    if ELEM == 3:
        s, z = int4_group_row(s_ptr, z_ptr, (t * UJ * 8) // GROUP, offs_n, n_ok, stride_sk, stride_zk, HAS_ZERO)
    else:
        s = tl.load(s_ptr + (jrow * 8 // GROUP)[None, :] * stride_sk + offs_n[:, None], mask=ok, other=0)
        z = s
    return u, s, z


@triton.jit
def _wg_decode(u, s, z, gscale, ELEM: tl.constexpr, io_t: tl.constexpr):
    """_wg_words' tile -> W [BN, 8 UJ] in io_t, k in order (word j's code i at column 8 j + i), the
    reference's values: INT4 (q - z) exact by packed subtraction, times the group scale (one rounding:
    the exact product of a 5-bit integer and a 16-bit scale); E2M1 by bit placement (gemm.e2m1_word_ptx)."""
    if ELEM == 3:
        w0, w1, w2, w3, w4, w5, w6, w7 = int4_word_values(u, z[:, None], 3, io_t)
        if s.dtype == io_t:
            sv = s[:, None]
            w0, w1, w2, w3 = w0 * sv, w1 * sv, w2 * sv, w3 * sv
            w4, w5, w6, w7 = w4 * sv, w5 * sv, w6 * sv, w7 * sv
        else:
            sv = s.to(tl.float32)[:, None]
            w0 = to_dtype(w0.to(tl.float32) * sv, io_t, False)
            w1 = to_dtype(w1.to(tl.float32) * sv, io_t, False)
            w2 = to_dtype(w2.to(tl.float32) * sv, io_t, False)
            w3 = to_dtype(w3.to(tl.float32) * sv, io_t, False)
            w4 = to_dtype(w4.to(tl.float32) * sv, io_t, False)
            w5 = to_dtype(w5.to(tl.float32) * sv, io_t, False)
            w6 = to_dtype(w6.to(tl.float32) * sv, io_t, False)
            w7 = to_dtype(w7.to(tl.float32) * sv, io_t, False)
    else:
        w0, w1, w2, w3, w4, w5, w6, w7 = e2m1_word_values(u, group_scales_hw(s, gscale, ELEM), io_t)
    return interleave8(w0, w1, w2, w3, w4, w5, w6, w7)


@triton.jit
def w4_wgmma_kernel(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm,
                    stride_ym, stride_wk, stride_sk, stride_zk, ELEM: tl.constexpr, HAS_ZERO: tl.constexpr,
                    HAS_BIAS: tl.constexpr, GROUP: tl.constexpr, SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, OUT_F16: tl.constexpr,
                    EVEN_K: tl.constexpr):
    """Grid (tiles, SPLIT_K): tile = pid over bands of GROUP_M activation-row tiles (the row tiles of
    a band fastest, so programs running together share a weight column tile in L2 and the band's
    activations), each program a [BM, BN] output tile over its K slice (finish_tile sums slices)."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    band = pid // (GROUP_M * grid_n)
    first_m = band * GROUP_M
    rows_in_band = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * grid_n)) % rows_in_band
    pid_n = (pid % (GROUP_M * grid_n)) // rows_in_band
    io_t = tl.float16 if OUT_F16 else tl.bfloat16
    UJ: tl.constexpr = BLOCK_K // 8
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    n_ok = offs_n < N
    row_ok = offs_m < M
    gscale = 1.0
    if ELEM == 2:
        gscale = tl.load(g_ptr)
    t0, t1 = split_range(K, BLOCK_K, SPLIT_K, pid_k)
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    u, s, z = _wg_words(tl.minimum(t0, t1 - 1), offs_n, n_ok, w_ptr, s_ptr, z_ptr, K, stride_wk, stride_sk,
                        stride_zk, ELEM, HAS_ZERO, GROUP, UJ, EVEN_K)
    for t in range(t0, t1):
        un, sn, zn = _wg_words(tl.minimum(t + 1, t1 - 1), offs_n, n_ok, w_ptr, s_ptr, z_ptr, K, stride_wk,
                               stride_sk, stride_zk, ELEM, HAS_ZERO, GROUP, UJ, EVEN_K)
        offs_k = t * BLOCK_K + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + offs_m[None, :] * stride_xm + offs_k[:, None],
                    mask=row_ok[None, :] & k_in(offs_k, K, EVEN_K)[:, None], other=0.0)
        w = _wg_decode(u, s, z, gscale, ELEM, io_t)
        acc = tl.dot(w, x.to(io_t), acc)
        u, s, z = un, sn, zn
    finish_tile(tl.trans(acc), part_ptr, cnt_ptr, pid, pid_k, b_ptr, y_ptr, offs_m, offs_n, M, N, stride_ym,
                SPLIT_K, HAS_BIAS, False)
