"""Fused MoE for a few tokens (decode): two launches, no expert sorting.

With M * top_k pairs spread over many experts, a sorted, block-aligned grouped GEMM pads every
expert's rows to a tensor-core tile and spends two launches aligning them. Here:
  up:   one program per (pair, BLOCK_N columns of I): FC1 of its token against its expert's
        gate and up rows (one activation tile shared by both), bias, rounding to the layer
        dtype as the reference rounds FC1's output, the activation; written per pair.
  down: one program per (token, BLOCK_N columns of H, top-k slot): FC2 of the pair's
        intermediate row, bias, rounding, router weight; the slots of a tile are summed in slot
        order by the last to arrive (dequant.finish_tile), so the result does not depend on timing.
moe_up_split_kernel is the up kernel for the decode path: gate and up tiles are loaded in the
same K step (twice the bytes in flight per program), and K is split across SPLIT_K programs when
pairs x column tiles cannot fill the GPU; the slices are summed in slice order by the last
program to arrive (as dequant.finish_tile), which then applies the bias, rounding and activation.
Weights are streamed and decoded as in gemv.product_tile. Pairs whose expert id is out of range
(only possible under graph capture, where the eager check is skipped) contribute zero.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .dequant import expert_operands, finish_tile, k_in, mma_acc, split_range, to_dtype, w4_tile
from .gemm import w4_swap_tiles
from .gemv import (channel_scales, finish_row, row_amax, row_products, tile_compute, tile_load,
                   tile_zeros)
from .moe_kernels import _activate, gate_up_rows, sum_slots


@triton.jit
def moe_up_kernel(a_ptr, ids_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, xs_ptr, out_ptr,
                  E, TOPK, N_OUT, N_W, K, stride_am, stride_om,
                  stride_we, stride_se, stride_ze, stride_be,
                  stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                  limit, alpha, beta, lbeta,
                  ACTFN: tl.constexpr, GATED: tl.constexpr, INTERLEAVED: tl.constexpr, HAS_LIMIT: tl.constexpr,
                  A_BY_PAIR: tl.constexpr, ELEM: tl.constexpr, GROUP: tl.constexpr, SCALE_ROWS: tl.constexpr,
                  HAS_ZERO: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, HW_FP8: tl.constexpr, DECODE: tl.constexpr,
                  EXACT_BF16: tl.constexpr, OUT_F16: tl.constexpr, XW: tl.constexpr = False,
                  HX: tl.constexpr = 0, TAIL: tl.constexpr = False):
    pair = tl.program_id(0)
    j = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    jmask = j < N_OUT
    io_t = tl.float16 if OUT_F16 else tl.bfloat16
    e = tl.load(ids_ptr + pair).to(tl.int32)
    out_row = out_ptr + pair.to(tl.int64) * stride_om + j[None, :]
    if (e >= 0) & (e < E):
        if A_BY_PAIR:
            arow = pair
        else:
            arow = pair // TOPK
        a_rows = a_ptr + arow.to(tl.int64) * stride_am + tl.zeros([1, 1], dtype=tl.int64)
        row_ok = tl.full([1], 1, tl.int1)
        amax = row_amax(a_rows, row_ok, K, ACT, 1, BLOCK_K)
        e64 = e.to(tl.int64)
        w_e, s_e, z_e, gscale = expert_operands(e, w_ptr, s_ptr, z_ptr, g_ptr, stride_we, stride_se, stride_ze, ELEM)
        n_g, n_u = gate_up_rows(j, N_OUT, GATED, INTERLEAVED)
        a_row = a_ptr + arow.to(tl.int64) * stride_am
        ws_g = channel_scales(s_e, n_g, N_W, stride_sn, ELEM, GROUP)
        acc_g = row_products(tile_zeros(ELEM, GROUP, BLOCK_N, BLOCK_K, DECODE, HX=HX), a_row, 0, tl.cdiv(K, BLOCK_K), K, amax, xs_ptr,
                             n_g, w_e, s_e, z_e, ws_g, gscale, N_W, stride_wn, stride_wk, stride_sn, stride_sk,
                             stride_zk, ELEM, GROUP, SCALE_ROWS, HAS_ZERO, HW_FP8, DECODE, ACT, BLOCK_N, BLOCK_K,
                             io_t, EXACT_BF16, XW=XW, HX=HX, TAIL=TAIL)
        acc_g = finish_row(acc_g, ws_g, ELEM, DECODE, ACT != 0, HX=HX)[None, :]
        acc_u = acc_g
        if GATED:
            ws_u = channel_scales(s_e, n_u, N_W, stride_sn, ELEM, GROUP)
            acc_u = row_products(tile_zeros(ELEM, GROUP, BLOCK_N, BLOCK_K, DECODE, HX=HX), a_row, 0, tl.cdiv(K, BLOCK_K), K, amax,
                                 xs_ptr, n_u, w_e, s_e, z_e, ws_u, gscale, N_W, stride_wn, stride_wk, stride_sn,
                                 stride_sk, stride_zk, ELEM, GROUP, SCALE_ROWS, HAS_ZERO, HW_FP8, DECODE, ACT,
                                 BLOCK_N, BLOCK_K, io_t, EXACT_BF16, XW=XW, HX=HX, TAIL=TAIL)
            acc_u = finish_row(acc_u, ws_u, ELEM, DECODE, ACT != 0, HX=HX)[None, :]
        _up_epilogue(acc_g, acc_u, e >= 0, e64, b_ptr, stride_be, n_g[None, :], n_u[None, :], jmask[None, :], out_ptr,
                     out_row, limit, alpha, beta, lbeta, ACTFN, GATED, HAS_LIMIT, HAS_BIAS, io_t, EXACT_BF16)
    else:
        tl.store(out_row, tl.zeros([1, BLOCK_N], dtype=out_ptr.dtype.element_ty), mask=jmask[None, :])


@triton.jit
def moe_down_kernel(a_ptr, ids_ptr, topw_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, xs_ptr, out_ptr, part_ptr, cnt_ptr,
                    M, E, TOPK, N, K, stride_am, stride_om,
                    stride_we, stride_se, stride_ze, stride_be,
                    stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                    WEIGHT_OUT: tl.constexpr, ELEM: tl.constexpr, GROUP: tl.constexpr, SCALE_ROWS: tl.constexpr,
                    HAS_ZERO: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, SPLIT: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, HW_FP8: tl.constexpr, DECODE: tl.constexpr,
                    EXACT_BF16: tl.constexpr, OUT_F16: tl.constexpr, XW: tl.constexpr = False,
                    HX: tl.constexpr = 0, TAIL: tl.constexpr = False, GUARD: tl.constexpr = True,
                    PAIRS: tl.constexpr = False):
    """Grid (M, H / BLOCK_N, top_k): SPLIT is top_k (1: no workspace). XW: gemv.tile_load's 64-bit
    activation reads (E2M1 words, bf16 rows 8-byte aligned); HX 1 (with XW): gemv.tile_compute's packed
    f16 products; TAIL (with HX): gemv.row_products' unmasked whole K tiles; PAIRS: its K loop two tiles
    per iteration; GUARD (with HX): a row whose f16 products overflowed is redone in fp32."""
    m = tl.program_id(0)
    pid_n = tl.program_id(1)
    slot = tl.program_id(2)
    io_t = tl.float16 if OUT_F16 else tl.bfloat16
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = m + tl.arange(0, 1)
    pair = m * TOPK + slot
    e = tl.load(ids_ptr + pair).to(tl.int32)
    acc = tl.zeros([1, BLOCK_N], dtype=tl.float32)
    if (e >= 0) & (e < E):
        a_rows = a_ptr + pair.to(tl.int64) * stride_am + tl.zeros([1, 1], dtype=tl.int64)
        row_ok = tl.full([1], 1, tl.int1)
        amax = row_amax(a_rows, row_ok, K, ACT, 1, BLOCK_K)
        e64 = e.to(tl.int64)
        w_e, s_e, z_e, gscale = expert_operands(e, w_ptr, s_ptr, z_ptr, g_ptr, stride_we, stride_se, stride_ze, ELEM)
        a_row = a_ptr + pair.to(tl.int64) * stride_am
        ws = channel_scales(s_e, offs_n, N, stride_sn, ELEM, GROUP)
        acc_t = tile_zeros(ELEM, GROUP, BLOCK_N, BLOCK_K, DECODE, HX=HX)
        acc_t = row_products(acc_t, a_row, 0, tl.cdiv(K, BLOCK_K), K, amax, xs_ptr,
                             offs_n, w_e, s_e, z_e, ws, gscale, N, stride_wn, stride_wk,
                             stride_sn, stride_sk, stride_zk, ELEM, GROUP, SCALE_ROWS, HAS_ZERO, HW_FP8, DECODE,
                             ACT, BLOCK_N, BLOCK_K, io_t, EXACT_BF16, XW=XW, HX=HX, TAIL=TAIL, PAIRS=PAIRS)
        r = finish_row(acc_t, ws, ELEM, DECODE, ACT != 0, HX=HX)
        if HX != 0 and GUARD:
            if overflowed(r, r):            # an f16 product or sum overflowed: the row again in fp32
                FB: tl.constexpr = FALLBACK_K
                r = finish_row(row_products(tile_zeros(ELEM, GROUP, BLOCK_N, FB, DECODE), a_row, 0,
                                            tl.cdiv(K, FB), K, amax, xs_ptr, offs_n, w_e, s_e, z_e, ws, gscale,
                                            N, stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM, GROUP,
                                            SCALE_ROWS, HAS_ZERO, HW_FP8, DECODE, ACT, BLOCK_N, FB, io_t,
                                            EXACT_BF16, XW=XW), ws, ELEM, DECODE, ACT != 0)
        acc = r[None, :]
        if HAS_BIAS:
            acc += tl.load(b_ptr + e64 * stride_be + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
        acc = to_dtype(acc, io_t, EXACT_BF16).to(tl.float32)        # the reference rounds FC2's output
        if WEIGHT_OUT:
            acc = acc * tl.load(topw_ptr + pair)
    finish_tile(acc, part_ptr, cnt_ptr, m * tl.num_programs(1) + pid_n, slot, b_ptr, out_ptr, offs_m, offs_n,
                M, N, stride_om, SPLIT, False, EXACT_BF16)


#: the K tile of the overflow guard's fp32 recomputation (two MX groups, four NVFP4 ones): a rare path,
#: kept narrow so that its registers do not raise the kernel's (a BLOCK_K-wide fp32 loop did: fewer
#: programs per SM for every call, measured in the sm_90 compile)
FALLBACK_K = tl.constexpr(64)


@triton.jit
def overflowed(g, u):
    """Whether any value of the fp32 sums g or u is infinite or NaN: with HX (f16 products) an activation
    near f16's largest value (gemv._e2m1_hx_ptx) overflows; the caller then recomputes in fp32 (the
    reference's arithmetic; an input that is itself infinite or NaN gives the same values either way)."""
    big = 3.4028234663852886e38
    return tl.max(tl.where((tl.abs(g) <= big) & (tl.abs(u) <= big), 0, 1)) > 0


@triton.jit
def gate_up_products(acc_g, acc_u, a_row, t0, t1, K, amax, xs_ptr, n_g, n_u, w_ptr, s_ptr, z_ptr, ws_g, ws_u, gscale,
                     N, stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                     GATED: tl.constexpr, ELEM: tl.constexpr, GROUP: tl.constexpr, SCALE_ROWS: tl.constexpr,
                     HAS_ZERO: tl.constexpr, HW_FP8: tl.constexpr, DECODE: tl.constexpr, ACT: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, io_t: tl.constexpr, EXACT_BF16: tl.constexpr,
                     XW: tl.constexpr = False, HX: tl.constexpr = 0, TAIL: tl.constexpr = False,
                     PAIRS: tl.constexpr = False):
    """gemv.row_products for the gate rows n_g and the up rows n_u at once: both rows' next K tiles
    are loaded while the current ones are multiplied (GATED False: the gate rows only). TAIL: as
    gemv.row_products (whole K tiles with unmasked loads first). PAIRS: the (rest of the) K loop two
    tiles per iteration (a tile past t1 is masked off and adds zeros)."""
    ng0 = tl.min(n_g, axis=0)
    nu0 = tl.min(n_u, axis=0)
    k_end = tl.minimum(K, t1 * BLOCK_K)
    ku_end = k_end                  # ungated: the up loads are all masked off (no traffic)
    if not GATED:
        ku_end = 0
    ug, sg, zg, x, x2 = tile_load(a_row, t0 * BLOCK_K, k_end, n_g, ng0, w_ptr, s_ptr, z_ptr, N,
                                  stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                                  ELEM, GROUP, SCALE_ROWS, HAS_ZERO, ACT, DECODE, BLOCK_N, BLOCK_K, XW=XW, HX=HX)
    uu, su, zu, xu, xu2 = tile_load(a_row, t0 * BLOCK_K, ku_end, n_u, nu0, w_ptr, s_ptr, z_ptr, N,
                                    stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                                    ELEM, GROUP, SCALE_ROWS, HAS_ZERO, ACT, DECODE, BLOCK_N, BLOCK_K, XW=XW, HX=HX)
    if TAIL:
        t_full = tl.maximum(t0, k_end // BLOCK_K)
        for t in range(t0, t_full - 1):
            k1 = (t + 1) * BLOCK_K
            ugn, sgn, zgn, xn, x2n = tile_load(a_row, k1, k_end, n_g, ng0, w_ptr, s_ptr, z_ptr, N,
                                               stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM, GROUP,
                                               SCALE_ROWS, HAS_ZERO, ACT, DECODE, BLOCK_N, BLOCK_K, XW=XW, HX=HX,
                                               FULL=True)
            uun, sun, zun, xun, xu2n = tile_load(a_row, k1, ku_end, n_u, nu0, w_ptr, s_ptr, z_ptr, N,
                                                 stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM, GROUP,
                                                 SCALE_ROWS, HAS_ZERO, ACT, DECODE, BLOCK_N, BLOCK_K, XW=XW, HX=HX,
                                                 FULL=GATED)
            acc_g = tile_compute(acc_g, ug, sg, zg, x, x2, amax, xs_ptr, ws_g, gscale, ELEM, GROUP, HAS_ZERO,
                                 HW_FP8, DECODE, ACT, ACT != 0, BLOCK_N, BLOCK_K, io_t, EXACT_BF16, HX=HX)
            if GATED:
                acc_u = tile_compute(acc_u, uu, su, zu, x, x2, amax, xs_ptr, ws_u, gscale, ELEM, GROUP, HAS_ZERO,
                                     HW_FP8, DECODE, ACT, ACT != 0, BLOCK_N, BLOCK_K, io_t, EXACT_BF16, HX=HX)
            ug, sg, zg, x, x2 = ugn, sgn, zgn, xn, x2n
            uu, su, zu = uun, sun, zun
        t0 = tl.maximum(t0, t_full - 1)
    if PAIRS:       # two tiles per iteration, buffers alternating (gemv.row_products' PAIRS says why)
        for t in range(t0, t1, 2):
            k1 = (t + 1) * BLOCK_K
            ugb, sgb, zgb, xb, x2b = tile_load(a_row, k1, k_end, n_g, ng0, w_ptr, s_ptr, z_ptr, N,
                                               stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM, GROUP,
                                               SCALE_ROWS, HAS_ZERO, ACT, DECODE, BLOCK_N, BLOCK_K, XW=XW, HX=HX)
            uub, sub, zub, xub, xu2b = tile_load(a_row, k1, ku_end, n_u, nu0, w_ptr, s_ptr, z_ptr, N,
                                                 stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM, GROUP,
                                                 SCALE_ROWS, HAS_ZERO, ACT, DECODE, BLOCK_N, BLOCK_K, XW=XW, HX=HX)
            acc_g, acc_u = _gate_up_step(acc_g, acc_u, ug, sg, zg, uu, su, zu, x, x2, amax, xs_ptr, ws_g, ws_u,
                                         gscale, GATED, ELEM, GROUP, HAS_ZERO, HW_FP8, DECODE, ACT, BLOCK_N,
                                         BLOCK_K, io_t, EXACT_BF16, XW, HX)
            ug, sg, zg, x, x2 = tile_load(a_row, k1 + BLOCK_K, k_end, n_g, ng0, w_ptr, s_ptr, z_ptr, N,
                                          stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM, GROUP,
                                          SCALE_ROWS, HAS_ZERO, ACT, DECODE, BLOCK_N, BLOCK_K, XW=XW, HX=HX)
            uu, su, zu, xu, xu2 = tile_load(a_row, k1 + BLOCK_K, ku_end, n_u, nu0, w_ptr, s_ptr, z_ptr, N,
                                            stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM, GROUP,
                                            SCALE_ROWS, HAS_ZERO, ACT, DECODE, BLOCK_N, BLOCK_K, XW=XW, HX=HX)
            acc_g, acc_u = _gate_up_step(acc_g, acc_u, ugb, sgb, zgb, uub, sub, zub, xb, x2b, amax, xs_ptr, ws_g, ws_u,
                                         gscale, GATED, ELEM, GROUP, HAS_ZERO, HW_FP8, DECODE, ACT, BLOCK_N,
                                         BLOCK_K, io_t, EXACT_BF16, XW, HX)
    else:
        for t in range(t0, t1):
            k1 = (t + 1) * BLOCK_K
            ugn, sgn, zgn, xn, x2n = tile_load(a_row, k1, k_end, n_g, ng0, w_ptr, s_ptr, z_ptr, N,
                                               stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                                               ELEM, GROUP, SCALE_ROWS, HAS_ZERO, ACT, DECODE, BLOCK_N, BLOCK_K, XW=XW,
                                               HX=HX)
            uun, sun, zun, xun, xu2n = tile_load(a_row, k1, ku_end, n_u, nu0, w_ptr, s_ptr, z_ptr, N,
                                                 stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                                                 ELEM, GROUP, SCALE_ROWS, HAS_ZERO, ACT, DECODE, BLOCK_N, BLOCK_K,
                                                 XW=XW, HX=HX)
            acc_g, acc_u = _gate_up_step(acc_g, acc_u, ug, sg, zg, uu, su, zu, x, x2, amax, xs_ptr, ws_g, ws_u,
                                         gscale, GATED, ELEM, GROUP, HAS_ZERO, HW_FP8, DECODE, ACT, BLOCK_N,
                                         BLOCK_K, io_t, EXACT_BF16, XW, HX)
            ug, sg, zg, x, x2 = ugn, sgn, zgn, xn, x2n
            uu, su, zu = uun, sun, zun
    return acc_g, acc_u


@triton.jit
def _gate_up_step(acc_g, acc_u, ug, sg, zg, uu, su, zu, x, x2, amax, xs_ptr, ws_g, ws_u, gscale, GATED: tl.constexpr,
                  ELEM: tl.constexpr, GROUP: tl.constexpr, HAS_ZERO: tl.constexpr, HW_FP8: tl.constexpr,
                  DECODE: tl.constexpr, ACT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  io_t: tl.constexpr, EXACT_BF16: tl.constexpr, XW: tl.constexpr, HX: tl.constexpr):
    """One K tile's gate (and, GATED, up) products (gemv.tile_compute; the activations shared)."""
    acc_g = tile_compute(acc_g, ug, sg, zg, x, x2, amax, xs_ptr, ws_g, gscale, ELEM, GROUP, HAS_ZERO, HW_FP8,
                         DECODE, ACT, ACT != 0, BLOCK_N, BLOCK_K, io_t, EXACT_BF16, HX=HX)
    if GATED:
        acc_u = tile_compute(acc_u, uu, su, zu, x, x2, amax, xs_ptr, ws_u, gscale, ELEM, GROUP, HAS_ZERO,
                             HW_FP8, DECODE, ACT, ACT != 0, BLOCK_N, BLOCK_K, io_t, EXACT_BF16, HX=HX)
    return acc_g, acc_u


@triton.jit
def _up_epilogue(g, u, valid, e64, b_ptr, stride_be, n_g, n_u, jmask, out_ptr, out_row, limit, alpha, beta, lbeta,
                 ACTFN: tl.constexpr, GATED: tl.constexpr, HAS_LIMIT: tl.constexpr, HAS_BIAS: tl.constexpr,
                 io_t: tl.constexpr, EXACT_BF16: tl.constexpr):
    """FC1's [BLOCK_N] gate/up sums -> bias, the reference's rounding to the layer dtype, the
    activation, stored (zeros for a pair whose expert id is out of range)."""
    if HAS_BIAS:
        g += tl.load(b_ptr + e64 * stride_be + n_g, mask=jmask & valid, other=0.0).to(tl.float32)
        if GATED:
            u += tl.load(b_ptr + e64 * stride_be + n_u, mask=jmask & valid, other=0.0).to(tl.float32)
    hg = to_dtype(g, io_t, EXACT_BF16).to(tl.float32)
    hu = to_dtype(u, io_t, EXACT_BF16).to(tl.float32)
    y = _activate(hg, hu, ACTFN, HAS_LIMIT, limit, alpha, beta, lbeta)
    y = tl.where(valid, y, 0.0)
    tl.store(out_row, to_dtype(y, out_ptr.dtype.element_ty, EXACT_BF16), mask=jmask)


@triton.jit
def moe_up_split_kernel(a_ptr, ids_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, xs_ptr, out_ptr, part_ptr, cnt_ptr,
                        E, TOPK, N_OUT, N_W, K, stride_am, stride_om,
                        stride_we, stride_se, stride_ze, stride_be,
                        stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                        limit, alpha, beta, lbeta,
                        ACTFN: tl.constexpr, GATED: tl.constexpr, INTERLEAVED: tl.constexpr,
                        HAS_LIMIT: tl.constexpr, A_BY_PAIR: tl.constexpr, ELEM: tl.constexpr, GROUP: tl.constexpr,
                        SCALE_ROWS: tl.constexpr, HAS_ZERO: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                        SPLIT_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, HW_FP8: tl.constexpr,
                        DECODE: tl.constexpr, EXACT_BF16: tl.constexpr, OUT_F16: tl.constexpr,
                        XW: tl.constexpr = False, HX: tl.constexpr = 0, TAIL: tl.constexpr = False,
                        PAIRS: tl.constexpr = False, GUARD: tl.constexpr = True):
    """Grid (pairs, I / BLOCK_N, SPLIT_K). part: fp32 [SPLIT_K, pairs, 2, N_OUT] slices (SPLIT_K > 1);
    cnt: one arrival counter per (pair, column tile), zero between calls. XW, HX, TAIL: as moe_down_kernel;
    PAIRS: gate_up_products' K loop two tiles per iteration."""
    pair = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    io_t = tl.float16 if OUT_F16 else tl.bfloat16
    j = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    jmask = j < N_OUT
    e = tl.load(ids_ptr + pair).to(tl.int32)
    valid = (e >= 0) & (e < E)
    e = tl.where(valid, e, 0)
    e64 = e.to(tl.int64)
    if A_BY_PAIR:
        arow = pair
    else:
        arow = pair // TOPK
    a_row = a_ptr + arow.to(tl.int64) * stride_am
    n_g, n_u = gate_up_rows(j, N_OUT, GATED, INTERLEAVED)
    ws_g = channel_scales(s_ptr + e64 * stride_se, n_g, N_W, stride_sn, ELEM, GROUP)
    ws_u = channel_scales(s_ptr + e64 * stride_se, n_u, N_W, stride_sn, ELEM, GROUP)
    acc_g = tile_zeros(ELEM, GROUP, BLOCK_N, BLOCK_K, DECODE, HX=HX)
    acc_u = tile_zeros(ELEM, GROUP, BLOCK_N, BLOCK_K, DECODE, HX=HX)
    if valid:
        amax = row_amax(a_row + tl.zeros([1, 1], dtype=tl.int64), tl.full([1], 1, tl.int1), K, ACT, 1, BLOCK_K)
        w_e, s_e, z_e, gscale = expert_operands(e, w_ptr, s_ptr, z_ptr, g_ptr, stride_we, stride_se, stride_ze, ELEM)
        t0, t1 = split_range(K, BLOCK_K, SPLIT_K, pid_k)
        acc_g, acc_u = gate_up_products(acc_g, acc_u, a_row, t0, t1, K, amax, xs_ptr, n_g, n_u, w_e, s_e, z_e,
                                        ws_g, ws_u, gscale, N_W, stride_wn, stride_wk, stride_sn, stride_sk,
                                        stride_zk, GATED, ELEM, GROUP, SCALE_ROWS, HAS_ZERO, HW_FP8, DECODE, ACT,
                                        BLOCK_N, BLOCK_K, io_t, EXACT_BF16, XW=XW, HX=HX, TAIL=TAIL, PAIRS=PAIRS)
    g = finish_row(acc_g, ws_g, ELEM, DECODE, ACT != 0, HX=HX)
    u = finish_row(acc_u, ws_u, ELEM, DECODE, ACT != 0, HX=HX)
    if HX != 0 and GUARD:
        if valid & overflowed(g, u):       # an f16 product or sum overflowed: this tile again in fp32
            w_e, s_e, z_e, gscale = expert_operands(e, w_ptr, s_ptr, z_ptr, g_ptr, stride_we, stride_se, stride_ze,
                                                    ELEM)
            t0, t1 = split_range(K, BLOCK_K, SPLIT_K, pid_k)
            zero = tl.zeros([1], dtype=tl.float32)
            FB: tl.constexpr = FALLBACK_K
            f32_g, f32_u = gate_up_products(tile_zeros(ELEM, GROUP, BLOCK_N, FB, DECODE),
                                            tile_zeros(ELEM, GROUP, BLOCK_N, FB, DECODE), a_row,
                                            t0 * (BLOCK_K // FB), t1 * (BLOCK_K // FB), K,
                                            zero, xs_ptr, n_g, n_u, w_e, s_e, z_e, ws_g, ws_u, gscale, N_W, stride_wn,
                                            stride_wk, stride_sn, stride_sk, stride_zk, GATED, ELEM, GROUP,
                                            SCALE_ROWS, HAS_ZERO, HW_FP8, DECODE, ACT, BLOCK_N, FB, io_t,
                                            EXACT_BF16, XW=XW, HX=0)
            g = finish_row(f32_g, ws_g, ELEM, DECODE, ACT != 0)
            u = finish_row(f32_u, ws_u, ELEM, DECODE, ACT != 0)
    if not GATED:
        u = g
    out_row = out_ptr + pair.to(tl.int64) * stride_om + j
    if SPLIT_K > 1:
        base = part_ptr + pair.to(tl.int64) * (2 * N_OUT) + j
        slice_stride = tl.num_programs(0).to(tl.int64) * (2 * N_OUT)
        tl.store(base + pid_k * slice_stride, g, mask=jmask)
        tl.store(base + pid_k * slice_stride + N_OUT, u, mask=jmask)
        tl.debug_barrier()
        tile = pair * tl.num_programs(1) + pid_n
        arrived = tl.atomic_add(cnt_ptr + tile, 1)
        if arrived == SPLIT_K - 1:
            g = tl.zeros([BLOCK_N], dtype=tl.float32)
            u = tl.zeros([BLOCK_N], dtype=tl.float32)
            for s in range(0, SPLIT_K):
                g += tl.load(base + s * slice_stride, mask=jmask, other=0.0, cache_modifier=".cg")
                u += tl.load(base + s * slice_stride + N_OUT, mask=jmask, other=0.0, cache_modifier=".cg")
            _up_epilogue(g, u, valid, e64, b_ptr, stride_be, n_g, n_u, jmask, out_ptr, out_row, limit, alpha, beta, lbeta,
                         ACTFN, GATED, HAS_LIMIT, HAS_BIAS, io_t, EXACT_BF16)
            tl.atomic_xchg(cnt_ptr + tile, 0)
    else:
        _up_epilogue(g, u, valid, e64, b_ptr, stride_be, n_g, n_u, jmask, out_ptr, out_row, limit, alpha, beta, lbeta,
                     ACTFN, GATED, HAS_LIMIT, HAS_BIAS, io_t, EXACT_BF16)


@triton.jit
def mx_swap_load(x_cols, col_ok, k0, K, n_w, w_e, s_e, N_W, stride_wn, stride_sn, BLOCK_K: tl.constexpr,
                 io_t: tl.constexpr, EVEN_K: tl.constexpr):
    """One K tile of the MXFP4 swap-AB product as stored: the packed E2M1 bytes [WN, BLOCK_K / 2], their
    E8M0 scales [WN, BLOCK_K / 32] and the activation columns [BLOCK_K, BLOCK_M] (tl.dot_scaled's operands)."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    xt = tl.load(x_cols + offs_k[:, None], mask=k_in(offs_k, K, EVEN_K)[:, None] & col_ok, other=0.0).to(io_t)
    kb = k0 // 2 + tl.arange(0, BLOCK_K // 2)
    ks = k0 // 32 + tl.arange(0, BLOCK_K // 32)
    nmask = (n_w < N_W)[:, None]
    w = tl.load(w_e + n_w[:, None] * stride_wn + kb[None, :], mask=nmask & k_in(kb, K // 2, EVEN_K)[None, :], other=0)
    s = tl.load(s_e + n_w[:, None] * stride_sn + ks[None, :], mask=nmask & k_in(ks, K // 32, EVEN_K)[None, :], other=0)
    return w, s, xt


@triton.jit
def swap_product(acc, x_cols, col_ok, k0, K, n_w, w_e, s_e, z_e, gscale, N_W, stride_wn, stride_wk, stride_sn,
                 stride_sk, stride_zk, ELEM: tl.constexpr, PACK: tl.constexpr, GROUP: tl.constexpr,
                 HAS_ZERO: tl.constexpr, SCALED_DOT: tl.constexpr, WN: tl.constexpr, BLOCK_K: tl.constexpr,
                 io_t: tl.constexpr, DOT_F32: tl.constexpr, EVEN_K: tl.constexpr):
    """acc [WN, BLOCK_M] + W[n_w, k0 : k0 + BLOCK_K] @ X^T: the weight rows are the MMA's tall A operand
    and the activation rows (x_cols [1, BLOCK_M]: row bases; col_ok: which columns hold a row) its
    BLOCK_M-wide B operand. SCALED_DOT (MXFP4 on a GPU): the packed E2M1 tile and its E8M0 scales go to
    tl.dot_scaled as stored, which the compiler upcasts to the activation dtype; else the tile is
    decoded by dequant.w4_tile (the values the reference dequantizes)."""
    if SCALED_DOT:
        w, s, xt = mx_swap_load(x_cols, col_ok, k0, K, n_w, w_e, s_e, N_W, stride_wn, stride_sn, BLOCK_K, io_t, EVEN_K)
        out = tl.dot_scaled(w, s, "e2m1", xt, None, "fp16" if io_t == tl.float16 else "bf16", acc)
    else:
        offs_k = k0 + tl.arange(0, BLOCK_K)
        xt = tl.load(x_cols + offs_k[:, None], mask=k_in(offs_k, K, EVEN_K)[:, None] & col_ok, other=0.0).to(io_t)
        wt = w4_tile(k0, n_w, w_e, s_e, z_e, gscale, K, N_W, stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                     ELEM, PACK, GROUP, HAS_ZERO, WN, BLOCK_K, io_t, DOT_F32, EVEN_K)
        if DOT_F32:                              # the interpreter: fp32 operands (bf16 ones are raw bits there)
            out = mma_acc(wt.to(tl.float32), xt.to(tl.float32), acc, DOT_F32)
        else:
            out = mma_acc(wt, xt, acc, DOT_F32)
    return out


@triton.jit
def moe_swap_kernel(a_ptr, ids_ptr, topw_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, out_ptr, cnt_ptr, sum_ptr,
                    sorted_ptr, bexp_ptr, part_ptr, kcnt_ptr, T, E, TOPK, N_OUT, N_W, K, stride_am, stride_om,
                    stride_we, stride_se, stride_ze, stride_be,
                    stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                    limit, alpha, beta, lbeta,
                    STAGE: tl.constexpr, ACTFN: tl.constexpr, GATED: tl.constexpr, INTERLEAVED: tl.constexpr,
                    HAS_LIMIT: tl.constexpr, A_BY_PAIR: tl.constexpr, WEIGHT_OUT: tl.constexpr,
                    ELEM: tl.constexpr, PACK: tl.constexpr, GROUP: tl.constexpr, HAS_ZERO: tl.constexpr,
                    HAS_BIAS: tl.constexpr, SCALED_DOT: tl.constexpr, ALIGNED: tl.constexpr, FUSE_SUM: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EXACT_BF16: tl.constexpr,
                    OUT_F16: tl.constexpr, EVEN_K: tl.constexpr, PREFETCH: tl.constexpr = 0,
                    WORDS: tl.constexpr = False, DECODE: tl.constexpr = 0, SPLIT_K: tl.constexpr = 1,
                    JOIN: tl.constexpr = False, X_PIPE: tl.constexpr = False, TABLE: tl.constexpr = False):
    """Swap-AB grouped GEMM for 4-bit weights with unquantized activations (W4A16): the weight rows are
    the MMA's M side (64-128 rows: Hopper's warp-group MMA) and BLOCK_M pairs its N side (16 for a
    few tokens, instead of 16 pair rows against the weight tile as in moe_gemm_kernel). Grid (blocks,
    N_OUT / BLOCK_N). ALIGNED: block b holds the BLOCK_M pairs sorted_ptr[BLOCK_M * b : ...] of
    expert bexp_ptr[b] (the alignment launches' output; T pads; -1: unused block). Else (a few
    tokens, no alignment) block b is pair b alone, in column 0 (an expert id outside [0, E)
    computes with expert 0 and contributes zeros).

    STAGE 1: out[pair, j] = act(X[token or pair] @ w13[e]^T + b13) in the layer dtype; gated FC1
    stacks the tile's gate and up rows (g0, u0, g1, u1, ...) into one 2*BLOCK_N-row A tile.
    STAGE 2: out[pair, n] = (X[pair] @ w2[e]^T + b2) rounded (x router weight if WEIGHT_OUT), fp32.
    FUSE_SUM (STAGE 2, not ALIGNED): the last of a token's TOPK programs of a column tile to arrive
    (counter per token and tile at cnt_ptr, zero between calls) sums the token's pair rows in slot
    order into sum_ptr [M, N_OUT] (what topk_sum_kernel computes). PREFETCH 1 / 2 (with SCALED_DOT): the
    K tile one / two ahead is loaded before the current tile's dot (registers buffer them; Triton 3.6
    does not pipeline tl.dot_scaled's operands on Hopper: num_stages had no effect in the R4 sweep).
    WORDS: the K loop of the dense few-row kernel (gemm.w4_swap_tiles: 32-bit words of 8 codes, each
    code position one operand, the next tile's loads in flight (PREFETCH 2: two tiles ahead); JOIN:
    the decoded tile interleaved in k order for one dot per K tile; DECODE 4: E2M1 by bit placement,
    3: GPTQ by packed subtraction, inline PTX both; else the portable decode). SPLIT_K > 1 (WORDS):
    K is split over grid axis 2; the slices go to part_ptr (fp32, [SPLIT_K, blocks x column tiles,
    WN, BLOCK_M]) and the last program of a tile to arrive (counter at kcnt_ptr, zero between calls)
    sums them in slice order and finishes the tile. X_PIPE (WORDS, JOIN, E2M1): gemm.w4_swap_tiles's, the
    activation tiles pipelined into shared memory by Triton (num_stages >= 2). TABLE (WORDS, E2M1, bf16):
    the byte-table word decoder (gemm.e2m1_word_values_table: NVFP4's weights exactly the reference's)."""
    pid = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    io_t = tl.float16 if OUT_F16 else tl.bfloat16
    col = tl.arange(0, BLOCK_M)
    if ALIGNED:
        e = tl.load(bexp_ptr + pid)
        rows = tl.load(sorted_ptr + pid * BLOCK_M + col)
        valid = e >= 0
    else:
        e = tl.load(ids_ptr + pid).to(tl.int32)
        valid = (e >= 0) & (e < E)
        e = tl.where(valid, e, 0)
        rows = tl.where(col == 0, pid, T)
    if e >= 0:
        row_ok = rows < T
        if A_BY_PAIR or STAGE == 2:
            arow = rows
        else:
            arow = rows // TOPK
        x_cols = a_ptr + arow[None, :].to(tl.int64) * stride_am
        e64 = e.to(tl.int64)
        w_e, s_e, z_e, gscale = expert_operands(e, w_ptr, s_ptr, z_ptr, g_ptr, stride_we, stride_se, stride_ze,
                                                ELEM)
        j = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        jmask = j < N_OUT
        TWO: tl.constexpr = STAGE == 1 and GATED
        WN: tl.constexpr = BLOCK_N * (1 + TWO)
        n_g, n_u = gate_up_rows(j, N_OUT, GATED, INTERLEAVED)
        if TWO:
            n_w = tl.reshape(tl.join(n_g, n_u), [WN])
        else:
            n_w = j
        acc = tl.zeros([WN, BLOCK_M], dtype=tl.float32)
        k_tiles = tl.cdiv(K, BLOCK_K)
        if PREFETCH == 1 and SCALED_DOT:            # the next tile's bytes in flight while this one multiplies
            w, s, xt = mx_swap_load(x_cols, row_ok[None, :], 0, K, n_w, w_e, s_e, N_W, stride_wn, stride_sn, BLOCK_K,
                                    io_t, EVEN_K)
            for t in range(0, k_tiles):
                wn, sn, xn = mx_swap_load(x_cols, row_ok[None, :], tl.minimum(t + 1, k_tiles - 1) * BLOCK_K, K, n_w,
                                          w_e, s_e, N_W, stride_wn, stride_sn, BLOCK_K, io_t, EVEN_K)
                acc = tl.dot_scaled(w, s, "e2m1", xt, None, "fp16" if io_t == tl.float16 else "bf16", acc)
                w, s, xt = wn, sn, xn
        elif PREFETCH == 2 and SCALED_DOT:          # two tiles ahead
            w, s, xt = mx_swap_load(x_cols, row_ok[None, :], 0, K, n_w, w_e, s_e, N_W, stride_wn, stride_sn, BLOCK_K,
                                    io_t, EVEN_K)
            w1, s1, x1 = mx_swap_load(x_cols, row_ok[None, :], tl.minimum(1, k_tiles - 1) * BLOCK_K, K, n_w, w_e,
                                      s_e, N_W, stride_wn, stride_sn, BLOCK_K, io_t, EVEN_K)
            for t in range(0, k_tiles):
                wn, sn, xn = mx_swap_load(x_cols, row_ok[None, :], tl.minimum(t + 2, k_tiles - 1) * BLOCK_K, K, n_w,
                                          w_e, s_e, N_W, stride_wn, stride_sn, BLOCK_K, io_t, EVEN_K)
                acc = tl.dot_scaled(w, s, "e2m1", xt, None, "fp16" if io_t == tl.float16 else "bf16", acc)
                w, s, xt = w1, s1, x1
                w1, s1, x1 = wn, sn, xn
        elif WORDS:
            WORDS_PREFETCH: tl.constexpr = 2 if PREFETCH == 2 else 1
            t0, t1 = split_range(K, BLOCK_K, SPLIT_K, pid_k)
            acc = w4_swap_tiles(acc, t0, t1, n_w, arow.to(tl.int64), row_ok, a_ptr, w_e, s_e, z_e, gscale, K, N_W,
                                stride_am, stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM, HAS_ZERO,
                                GROUP, WN, BLOCK_K, DECODE, EXACT_BF16, io_t, JOIN, WORDS_PREFETCH, EVEN_K, False,
                                X_PIPE, False, TABLE)
        else:
            for t in range(0, k_tiles):
                acc = swap_product(acc, x_cols, row_ok[None, :], t * BLOCK_K, K, n_w, w_e, s_e, z_e, gscale, N_W,
                                   stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM, PACK, GROUP, HAS_ZERO,
                                   SCALED_DOT, WN, BLOCK_K, io_t, EXACT_BF16, EVEN_K)
        if SPLIT_K > 1:                         # K slices: the last to arrive sums them in slice order
            tile = pid * tl.num_programs(1) + pid_n
            cell = tl.arange(0, WN)[:, None] * BLOCK_M + col[None, :]
            cmask = row_ok[None, :] & (tl.arange(0, WN) < WN)[:, None]
            base = part_ptr + tile.to(tl.int64) * (WN * BLOCK_M) + cell
            slice_stride = (tl.num_programs(0) * tl.num_programs(1)).to(tl.int64) * (WN * BLOCK_M)
            tl.store(base + pid_k * slice_stride, acc, mask=cmask)
            tl.debug_barrier()
            arrived = tl.atomic_add(kcnt_ptr + tile, 1)
            if arrived == SPLIT_K - 1:
                acc = tl.zeros([WN, BLOCK_M], dtype=tl.float32)
                for sl in range(0, SPLIT_K):
                    acc += tl.load(base + sl * slice_stride, mask=cmask, other=0.0, cache_modifier=".cg")
                _swap_finish(acc, rows, row_ok, j, jmask, n_g, n_u, e64, valid, topw_ptr, b_ptr, out_ptr, sum_ptr,
                             cnt_ptr, pid, pid_n, TOPK, N_OUT, stride_om, stride_be, limit, alpha, beta, lbeta,
                             STAGE, ACTFN, GATED, TWO, HAS_LIMIT, WEIGHT_OUT, HAS_BIAS, FUSE_SUM, BLOCK_M, BLOCK_N,
                             io_t, EXACT_BF16)
                tl.atomic_xchg(kcnt_ptr + tile, 0)
        else:
            _swap_finish(acc, rows, row_ok, j, jmask, n_g, n_u, e64, valid, topw_ptr, b_ptr, out_ptr, sum_ptr, cnt_ptr,
                         pid, pid_n, TOPK, N_OUT, stride_om, stride_be, limit, alpha, beta, lbeta, STAGE, ACTFN, GATED,
                         TWO, HAS_LIMIT, WEIGHT_OUT, HAS_BIAS, FUSE_SUM, BLOCK_M, BLOCK_N, io_t, EXACT_BF16)


@triton.jit
def _swap_finish(acc, rows, row_ok, j, jmask, n_g, n_u, e64, valid, topw_ptr, b_ptr, out_ptr, sum_ptr, cnt_ptr, pid,
                 pid_n, TOPK, N_OUT, stride_om, stride_be, limit, alpha, beta, lbeta, STAGE: tl.constexpr,
                 ACTFN: tl.constexpr, GATED: tl.constexpr, TWO: tl.constexpr, HAS_LIMIT: tl.constexpr,
                 WEIGHT_OUT: tl.constexpr, HAS_BIAS: tl.constexpr, FUSE_SUM: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, io_t: tl.constexpr, EXACT_BF16: tl.constexpr):
    """moe_swap_kernel's epilogue on a finished acc [WN, BLOCK_M]: FC1 (STAGE 1) through _up_epilogue,
    FC2 (STAGE 2) bias, rounding, router weight, and the top-k sum (FUSE_SUM)."""
    y = tl.trans(acc)                                     # [BLOCK_M, WN]: one row per pair
    omask = row_ok[:, None] & jmask[None, :]
    out_rows = out_ptr + rows[:, None].to(tl.int64) * stride_om + j[None, :]
    if STAGE == 1:
        if TWO:
            g, u = tl.split(tl.reshape(y, [BLOCK_M, BLOCK_N, 2]))
        else:
            g = y
            u = y
        _up_epilogue(g, u, valid, e64, b_ptr, stride_be, n_g[None, :], n_u[None, :], omask, out_ptr, out_rows,
                     limit, alpha, beta, lbeta, ACTFN, GATED, HAS_LIMIT, HAS_BIAS, io_t, EXACT_BF16)
    else:
        if HAS_BIAS:
            y += tl.load(b_ptr + e64 * stride_be + j, mask=jmask, other=0.0).to(tl.float32)[None, :]
        y = to_dtype(y, io_t, EXACT_BF16).to(tl.float32)          # the reference rounds FC2's output
        if WEIGHT_OUT:
            y = y * tl.load(topw_ptr + rows, mask=row_ok, other=0.0)[:, None]
        y = tl.where(valid, y, 0.0)
        tl.store(out_rows, y, mask=omask)
        if FUSE_SUM:
            sum_slots(out_ptr, stride_om, sum_ptr, cnt_ptr, pid, pid_n, tl.num_programs(1), TOPK, N_OUT, j, jmask, BLOCK_N,
                      EXACT_BF16)
