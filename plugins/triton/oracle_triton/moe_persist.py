"""A few tokens' W8A8 MoE in one persistent launch: FC1 tiles, then FC2 tiles, from one work counter.

Why: at M = 1 the two-launch direct path (moe.direct_mma_config with QUANT_LAST) streams DeepSeek-R1's
352 MB of experts at 3.6 TB/s (FC1) and 3.3 TB/s (FC2) against a 4.2 TB/s copy: each launch ramps up
(every program rounds its input before its first weight load) and drains (the last programs run
alone), and FC2's grid does not fit the GPU in one wave. Here a fixed number of programs take tiles in
order from a counter: all FC1 tiles (pair-major), then all FC2 tiles. The last FC1 tile of a pair
rounds the pair's row into FC2's codes (QUANT_LAST) and sets the pair's flag; an FC2 tile of that pair
waits for the flag. A program that takes an FC2 tile therefore only waits on FC1 tiles already taken,
by programs that are running (no deadlock), and HBM keeps streaming FC2's rows of finished pairs while
other pairs' FC1 tiles end: no launch boundary, one drain for the whole call.

Each tile is moe_kernels.moe_gemm_kernel's DIRECT program, called as a function (TILE_ARGS); the
counters and flags are zero between calls (the last program to finish resets them), so a CUDA graph
replays the launch as it is.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .moe_kernels import moe_gemm_kernel, quantize_row_codes
from .pdl import wait_until_at_least


@triton.jit
def _wait_ready(ready_ptr, pair, SPIN_ASM: tl.constexpr):
    """Until FC1 has finished pair `pair` (its flag is 1): gpu-scope acquire loads with a short sleep
    (SPIN_ASM, compiled), or atomics (the interpreter, where programs run one after another and the
    flag is always set by then)."""
    if SPIN_ASM:
        wait_until_at_least(ready_ptr + pair, 1)
    else:
        seen = tl.atomic_add(ready_ptr + pair, 0)
        while seen == 0:
            seen = tl.atomic_add(ready_ptr + pair, 0)
    tl.debug_barrier()


#: STAMP: int64 slots per program: start, inputs rounded, tiles taken, end, then (tile, begin, ready, end) for
#: each of its first STAMP_TILES tiles (global timer, ns)
STAMP_TILES = tl.constexpr(32)
STAMP_SLOTS = tl.constexpr(4 + 4 * 32)


@triton.jit
def _now_ns():
    """The GPU's global timer (ns, one clock for every SM)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def moe_pairs_persistent_kernel(
        # FC1: the tokens (layer dtype) and their codes / scales (written by each program first; xq and
        # xqc: one buffer as the dot's operand type and as bytes), w13 and its scales, bias, FC1's output rows
        # and the rounded ones FC2 reads (iq / iqc: one buffer, as xq / xqc) with their scales
        x_ptr, xq_ptr, xqc_ptr, xs_ptr, w1_ptr, s1_ptr, b1_ptr, inter_ptr, iq_ptr, iqc_ptr, is_ptr,
        # FC2: w2, its scales, bias, the pair rows and the output
        w2_ptr, s2_ptr, b2_ptr, pairs_ptr, out_ptr,
        ids_ptr, topw_ptr, last_cnt_ptr, sum_cnt_ptr, ready_ptr, work_ptr, done_ptr,
        T, M, TOPK, E, H, I, N_W1,
        stride_x, stride_inter, stride_pairs,
        stride_w1e, stride_s1e, stride_b1e, stride_w1n, stride_s1n, stride_s1k,
        stride_w2e, stride_s2e, stride_b2e, stride_w2n, stride_s2n, stride_s2k,
        limit, alpha, beta, lbeta,
        ACTFN: tl.constexpr, GATED: tl.constexpr, INTERLEAVED: tl.constexpr, HAS_LIMIT: tl.constexpr,
        GROUP1: tl.constexpr, GROUP2: tl.constexpr, SCALE_ROWS: tl.constexpr, HAS_BIAS1: tl.constexpr,
        HAS_BIAS2: tl.constexpr,
        BLOCK_N1: tl.constexpr, BLOCK_N2: tl.constexpr,
        BLOCK_K: tl.constexpr, HW_FP8: tl.constexpr, DOT_F32: tl.constexpr, OUT_F16: tl.constexpr,
        FP8_DOT: tl.constexpr, UNIFORM1: tl.constexpr, UNIFORM2: tl.constexpr, EVEN_K1: tl.constexpr,
        EVEN_K2: tl.constexpr, K_GROUPS: tl.constexpr, N_GROUPS: tl.constexpr, SWAP1: tl.constexpr,
        SWAP2: tl.constexpr, PF_HEAD: tl.constexpr, SPIN_ASM: tl.constexpr, stamp_ptr=None,
        STAMP: tl.constexpr = False):
    """Grid (P,): W8A8 experts with 1x128 activation groups, one pair per tile (row 0 of a 16-row tile),
    the router weight on the output. Tiles 0 .. T * n1 - 1 are FC1's (pair t // n1, column tile t % n1),
    the rest FC2's; the top-k sum is FC2's (FUSE_SUM). STAMP (a probe, bench/persist_probe.py; compiled
    only): each program writes its timeline to stamp_ptr (STAMP_SLOTS int64 per program, see STAMP_SLOTS)."""
    n1 = tl.cdiv(I, BLOCK_N1)
    n2 = tl.cdiv(H, BLOCK_N2)
    total1 = T * n1
    total = total1 + T * n2
    # FC1's input codes, once per program (every program writes the same bytes and reads its own): the
    # two-launch path rounds the pair's row in every FC1 program's prologue (QUANT_PRO), here that would
    # be once per tile, in series
    if STAMP:
        srow = stamp_ptr + tl.program_id(0).to(tl.int64) * STAMP_SLOTS
        tl.store(srow, _now_ns())
    for m in range(0, M):
        quantize_row_codes(x_ptr + m * stride_x, xqc_ptr + m * stride_x, xs_ptr + m, M, H,
                           K_GROUPS)
    if STAMP:
        tl.store(srow + 1, _now_ns())
    taken = 0
    tile = tl.atomic_add(work_ptr, 1)
    while tile < total:
        if STAMP:
            t_begin = _now_ns()
            t_ready = t_begin
        if tile < total1:
            moe_gemm_kernel(xq_ptr, w1_ptr, s1_ptr, s1_ptr, s1_ptr, b1_ptr, topw_ptr, ids_ptr, ids_ptr, inter_ptr,
                            xs_ptr, T, TOPK, I, N_W1, H, stride_x, stride_inter,
                            stride_w1e, stride_s1e, 0, stride_b1e,
                            stride_w1n, 1, stride_s1n, stride_s1k, 0, M,
                            limit, alpha, beta, lbeta, E, inter_ptr,
                            1, ACTFN, GATED, INTERLEAVED, HAS_LIMIT, False, True, 0, 1, GROUP1, SCALE_ROWS, False, True,
                            HAS_BIAS1, 16, BLOCK_N1, BLOCK_K, HW_FP8, DOT_F32, OUT_F16,
                            A_CODES=1, FP8_DOT=FP8_DOT, UNIFORM_WS=UNIFORM1, EVEN_K=EVEN_K1, DIRECT=True,
                            os_ptr=is_ptr, cnt_ptr=last_cnt_ptr, lq_ptr=iqc_ptr, QUANT_LAST=True, N_GROUPS=N_GROUPS,
                            SWAP_AB=SWAP1, PF_HEAD=PF_HEAD, TILE_ARGS=True, tile_m=tile // n1, tile_n=tile % n1,
                            ready_ptr=ready_ptr, READY=True)
        else:
            q = tile - total1
            pair = q // n2
            _wait_ready(ready_ptr, pair, SPIN_ASM)
            if STAMP:
                t_ready = _now_ns()
            moe_gemm_kernel(iq_ptr, w2_ptr, s2_ptr, s2_ptr, s2_ptr, b2_ptr, topw_ptr, sum_cnt_ptr, ids_ptr, pairs_ptr,
                            is_ptr, T, TOPK, H, H, I, stride_inter, stride_pairs,
                            stride_w2e, stride_s2e, 0, stride_b2e,
                            stride_w2n, 1, stride_s2n, stride_s2k, 0, T,
                            limit, alpha, beta, lbeta, E, out_ptr,
                            2, ACTFN, False, INTERLEAVED, HAS_LIMIT, True, True, 0, 1, GROUP2, SCALE_ROWS, False, True,
                            HAS_BIAS2, 16, BLOCK_N2, BLOCK_K, HW_FP8, DOT_F32, OUT_F16,
                            A_CODES=1, FP8_DOT=FP8_DOT, UNIFORM_WS=UNIFORM2, EVEN_K=EVEN_K2, DIRECT=True,
                            FUSE_SUM=True, SWAP_AB=SWAP2, TILE_ARGS=True, tile_m=pair, tile_n=q % n2)
        if STAMP:
            if taken < STAMP_TILES:
                slot = srow + 4 + 4 * taken
                tl.store(slot, tile.to(tl.int64))
                tl.store(slot + 1, t_begin)
                tl.store(slot + 2, t_ready)
                tl.store(slot + 3, _now_ns())
        taken += 1
        tile = tl.atomic_add(work_ptr, 1)
    if STAMP:
        tl.store(srow + 2, taken.to(tl.int64))
        tl.store(srow + 3, _now_ns())
    tl.debug_barrier()
    finished = tl.atomic_add(done_ptr, 1)
    if finished == tl.num_programs(0) - 1:       # every tile is done: zero the counter and flags for the next call
        tl.atomic_xchg(work_ptr, 0)
        offs = tl.arange(0, 16)
        for p0 in range(0, T, 16):
            tl.store(ready_ptr + p0 + offs, tl.zeros([16], tl.int32), mask=p0 + offs < T)
        tl.atomic_xchg(done_ptr, 0)
