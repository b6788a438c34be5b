"""Dense small-batch GEMM y = x @ dequant(W)^T (+ b) with W packed in memory, and the
activation quantize-dequantize pass W8A8/W4A4 modes run before it.

GEMM: each program owns a BLOCK_M x BLOCK_N output tile and a slice of K (split-K when the
output has too few tiles to fill the GPU). Split-K partials go to an fp32 workspace; the last
program of a tile (an atomic counter per tile) sums them in a fixed order, adds the bias,
writes the output and resets its counter, so a CUDA-graph replay finds the counters at zero
again and the result does not depend on arrival order.

Activation pass: quantizing inside the GEMM's prologue repeats the work in every one of the
N/BLOCK_N programs (and on 16-row tiles at M = 1); measured on an H200 it cost 4x the GEMM at
M = 1, so the activations are rounded once, in their own launch, to the values the reference
gives (codes times scales, in the layer's dtype), and the GEMM reads those.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .dequant import quantize_tile, tile_product, to_dtype


@triton.jit
def act_qdq_kernel(x_ptr, xs_ptr, out_ptr, M, K, stride_xm, stride_om, ACT: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, EXACT_BF16: tl.constexpr):
    """One program per (16 rows, 128 columns): every K tile in parallel (per-token scales read
    the whole row's amax first, a re-read of the row that is cheap next to the GEMM)."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs_m < M
    amax_rows = tl.zeros([BLOCK_M], dtype=tl.float32)
    if ACT == 2:
        for t in range(0, tl.cdiv(K, BLOCK_K)):
            offs_k = t * BLOCK_K + tl.arange(0, BLOCK_K)
            xa = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                         mask=row_ok[:, None] & (offs_k[None, :] < K), other=0.0).to(tl.float32)
            amax_rows = tl.maximum(amax_rows, tl.max(tl.abs(xa), axis=1))
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = row_ok[:, None] & (offs_k[None, :] < K)
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=mask, other=0.0).to(tl.float32)
    xq = quantize_tile(x, amax_rows, ACT, xs_ptr, BLOCK_M, BLOCK_K)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_k[None, :],
             to_dtype(xq, out_ptr.dtype.element_ty, EXACT_BF16), mask=mask)


@triton.jit
def wgemm_kernel(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, y_ptr, part_ptr, cnt_ptr,
                 M, N, K, stride_xm, stride_ym,
                 stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                 ELEM: tl.constexpr, PACK: tl.constexpr, GROUP: tl.constexpr,
                 SCALE_ROWS: tl.constexpr, HAS_ZERO: tl.constexpr, EXACT_W: tl.constexpr, HAS_BIAS: tl.constexpr,
                 SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, HW_FP8: tl.constexpr, DOT_F32: tl.constexpr,
                 OUT_F16: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    if OUT_F16:
        io_t = tl.float16
    else:
        io_t = tl.bfloat16
    if DOT_F32:
        dot_t = tl.float32
    else:
        dot_t = io_t
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = offs_m < M
    a_rows = x_ptr + offs_m[:, None] * stride_xm
    k_tiles = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(k_tiles, SPLIT_K)
    t0 = pid_k * per_split
    t1 = tl.minimum(t0 + per_split, k_tiles)
    gscale = 1.0
    if ELEM == 2:
        gscale = tl.load(g_ptr)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for t in range(t0, t1):
        acc += tile_product(a_rows, row_ok, t * BLOCK_K, offs_n, w_ptr, s_ptr, z_ptr, gscale, K, N,
                            stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                            ELEM, PACK, GROUP, SCALE_ROWS, HAS_ZERO, HW_FP8, EXACT_W,
                            BLOCK_M, BLOCK_N, BLOCK_K // PACK, io_t, dot_t, DOT_F32)
    mask = row_ok[:, None] & (offs_n[None, :] < N)
    if SPLIT_K > 1:
        tile = pid_m * tl.num_programs(0) + pid_n
        base = part_ptr + offs_m[:, None] * N + offs_n[None, :]
        tl.store(base + pid_k * M * N, acc, mask=mask)
        tl.debug_barrier()
        arrived = tl.atomic_add(cnt_ptr + tile, 1)
        if arrived == SPLIT_K - 1:
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for s in range(0, SPLIT_K):
                acc += tl.load(base + s * M * N, mask=mask, other=0.0, cache_modifier=".cg")
            _epilogue(acc, b_ptr, y_ptr, offs_m, offs_n, stride_ym, N, mask, HAS_BIAS, DOT_F32)
            tl.atomic_xchg(cnt_ptr + tile, 0)
    else:
        _epilogue(acc, b_ptr, y_ptr, offs_m, offs_n, stride_ym, N, mask, HAS_BIAS, DOT_F32)


@triton.jit
def _epilogue(acc, b_ptr, y_ptr, offs_m, offs_n, stride_ym, N, mask, HAS_BIAS: tl.constexpr,
              EXACT_BF16: tl.constexpr):
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :],
             to_dtype(acc, y_ptr.dtype.element_ty, EXACT_BF16), mask=mask)
