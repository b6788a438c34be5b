"""Fused-MoE device code: expert alignment, the grouped GEMMs (w13 with the activation
fused, w2 with the router weight), and the top-k reduction.

Alignment runs in two launches and never synchronizes with the host:
  count: each (token, slot) pair takes its rank inside its expert with an atomic add;
  align: one program, or a few with shares of the work, turns the counts into block-padded
         offsets (exclusive cumsum of counts rounded up to BLOCK_M), labels each BLOCK_M-row
         block with its expert (-1: unused), scatters pair ids to offset + rank, pads each
         expert's last block with the sentinel T (= number of pairs), and resets the counts
         for the next call (graph replay).
The grid of the GEMMs is the static bound cdiv(T, BLOCK_M) + min(E, T) on the number of
blocks; programs of unused blocks exit at once. prep_kernel does both steps in one program
(a few hundred pairs), its other programs rounding FC1's input rows to codes (one launch for
three).
"""
from __future__ import annotations

import triton
import triton.language as tl

from .dequant import (act_codes_tile, act_tile, code_product, e4m3_encode, expert_operands, fp8_codes_product,
                      fp8_codes_scale, fp8_operand, fp8_tile_scales, k_in, mma_acc, quantize_tile_codes, tile_product,
                      to_dtype, w4_product)
from .gemv import row_amax
from .pdl import gdc_launch_dependents, gdc_wait, prefetch_row_heads, prefetch_rows_l2

SILU, GELU, SITU, SWIGLUOAI, SWIGLUOAI_HALVES, RELU2 = 0, 1, 2, 3, 4, 5
ACTIVATION_CODES = {"silu": SILU, "gelu": GELU, "situ": SITU, "swigluoai": SWIGLUOAI,
                    "swigluoai_uninterleave": SWIGLUOAI_HALVES, "relu2": RELU2, "relu2_no_mul": RELU2}


@triton.jit
def count_pairs(ids_ptr, cnt_ptr, rank_ptr, p0, T, E, BLOCK: tl.constexpr):
    """Pairs p0 .. p0 + BLOCK: each takes its rank inside its expert (atomic add on the expert's count)."""
    offs = p0 + tl.arange(0, BLOCK)
    e = tl.load(ids_ptr + offs, mask=offs < T, other=0).to(tl.int32)
    ok = (offs < T) & (e >= 0) & (e < E)          # out-of-range ids never index memory (dropped)
    rank = tl.atomic_add(cnt_ptr + e, tl.full([BLOCK], 1, tl.int32), mask=ok)
    tl.store(rank_ptr + offs, rank, mask=ok)


@triton.jit
def count_kernel(ids_ptr, cnt_ptr, rank_ptr, T, E, BLOCK: tl.constexpr):
    count_pairs(ids_ptr, cnt_ptr, rank_ptr, tl.program_id(0) * BLOCK, T, E, BLOCK)


@triton.jit
def align_pairs(ids_ptr, rank_ptr, cnt_ptr, off_ptr, sorted_ptr, block_expert_ptr, T, E, NUM_BLOCKS,
                BLOCK_M: tl.constexpr, E_POW2: tl.constexpr, BLOCK: tl.constexpr, part, parts, done_ptr):
    """The align step on complete counts and ranks (see the module docstring), program `part` of `parts`: each
    computes every expert's offset from the counts itself and takes its share of the labels, the padding and
    the pairs (with parts 1 all of them). The sentinel goes only where no pair will (R8: filling all NUM_BLOCKS
    x BLOCK_M rows 256 at a time before the scatter took 115 us of DeepSeek-R1's M = 4096 call). The counts
    are reset for the next call by the one program (done_ptr None), else by the last of the programs to have
    read them (done_ptr: an int32 arrival counter at zero, left at zero)."""
    ex = tl.arange(0, E_POW2)
    emask = ex < E
    c = tl.load(cnt_ptr + ex, mask=emask, other=0)
    padded = tl.cdiv(c, BLOCK_M) * BLOCK_M
    ends = tl.cumsum(padded, axis=0)
    total = tl.sum(padded, axis=0)
    tl.store(off_ptr + ex, ends - padded, mask=emask)
    LBLOCK: tl.constexpr = max(16, 8192 // E_POW2)      # blocks labelled per step ([LBLOCK, E_POW2] in registers)
    for b0 in range(part * LBLOCK, NUM_BLOCKS, parts * LBLOCK):
        blocks = b0 + tl.arange(0, LBLOCK)
        first_row = blocks * BLOCK_M
        expert = tl.sum(((ends[None, :] <= first_row[:, None]) & emask[None, :]).to(tl.int32), axis=1)
        expert = tl.where(first_row < total, expert, -1)
        tl.store(block_expert_ptr + blocks, expert, mask=blocks < NUM_BLOCKS)
    # the sentinel T: in the padding of each expert's last block (rows count .. padded of its range), then
    # in every row of the unused blocks, 4096 at a time
    # (BLOCK_M & -BLOCK_M: the largest power of two dividing it, BLOCK_M itself but for moe_ws's WS_TAIL blocks)
    PCOLS: tl.constexpr = max(1, min(BLOCK_M & -BLOCK_M, 4096 // E_POW2))
    starts = ends - padded
    mine = emask & (ex % parts == part)             # the experts whose padding this program writes
    for c0 in range(0, BLOCK_M, PCOLS):
        col = (starts + c + c0)[:, None] + tl.arange(0, PCOLS)[None, :]
        tl.store(sorted_ptr + col, tl.full([E_POW2, PCOLS], 0, tl.int32) + T,
                 mask=mine[:, None] & (col < (starts + padded)[:, None]))
    for r0 in range(total + part * 4096, NUM_BLOCKS * BLOCK_M, parts * 4096):
        rows = r0 + tl.arange(0, 4096)
        tl.store(sorted_ptr + rows, tl.full([4096], 0, tl.int32) + T, mask=rows < NUM_BLOCKS * BLOCK_M)
    tl.debug_barrier()      # the offsets stored above (the same values by every program) are read back below
    for p0 in range(part * BLOCK, T, parts * BLOCK):
        pairs = p0 + tl.arange(0, BLOCK)
        e = tl.load(ids_ptr + pairs, mask=pairs < T, other=0).to(tl.int32)
        ok = (pairs < T) & (e >= 0) & (e < E)
        pos = tl.load(off_ptr + e, mask=ok, other=0) + tl.load(rank_ptr + pairs, mask=ok, other=0)
        tl.store(sorted_ptr + pos, pairs, mask=ok)
    if done_ptr is None:
        tl.store(cnt_ptr + ex, tl.zeros([E_POW2], tl.int32), mask=emask)
    else:                   # acq_rel: every program's reads of the counts come before the last one's reset
        if tl.atomic_add(done_ptr, 1) == parts - 1:
            tl.store(cnt_ptr + ex, tl.zeros([E_POW2], tl.int32), mask=emask)
            tl.store(done_ptr, 0)


@triton.jit
def align_kernel(ids_ptr, rank_ptr, cnt_ptr, off_ptr, sorted_ptr, block_expert_ptr, T, E, NUM_BLOCKS,
                 BLOCK_M: tl.constexpr, E_POW2: tl.constexpr, BLOCK: tl.constexpr, done_ptr=None):
    """align_pairs on a grid of one program, or of several with done_ptr (their arrival counter)."""
    align_pairs(ids_ptr, rank_ptr, cnt_ptr, off_ptr, sorted_ptr, block_expert_ptr, T, E, NUM_BLOCKS, BLOCK_M,
                E_POW2, BLOCK, tl.program_id(0), tl.num_programs(0), done_ptr)


@triton.jit
def align_small_kernel(ids_ptr, sorted_ptr, block_expert_ptr, T, E, NUM_BLOCKS, BLOCK_M: tl.constexpr,
                       E_POW2: tl.constexpr, CHUNK: tl.constexpr, x_ptr=None, q_ptr=None, qs_ptr=None, stride_x=0,
                       stride_q=0, stride_qs=0, K=0, QUANT: tl.constexpr = False, K_GROUPS: tl.constexpr = 1):
    """The count and align steps as one launch of E programs, without atomics (a few hundred pairs):
    program e histograms every pair's expert id ([CHUNK, E_POW2] compares at a time; ids out of
    range match no expert and are dropped), takes its block-padded offset from the exclusive prefix
    sum, labels its blocks and writes its pairs in pair order, then the sentinel T up to its padded
    end; program 0 labels the blocks after the last expert's -1. align_kernel's blocks, labels and
    padding, and the same pairs in each block (in pair order, where the atomics' order may differ:
    a row's products do not depend on its place in the block). QUANT (1x128 activation groups): programs
    E + r round FC1's input row r into E4M3 codes (q_ptr) and group scales (qs_ptr: [K / 128, rows]),
    gemm.act_qdq_kernel's bits (quantize_row_codes), so no quantization launch follows the alignment."""
    pid = tl.program_id(0)
    if pid < E:
        _align_expert(ids_ptr, sorted_ptr, block_expert_ptr, T, E, NUM_BLOCKS, pid, BLOCK_M, E_POW2, CHUNK)
    elif QUANT:
        r = (pid - E).to(tl.int64)
        quantize_row_codes(x_ptr + r * stride_x, q_ptr + r * stride_q, qs_ptr + r, stride_qs, K, K_GROUPS)


@triton.jit
def _align_expert(ids_ptr, sorted_ptr, block_expert_ptr, T, E, NUM_BLOCKS, e, BLOCK_M: tl.constexpr,
                  E_POW2: tl.constexpr, CHUNK: tl.constexpr):
    """align_small_kernel's program for expert e."""
    ex = tl.arange(0, E_POW2)
    counts = tl.zeros([E_POW2], dtype=tl.int32)
    for p0 in range(0, T, CHUNK):
        p = p0 + tl.arange(0, CHUNK)
        ide = tl.load(ids_ptr + p, mask=p < T, other=-1).to(tl.int32)
        counts += tl.sum((ide[:, None] == ex[None, :]).to(tl.int32), axis=0)
    counts = tl.where(ex < E, counts, 0)
    padded = tl.cdiv(counts, BLOCK_M) * BLOCK_M
    total = tl.sum(padded, axis=0)
    start = tl.sum(tl.where(ex < e, padded, 0), axis=0)
    mine = tl.sum(tl.where(ex == e, padded, 0), axis=0)
    have = tl.sum(tl.where(ex == e, counts, 0), axis=0)
    for b in range(start // BLOCK_M, (start + mine) // BLOCK_M):
        tl.store(block_expert_ptr + b, e)
    if e == 0:
        for b in range(total // BLOCK_M, NUM_BLOCKS):
            tl.store(block_expert_ptr + b, -1)
    if mine > 0:
        placed = start
        for p0 in range(0, T, CHUNK):
            p = p0 + tl.arange(0, CHUNK)
            hit = (tl.load(ids_ptr + p, mask=p < T, other=-1).to(tl.int32) == e) & (p < T)
            pos = placed + tl.cumsum(hit.to(tl.int32), axis=0) - 1
            tl.store(sorted_ptr + pos, p, mask=hit)
            placed += tl.sum(hit.to(tl.int32), axis=0)
        PSTEP: tl.constexpr = BLOCK_M & -BLOCK_M      # BLOCK_M, or a power of two dividing it (WS_TAIL blocks)
        for r0 in range(start + have, start + mine, PSTEP):
            r = r0 + tl.arange(0, PSTEP)
            tl.store(sorted_ptr + r, tl.full([PSTEP], 0, tl.int32) + T, mask=r < start + mine)


@triton.jit
def prep_kernel(ids_ptr, rank_ptr, cnt_ptr, off_ptr, sorted_ptr, block_expert_ptr, T, E, NUM_BLOCKS,
                x_ptr, q_ptr, qs_ptr, stride_x, stride_q, stride_qs, K, out_ptr, TOPK, H,
                BLOCK_M: tl.constexpr, E_POW2: tl.constexpr, BLOCK: tl.constexpr, QUANT: tl.constexpr,
                K_GROUPS: tl.constexpr, ZERO_OUT: tl.constexpr = False):
    """The count and align steps and FC1's input codes in one launch (a few hundred pairs): program 0
    counts every pair (BLOCK at a time), waits for its own atomics at a barrier and aligns them;
    with QUANT, program 1 + r rounds token row r of x into 1x128-group E4M3 codes (q_ptr) and scales
    (qs_ptr: [K / 128, M]), gemm.act_qdq_kernel's bits (quantize_row_codes). ZERO_OUT (the FC2 GEMM
    sums the slots itself, which only happens for tokens with a pair in range): program 0 also writes
    zeros to out_ptr [T / TOPK, H] rows of tokens whose every expert id is out of range."""
    pid = tl.program_id(0)
    if pid == 0:
        for p0 in range(0, T, BLOCK):
            count_pairs(ids_ptr, cnt_ptr, rank_ptr, p0, T, E, BLOCK)
        tl.debug_barrier()
        align_pairs(ids_ptr, rank_ptr, cnt_ptr, off_ptr, sorted_ptr, block_expert_ptr, T, E, NUM_BLOCKS, BLOCK_M,
                    E_POW2, BLOCK, 0, 1, None)
        if ZERO_OUT:
            m = T // TOPK
            for t0 in range(0, m, BLOCK):
                tok = t0 + tl.arange(0, BLOCK)
                live = tl.zeros([BLOCK], dtype=tl.int32)
                for slot in range(0, TOPK):
                    e = tl.load(ids_ptr + tok * TOPK + slot, mask=tok < m, other=-1).to(tl.int32)
                    live += ((e >= 0) & (e < E)).to(tl.int32)
                dead = (tok < m) & (live == 0)
                for h0 in range(0, H, 64):
                    hh = h0 + tl.arange(0, 64)
                    tl.store(out_ptr + tok[:, None].to(tl.int64) * H + hh[None, :],
                             tl.zeros([BLOCK, 64], dtype=out_ptr.dtype.element_ty),
                             mask=dead[:, None] & (hh < H)[None, :])
    elif QUANT:
        r = (pid - 1).to(tl.int64)
        quantize_row_codes(x_ptr + r * stride_x, q_ptr + r * stride_q, qs_ptr + r, stride_qs, K, K_GROUPS)


@triton.jit
def gate_up_rows(j, N_OUT, GATED: tl.constexpr, INTERLEAVED: tl.constexpr):
    """FC1 weight rows of intermediate columns j: (gate, up), interleaved (2j, 2j + 1) or halves
    (j, j + I); ungated activations read one row (returned twice)."""
    if GATED:
        if INTERLEAVED:
            rows = (2 * j, 2 * j + 1)
        else:
            rows = (j, j + N_OUT)
    else:
        rows = (j, j)
    return rows


@triton.jit
def _sigmoid(v):
    return 1.0 / (1.0 + tl.exp(-v))


@triton.jit
def _tanh(v):
    return 2.0 * _sigmoid(2.0 * v) - 1.0


@triton.jit
def _activate(g, u, ACTFN: tl.constexpr, HAS_LIMIT: tl.constexpr, limit, alpha, beta, lbeta):
    """The expert activation on fp32 gate/up tiles (oracle_emulation.moe_activations)."""
    if ACTFN == 5:
        r = tl.maximum(g, 0.0)
        return r * r
    if ACTFN == 2:
        return beta * _tanh(g / beta) * _sigmoid(g) * (lbeta * _tanh(u / lbeta))
    if ACTFN == 3 or ACTFN == 4:
        g = tl.minimum(g, limit)
        u = tl.minimum(tl.maximum(u, -limit), limit)
        return g * _sigmoid(alpha * g) * (u + beta)
    if HAS_LIMIT:
        g = tl.minimum(g, limit)
        u = tl.minimum(tl.maximum(u, -limit), limit)
    if ACTFN == 0:
        return g * _sigmoid(g) * u
    return 0.5 * g * (1.0 + tl.math.erf(g * 0.7071067811865476)) * u


@triton.jit
def moe_gemm_kernel(a_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, topw_ptr, sorted_ptr, bexp_ptr, out_ptr, as_ptr,
                    T, TOPK, N_OUT, N_W, K, stride_am, stride_om,
                    stride_we, stride_se, stride_ze, stride_be,
                    stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, stride_as,
                    limit, alpha, beta, lbeta, E, sum_ptr,
                    STAGE: tl.constexpr, ACTFN: tl.constexpr, GATED: tl.constexpr, INTERLEAVED: tl.constexpr,
                    HAS_LIMIT: tl.constexpr, A_BY_PAIR: tl.constexpr, WEIGHT_OUT: tl.constexpr,
                    ELEM: tl.constexpr, PACK: tl.constexpr, GROUP: tl.constexpr,
                    SCALE_ROWS: tl.constexpr, HAS_ZERO: tl.constexpr, EXACT_W: tl.constexpr, HAS_BIAS: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    HW_FP8: tl.constexpr, DOT_F32: tl.constexpr, OUT_F16: tl.constexpr,
                    A_CODES: tl.constexpr = 0, FP8_DOT: tl.constexpr = False, FULL_TILE: tl.constexpr = False,
                    FUSE_GU: tl.constexpr = False, UNIFORM_WS: tl.constexpr = False, EVEN_K: tl.constexpr = False,
                    DIRECT: tl.constexpr = False, QUANT_IN: tl.constexpr = False, FUSE_SUM: tl.constexpr = False,
                    os_ptr=None, QUANT_OUT: tl.constexpr = False, xq_ptr=None, qc_ptr=None, stride_xq=0,
                    QUANT_PRO: tl.constexpr = False, K_GROUPS: tl.constexpr = 1, GDC: tl.constexpr = 0,
                    cnt_ptr=None, ids_ptr=None, N_FAST: tl.constexpr = False, pf_ptr=None, pf_stride_e=0,
                    pf_bytes=0, pf_total=0, PF_NEXT: tl.constexpr = False, RAW_PAIRS: tl.constexpr = False,
                    BY_EXPERT: tl.constexpr = False, T_POW2: tl.constexpr = 1, lq_ptr=None,
                    QUANT_LAST: tl.constexpr = False, N_GROUPS: tl.constexpr = 1, SWAP_AB: tl.constexpr = False,
                    PF_HEAD: tl.constexpr = 0, TILE_ARGS: tl.constexpr = False, tile_m=0, tile_n=0, ready_ptr=None,
                    READY: tl.constexpr = False, K_UNROLL: tl.constexpr = 1):
    """STAGE 1: out[pair, j] = act(A[token or pair] @ w13[e]^T + b13) over the I columns j.
    STAGE 2: out[pair, n] = (A[pair] @ w2[e]^T + b2) (x router weight if WEIGHT_OUT), fp32.
    A is already rounded through the activation format (gemm.act_qdq_kernel): W8A8 (A_CODES
    1-3) gives E4M3 codes and scales (as_ptr, indexed by A's row, as in wgemm_kernel) and the
    product runs on the codes (FP8_DOT: float8 tensor cores); W4A4 gives values. FULL_TILE:
    4-bit weights decoded to whole tiles, one dot per K tile. The gate and up products of a
    K tile share one activation tile; FUSE_GU (gated FC1) stacks the gate and up weight rows
    of the tile, interleaved (g0, u0, g1, u1, ...), into one [2*BLOCK_N]-row weight tile: one
    dot twice as wide instead of two, and the accumulator splits back into gate and up columns
    in registers (each thread holds adjacent column pairs of an MMA accumulator).

    DIRECT (a few tokens, no alignment launches): program m serves pair m alone, in row 0 of
    its tile (bexp_ptr: the pairs' expert ids; an id outside [0, E) computes with expert 0 and
    writes zeros). QUANT_IN (W8A8 with DIRECT): A is the layer-dtype input, rounded to E4M3
    codes per K tile inside the loop (gemm.act_qdq_kernel's rounding; BLOCK_K = 128 for 1x128
    groups), so no quantization launch precedes the GEMM. Only the pair's row is loaded and rounded
    (one value per thread, not a 16-row tile), a K tile ahead of its use: the first version, which
    loaded and rounded whole tiles at the point of use, stalled every K tile (2.3-3x slower than
    the launch on an H200). QUANT_OUT (STAGE 1 with 1x128 activation groups, BLOCK_N = 128: the
    tile is one group): out gets FC2's input as E4M3 codes (uint8) and os_ptr its group scales
    [N_OUT / 128, T], exactly what gemm.act_qdq_kernel writes for the layer-dtype output, so no
    quantization launch sits between the GEMMs. QUANT_PRO (STAGE 1, DIRECT, 1x128 groups): before its
    K loop each program rounds its pair's input row (xq_ptr, layer dtype; K_GROUPS: the next power of
    two >= K / 128) in one [K_GROUPS, 128] tile and stores the codes (qc_ptr: a uint8 view of a_ptr's
    buffer) and group scales (as_ptr) that its loop then reads as the quantization launch's (every
    program of a token writes the same bytes, so the redundant writes are harmless; a barrier orders
    each program's own writes before its reads). GDC (DIRECT, programmatic dependent launch on sm_90;
    the host launches the FC2 GEMM with launch_pdl): 1 (FC1) lets the next grid launch at once, so its
    programs are resident before this one drains; 2 (FC2) reads its pair's expert id (written before
    FC1 ran), then waits for FC1's grid to finish and its writes to be visible (griddepcontrol.wait)
    before anything else; 3 (FC2) also has one thread ask L2 for the program's own weight rows (one
    contiguous block: BLOCK_N rows of K bytes) before waiting, so their reads overlap FC1's tail.
    FUSE_SUM (STAGE 2 with DIRECT): the
    last of a token's TOPK programs of a column tile to arrive (an arrival counter per token and
    tile at sorted_ptr, zero between calls) sums the token's pair rows in slot order into sum_ptr
    [M, N_OUT] (what topk_sum_kernel computes, bit for bit) and resets the counter. FUSE_SUM without
    DIRECT (the aligned blocks): sum_rows with arrival counters at cnt_ptr and the pairs' expert ids
    at ids_ptr (a token's out-of-range slots never arrive and are not summed). N_FAST (aligned blocks):
    grid (column tiles, blocks), so the programs running together are one block's column tiles, which
    read the same activation rows (from L2 after the first) instead of every block's rows per column
    tile (an FC1 input larger than L2 was read once per column tile from HBM). PF_NEXT (STAGE 1,
    DIRECT): after its store, each program asks L2 for pf_bytes of the next GEMM's weights of its
    pair's expert (pf_ptr, expert stride pf_stride_e, pf_total bytes per expert), at offset
    pid_n * pf_bytes: the FC2 programs that run first then find their rows in L2, fetched while FC1
    drains and FC2 launches (HBM otherwise idles there). RAW_PAIRS (STAGE 2, aligned, no FUSE_SUM): out
    (the pair rows) is in the layer dtype and gets FC2's rounded output without the router weight, which
    topk_sum_kernel applies as it sums (the same fp32 product and sum, half the bytes written and read).
    BY_EXPERT (no alignment launches, at most BLOCK_M tokens): program m serves expert m, whose rows it
    finds itself in the pairs' expert ids (sorted_ptr; expert_rows): each token's first slot routed to
    it, in pair order (align_small_kernel's order); a token's later slots with the same id are not
    computed again (topk_sum_kernel DEDUP reads the first slot's row for them). QUANT_LAST (STAGE 1,
    DIRECT, 1x128 groups): after its store each program bumps its pair's arrival counter (cnt_ptr, zero
    between calls); the last of the pair's column tiles rounds the pair's whole output row into E4M3
    codes (lq_ptr) and group scales (os_ptr: [N_OUT / 128, T]; N_GROUPS: the next power of two >=
    N_OUT / 128), the quantization launch's bits, and resets the counter: no launch between the GEMMs.
    SWAP_AB (W8A8 on codes, not QUANT_IN): each K tile's product is taken as W [BN, BK] @ A^T, the weight
    rows the MMA's tall side and the tile's BLOCK_M rows its narrow one (fp8_codes_product_t), the way
    gemm.fp8_swap_kernel streams one-row dense layers near the copy bandwidth: a 16-row A tile otherwise
    makes the MMA 16 rows tall (no Hopper warpgroup MMA); the sums come back transposed before the epilogue.
    PF_HEAD (bytes; FP8 weights, sm_90): first thing, each program asks L2 for the first PF_HEAD bytes of
    each of its weight rows (pdl.prefetch_row_heads), so HBM streams the head of its K loop while the
    program rounds its input (QUANT_PRO) and its pipeline's first loads are not yet issued.
    TILE_ARGS: the tile is (tile_m, tile_n), not the program's ids (moe_persist.moe_pairs_persistent_kernel
    calls this kernel as a function for each tile it takes); READY (with QUANT_LAST): the program that
    rounds a pair's row then sets the pair's flag (ready_ptr[pair] = 1, release), which FC2 tiles of the
    same launch wait for. K_UNROLL (W8A8 on codes, not QUANT_IN; K a multiple of K_UNROLL tiles): the K loop
    takes that many tiles per iteration, so the compiler's pipeline issues the loads of a weight row's
    consecutive 128-byte chunks together (each row is read K_UNROLL x BLOCK_K bytes at a time)."""
    if TILE_ARGS:
        pid_m = tile_m
        pid_n = tile_n
    elif N_FAST:
        pid_m = tl.program_id(1)
        pid_n = tl.program_id(0)
    else:
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
    if DIRECT:
        e = tl.load(bexp_ptr + pid_m).to(tl.int32)
        keep = ((e >= 0) & (e < E)).to(tl.float32)
        e = tl.where(keep > 0, e, 0)
    elif BY_EXPERT:
        e, own_rows = expert_rows(sorted_ptr, pid_m, T, TOPK, BLOCK_M, T_POW2)
        keep = 1.0
    else:
        e = tl.load(bexp_ptr + pid_m)
        keep = 1.0
    if GDC == 1:
        gdc_launch_dependents()
    if GDC >= 2:
        if GDC == 3:
            prefetch_rows_l2(w_ptr + e.to(tl.int64) * stride_we + (pid_n * BLOCK_N).to(tl.int64) * stride_wn,
                             tl.minimum(BLOCK_N, N_W - pid_n * BLOCK_N) * K)
        gdc_wait()
    if e >= 0:
        io_t = tl.float16 if OUT_F16 else tl.bfloat16
        dot_t = tl.float32 if DOT_F32 else io_t
        if PF_HEAD > 0:                             # HBM busy from the first cycle (the rounding comes next)
            jh = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            hg, hu = gate_up_rows(jh, N_OUT, GATED, INTERLEAVED)
            w_rows = w_ptr + e.to(tl.int64) * stride_we
            prefetch_row_heads(w_rows + tl.minimum(hg, N_W - 1).to(tl.int64) * stride_wn, PF_HEAD)
            if GATED:
                prefetch_row_heads(w_rows + tl.minimum(hu, N_W - 1).to(tl.int64) * stride_wn, PF_HEAD)
        if DIRECT:
            lane = tl.arange(0, BLOCK_M)
            rows = tl.where(lane == 0, pid_m, T)
        elif BY_EXPERT:
            rows = own_rows
        else:
            rows = tl.load(sorted_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
        valid = rows < T
        if A_BY_PAIR:
            arow = rows
        else:
            arow = rows // TOPK
        if QUANT_PRO:       # DIRECT, 1x128 groups: this pair's input row -> its codes and scales, then as stored
            if A_BY_PAIR:
                src = pid_m
            else:
                src = pid_m // TOPK
            quantize_row_codes(xq_ptr + src.to(tl.int64) * stride_xq, qc_ptr + src.to(tl.int64) * stride_am,
                               as_ptr + src, stride_as, K, K_GROUPS)
        a_rows = a_ptr + arow[:, None].to(tl.int64) * stride_am
        e64 = e.to(tl.int64)
        w_e, s_e, z_e, gscale = expert_operands(e, w_ptr, s_ptr, z_ptr, g_ptr, stride_we, stride_se, stride_ze, ELEM)
        j = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_g, n_u = gate_up_rows(j, N_OUT, GATED, INTERLEAVED)
        FUSED: tl.constexpr = GATED and FUSE_GU
        TWO: tl.constexpr = GATED and not FUSE_GU      # a second accumulator for the up rows
        WN: tl.constexpr = BLOCK_N * (1 + FUSED)
        if FUSED:
            n_w = tl.reshape(tl.join(n_g, n_u), [WN])
        else:
            n_w = n_g
        acc_g = tl.zeros([BLOCK_M, WN], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        # first weight row of the tile's gate (or only) and up rows: their FP8 scale blocks (UNIFORM_WS)
        if GATED and INTERLEAVED:
            n0_g = 2 * pid_n * BLOCK_N
            n0_u = n0_g + 1
        else:
            n0_g = pid_n * BLOCK_N
            n0_u = n0_g + N_OUT
        if A_CODES > 0 and QUANT_IN:                # DIRECT only (the host checks): the pair's row alone
            if A_BY_PAIR:
                x_row = a_ptr + pid_m.to(tl.int64) * stride_am
            else:
                x_row = a_ptr + (pid_m // TOPK).to(tl.int64) * stride_am
            amax1 = tl.zeros([1], dtype=tl.float32)
            if A_CODES == 2:                        # per token: the row's amax first
                amax1 += tl.max(row_amax(a_rows, valid, K, A_CODES, BLOCK_M, BLOCK_K), axis=0)
            k_tiles = tl.cdiv(K, BLOCK_K)
            offs_kv = tl.arange(0, BLOCK_K)
            xv = tl.load(x_row + offs_kv, mask=offs_kv < K, other=0.0)
            ws_g = weight_scales_at(s_e, 0, n_w, n0_g, N_W, stride_sn, stride_sk, GROUP, SCALE_ROWS, UNIFORM_WS)
            ws_u = ws_g
            if TWO:
                ws_u = weight_scales_at(s_e, 0, n_u, n0_u, N_W, stride_sn, stride_sk, GROUP, SCALE_ROWS, UNIFORM_WS)
            for t in range(0, k_tiles):
                # the next K tile's activations and weight scales, loaded a tile ahead (their latency hides
                # behind this tile's rounding and MMA; the weight tiles are pipelined by the compiler)
                k1 = (t + 1) * BLOCK_K
                x_next = tl.load(x_row + k1 + offs_kv, mask=k1 + offs_kv < K, other=0.0)
                kn = tl.minimum(t + 1, k_tiles - 1) * BLOCK_K
                wsg_next = weight_scales_at(s_e, kn, n_w, n0_g, N_W, stride_sn, stride_sk, GROUP, SCALE_ROWS,
                                            UNIFORM_WS)
                wsu_next = wsg_next
                if TWO:
                    wsu_next = weight_scales_at(s_e, kn, n_u, n0_u, N_W, stride_sn, stride_sk, GROUP, SCALE_ROWS,
                                                UNIFORM_WS)
                q1, s1 = quantize_tile_codes(xv.to(tl.float32)[None, :], amax1, A_CODES, as_ptr)   # [1, BK], [1]
                q = tl.where(valid[:, None], q1, 0.0)          # the pair in row 0, zeros below
                xs = tl.where(valid, s1, 0.0)
                if FP8_DOT:
                    a = q.to(tl.float8e4nv)          # exact: q is on the E4M3 grid
                else:
                    a = q.to(dot_t)
                acc_g = fp8_codes_product(acc_g, a, xs, ws_g, t * BLOCK_K, n_w, w_e, K, N_W, stride_wn, stride_wk,
                                          True, HW_FP8, FP8_DOT, BLOCK_K, dot_t, DOT_F32, UNIFORM_WS, EVEN_K)
                if TWO:
                    acc_u = fp8_codes_product(acc_u, a, xs, ws_u, t * BLOCK_K, n_u, w_e, K, N_W, stride_wn,
                                              stride_wk, True, HW_FP8, FP8_DOT, BLOCK_K, dot_t, DOT_F32, UNIFORM_WS,
                                              EVEN_K)
                xv, ws_g, ws_u = x_next, wsg_next, wsu_next
        elif A_CODES > 0:
            PER_TILE: tl.constexpr = A_CODES == 1 or GROUP > 1      # scales change along K
            k_tiles = tl.cdiv(K, BLOCK_K)
            if SWAP_AB:                             # the sums as [columns, rows] until after the loop
                acc_g = tl.zeros([WN, BLOCK_M], dtype=tl.float32)
                acc_u = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
            xs, ws_g = fp8_tile_scales(as_ptr, arow, valid, stride_as, 0, n_w, n0_g, s_e, N_W, stride_sn, stride_sk,
                                       A_CODES, GROUP, SCALE_ROWS, UNIFORM_WS)
            ws_u = ws_g
            if TWO:
                xs, ws_u = fp8_tile_scales(as_ptr, arow, valid, stride_as, 0, n_u, n0_u, s_e, N_W, stride_sn,
                                           stride_sk, A_CODES, GROUP, SCALE_ROWS, UNIFORM_WS)
            for t0 in range(0, k_tiles, K_UNROLL):      # K_UNROLL tiles an iteration: a row's chunks issued together
                for u in tl.static_range(K_UNROLL):
                    t = t0 + u
                    a = act_codes_tile(a_rows, valid, t * BLOCK_K, K, BLOCK_K, FP8_DOT, HW_FP8, dot_t, EVEN_K)
                    if PER_TILE:                        # the next tile's scales, loaded one tile ahead
                        k1 = tl.minimum(t + 1, k_tiles - 1) * BLOCK_K
                        xs_next, wsg_next = fp8_tile_scales(as_ptr, arow, valid, stride_as, k1, n_w, n0_g, s_e, N_W,
                                                            stride_sn, stride_sk, A_CODES, GROUP, SCALE_ROWS,
                                                            UNIFORM_WS)
                        wsu_next = wsg_next
                        if TWO:
                            xs_next, wsu_next = fp8_tile_scales(as_ptr, arow, valid, stride_as, k1, n_u, n0_u, s_e, N_W,
                                                                stride_sn, stride_sk, A_CODES, GROUP, SCALE_ROWS,
                                                                UNIFORM_WS)
                    acc_g = fp8_tile_product(acc_g, a, xs, ws_g, t * BLOCK_K, n_w, w_e, K, N_W, stride_wn, stride_wk,
                                             PER_TILE, HW_FP8, FP8_DOT, BLOCK_K, dot_t, DOT_F32, UNIFORM_WS, EVEN_K,
                                             SWAP_AB)
                    if TWO:
                        acc_u = fp8_tile_product(acc_u, a, xs, ws_u, t * BLOCK_K, n_u, w_e, K, N_W, stride_wn,
                                                 stride_wk, PER_TILE, HW_FP8, FP8_DOT, BLOCK_K, dot_t, DOT_F32,
                                                 UNIFORM_WS, EVEN_K, SWAP_AB)
                    if PER_TILE:
                        xs, ws_g, ws_u = xs_next, wsg_next, wsu_next
            if SWAP_AB:
                acc_g = tl.trans(acc_g)
                acc_u = tl.trans(acc_u)
            if not PER_TILE:                        # scales constant along K: applied once
                acc_g = fp8_codes_scale(acc_g, as_ptr, arow, valid, n_w, s_e, N_W, stride_sn, SCALE_ROWS, A_CODES)
                if TWO:
                    acc_u = fp8_codes_scale(acc_u, as_ptr, arow, valid, n_u, s_e, N_W, stride_sn, SCALE_ROWS,
                                            A_CODES)
        elif ELEM == 4:                              # BF16 experts: the weight tile as stored
            for t in range(0, tl.cdiv(K, BLOCK_K)):
                k0 = t * BLOCK_K
                x = act_tile(a_rows, valid, k0, K, BLOCK_K, EVEN_K).to(dot_t)
                acc_g = bf16_product(acc_g, x, k0, n_w, w_e, K, N_W, stride_wn, stride_wk, BLOCK_K, dot_t, DOT_F32,
                                     EVEN_K)
                if TWO:
                    acc_u = bf16_product(acc_u, x, k0, n_u, w_e, K, N_W, stride_wn, stride_wk, BLOCK_K, dot_t,
                                         DOT_F32, EVEN_K)
        elif FULL_TILE:
            for t in range(0, tl.cdiv(K, BLOCK_K)):
                x = act_tile(a_rows, valid, t * BLOCK_K, K, BLOCK_K, EVEN_K).to(dot_t)
                acc_g = w4_product(acc_g, x, t * BLOCK_K, n_w, w_e, s_e, z_e, gscale, K, N_W,
                                   stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                                   ELEM, PACK, GROUP, HAS_ZERO, WN, BLOCK_K, io_t, dot_t, DOT_F32, EVEN_K)
                if TWO:
                    acc_u = w4_product(acc_u, x, t * BLOCK_K, n_u, w_e, s_e, z_e, gscale, K, N_W,
                                       stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                                       ELEM, PACK, GROUP, HAS_ZERO, BLOCK_N, BLOCK_K, io_t, dot_t, DOT_F32, EVEN_K)
        else:
            for t in range(0, tl.cdiv(K, BLOCK_K)):
                acc_g += tile_product(a_rows, valid, t * BLOCK_K, n_w, w_e, s_e, z_e, gscale, K, N_W,
                                      stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                                      ELEM, PACK, GROUP, SCALE_ROWS, HAS_ZERO, HW_FP8, EXACT_W,
                                      BLOCK_M, WN, BLOCK_K // PACK, io_t, dot_t, DOT_F32)
                if TWO:
                    acc_u += tile_product(a_rows, valid, t * BLOCK_K, n_u, w_e, s_e, z_e, gscale, K, N_W,
                                          stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                                          ELEM, PACK, GROUP, SCALE_ROWS, HAS_ZERO, HW_FP8, EXACT_W,
                                          BLOCK_M, BLOCK_N, BLOCK_K // PACK, io_t, dot_t, DOT_F32)
        if FUSED:                                   # columns g0, u0, g1, u1, ... -> gate, up
            acc_g, acc_u = tl.split(tl.reshape(acc_g, [BLOCK_M, BLOCK_N, 2]))
        jmask = j < N_OUT
        if HAS_BIAS:
            acc_g += tl.load(b_ptr + e64 * stride_be + n_g, mask=jmask, other=0.0).to(tl.float32)[None, :]
            if GATED:
                acc_u += tl.load(b_ptr + e64 * stride_be + n_u, mask=jmask, other=0.0).to(tl.float32)[None, :]
        omask = valid[:, None] & jmask[None, :]
        out_rows = out_ptr + rows[:, None].to(tl.int64) * stride_om + j[None, :]
        if STAGE == 1:
            hg = to_dtype(acc_g, io_t, DOT_F32).to(tl.float32)    # the reference rounds FC1's output
            hu = to_dtype(acc_u, io_t, DOT_F32).to(tl.float32)
            y = _activate(hg, hu, ACTFN, HAS_LIMIT, limit, alpha, beta, lbeta)
            if DIRECT:
                y = y * keep
            if PF_NEXT:
                off = pid_n.to(tl.int64) * pf_bytes
                if off < pf_total:
                    prefetch_rows_l2(pf_ptr + e64 * pf_stride_e + off, tl.minimum(pf_bytes, pf_total - off))
            if QUANT_OUT:                           # FC2's input as E4M3 codes of its 1x128 groups (one per tile)
                yq = to_dtype(y, io_t, DOT_F32).to(tl.float32)      # the layer-dtype value the reference rounds
                q, s = quantize_tile_codes(yq, tl.zeros([BLOCK_M], dtype=tl.float32), 1, os_ptr)
                tl.store(out_rows, e4m3_encode(q, yq).to(tl.uint8), mask=omask)
                tl.store(os_ptr + pid_n * T + rows, s, mask=valid)
            else:
                tl.store(out_rows, to_dtype(y, out_ptr.dtype.element_ty, DOT_F32), mask=omask)
            if QUANT_LAST:                          # DIRECT: the pair's last tile rounds the pair's row
                tl.debug_barrier()
                arrived = tl.atomic_add(cnt_ptr + pid_m, 1)
                if arrived == tl.cdiv(N_OUT, BLOCK_N) - 1:
                    quantize_row_codes(out_ptr + pid_m.to(tl.int64) * stride_om, lq_ptr + pid_m.to(tl.int64) * stride_om,
                                       os_ptr + pid_m, T, N_OUT, N_GROUPS, CG=True)
                    tl.atomic_xchg(cnt_ptr + pid_m, 0)
                    if READY:
                        tl.atomic_xchg(ready_ptr + pid_m, 1)
        elif RAW_PAIRS:                             # the rounded output as it is: topk_sum_kernel weighs it
            tl.store(out_rows, to_dtype(acc_g, io_t, DOT_F32), mask=omask)
        else:
            y = to_dtype(acc_g, io_t, DOT_F32).to(tl.float32)
            if WEIGHT_OUT:
                y = y * tl.load(topw_ptr + rows, mask=valid, other=0.0)[:, None]
            if DIRECT:
                y = y * keep
            tl.store(out_rows, y, mask=omask)
            if FUSE_SUM and DIRECT:
                sum_slots(out_ptr, stride_om, sum_ptr, sorted_ptr, pid_m, pid_n, tl.cdiv(N_OUT, BLOCK_N), TOPK, N_OUT, j,
                          jmask, BLOCK_N, DOT_F32)
            elif FUSE_SUM:
                sum_rows(out_ptr, stride_om, sum_ptr, cnt_ptr, ids_ptr, rows, valid, pid_n, TOPK, E, N_OUT, j, jmask,
                         BLOCK_M, BLOCK_N, DOT_F32)


@triton.jit
def expert_rows(ids_ptr, e, T, TOPK, BLOCK_M: tl.constexpr, T_POW2: tl.constexpr):
    """(e, or -1 when no pair is routed to it; the BLOCK_M pair ids of expert e's rows, padded with T):
    each token's first slot whose id is e, in pair order. A token's slots are distinct experts under a
    router's top-k; a repeated id is served once (topk_sum_kernel DEDUP), so at most one row per token
    (the host allows this path only for at most BLOCK_M tokens)."""
    p = tl.arange(0, T_POW2)
    inside = p < T
    hit = (tl.load(ids_ptr + p, mask=inside, other=-1).to(tl.int32) == e) & inside
    slot = p % TOPK
    for d in range(1, TOPK):                 # an earlier slot of the same token with this id: not first
        prev = tl.load(ids_ptr + p - d, mask=inside & (slot >= d), other=-1).to(tl.int32)
        hit = hit & (prev != e)
    pos = tl.cumsum(hit.to(tl.int32), axis=0) - 1
    lane = tl.arange(0, BLOCK_M)
    pick = hit[None, :] & (pos[None, :] == lane[:, None])
    rows = tl.sum(tl.where(pick, p[None, :], 0), axis=1)
    count = tl.sum(hit.to(tl.int32), axis=0)
    rows = tl.where(lane < count, rows, T)
    return tl.where(count > 0, e, -1), rows


@triton.jit
def sum_slots(pairs_ptr, stride_pm, sum_ptr, cnt_ptr, pair, pid_n, n_tiles, TOPK, N, j, jmask,
              BLOCK_N: tl.constexpr, EXACT_BF16: tl.constexpr):
    """The top-k sum inside an FC2 GEMM with one pair per program (after the pair's row j of pairs_ptr
    is stored): the last of a token's TOPK programs of column tile pid_n to arrive (an arrival counter
    per token and tile at cnt_ptr, zero between calls) sums the token's pair rows in slot order into
    sum_ptr [M, N] (what topk_sum_kernel computes, bit for bit) and resets the counter."""
    tl.debug_barrier()
    tok = pair // TOPK
    tile = tok * n_tiles + pid_n
    arrived = tl.atomic_add(cnt_ptr + tile, 1)
    if arrived == TOPK - 1:
        total = tl.zeros([BLOCK_N], dtype=tl.float32)
        for slot in range(0, TOPK):
            total += tl.load(pairs_ptr + (tok * TOPK + slot).to(tl.int64) * stride_pm + j, mask=jmask, other=0.0,
                             cache_modifier=".cg")
        tl.store(sum_ptr + tok.to(tl.int64) * N + j, to_dtype(total, sum_ptr.dtype.element_ty, EXACT_BF16),
                 mask=jmask)
        tl.atomic_xchg(cnt_ptr + tile, 0)


@triton.jit
def sum_rows(pairs_ptr, stride_pm, sum_ptr, cnt_ptr, ids_ptr, rows, valid, pid_n, TOPK, E, N, j, jmask,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EXACT_BF16: tl.constexpr):
    """The top-k sum inside the aligned FC2 GEMM (after this program's pair rows are stored): each row
    bumps its token's arrival counter for column tile pid_n (cnt_ptr, zero between calls); the row
    whose arrival completes the token's in-range slots sums those slots' rows in slot order into
    sum_ptr [M, N] (topk_sum_kernel's bits) and resets the counter."""
    tl.debug_barrier()
    tok = rows // TOPK
    tile = tok * tl.cdiv(N, BLOCK_N) + pid_n
    arrived = tl.atomic_add(cnt_ptr + tile, tl.full([BLOCK_M], 1, tl.int32), mask=valid)
    need = tl.zeros([BLOCK_M], dtype=tl.int32)
    for slot in range(0, TOPK):
        e = tl.load(ids_ptr + tok * TOPK + slot, mask=valid, other=-1).to(tl.int32)
        need += ((e >= 0) & (e < E)).to(tl.int32)
    last = valid & (arrived == need - 1)
    total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for slot in range(0, TOPK):
        pair = tok * TOPK + slot
        e = tl.load(ids_ptr + pair, mask=last, other=-1).to(tl.int32)
        ok = last & (e >= 0) & (e < E)
        total += tl.load(pairs_ptr + pair[:, None].to(tl.int64) * stride_pm + j[None, :],
                         mask=ok[:, None] & jmask[None, :], other=0.0, cache_modifier=".cg")
    tl.store(sum_ptr + tok[:, None].to(tl.int64) * N + j[None, :],
             to_dtype(total, sum_ptr.dtype.element_ty, EXACT_BF16), mask=last[:, None] & jmask[None, :])
    tl.atomic_xchg(cnt_ptr + tile, tl.zeros([BLOCK_M], dtype=tl.int32), mask=last)


@triton.jit
def bf16_product(acc, x, k0, offs_n, w_ptr, K, N, stride_wn, stride_wk, BLOCK_K: tl.constexpr, dot_t: tl.constexpr,
                 DOT_F32: tl.constexpr, EVEN_K: tl.constexpr):
    """acc + x [BM, BK] @ W[offs_n, k0:k0+BK]^T for unquantized (BF16) weights, fp32 accumulation."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    w = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :] * stride_wk,
                mask=(offs_n < N)[:, None] & k_in(offs_k, K, EVEN_K)[None, :], other=0.0)
    return mma_acc(x, tl.trans(w.to(dot_t)), acc, DOT_F32)


@triton.jit
def weight_tile_scales(s_ptr, k0, offs_n, N, stride_sn, stride_sk, GROUP: tl.constexpr, SCALE_ROWS: tl.constexpr):
    """FP8 weight scales [BN] of the rows offs_n in the K tile at k0 (block, channel or tensor scales)."""
    return tl.load(s_ptr + (offs_n // SCALE_ROWS) * stride_sn + (k0 // GROUP) * stride_sk, mask=offs_n < N, other=0.0)


@triton.jit
def quantize_row_codes(x_row, codes_row, scales_col, stride_s, K, K_GROUPS: tl.constexpr, CG: tl.constexpr = False):
    """One activation row's 1x128-group E4M3 codes and scales (gemm.act_qdq_kernel's, bit for bit),
    the whole row in one [K_GROUPS, 128] tile: codes_row[k] (uint8), scales_col[g * stride_s]; then a
    barrier, so the program's later loads of them see its stores. CG: the row is read from L2 (other
    programs wrote it; this one's L1 may hold nothing newer, but never trusts it)."""
    g = tl.arange(0, K_GROUPS)
    offs = g[:, None] * 128 + tl.arange(0, 128)[None, :]
    ok = offs < K
    if CG:
        x = tl.load(x_row + offs, mask=ok, other=0.0, cache_modifier=".cg").to(tl.float32)
    else:
        x = tl.load(x_row + offs, mask=ok, other=0.0).to(tl.float32)
    q, s = quantize_tile_codes(x, tl.zeros([K_GROUPS], dtype=tl.float32), 1, scales_col)
    tl.store(codes_row + offs, e4m3_encode(q, x).to(tl.uint8), mask=ok)
    tl.store(scales_col + g * stride_s, s, mask=g * 128 < K)
    tl.debug_barrier()


@triton.jit
def weight_scales_at(s_ptr, k0, offs_n, n0, N, stride_sn, stride_sk, GROUP: tl.constexpr, SCALE_ROWS: tl.constexpr,
                     UNIFORM_WS: tl.constexpr):
    """FP8 weight scales of the K tile at k0: one scalar (UNIFORM_WS: the tile's rows share the scale
    block of row n0) or [BN] per row (weight_tile_scales)."""
    if UNIFORM_WS:
        ws = tl.load(s_ptr + (n0 // SCALE_ROWS) * stride_sn + (k0 // GROUP) * stride_sk)
    else:
        ws = weight_tile_scales(s_ptr, k0, offs_n, N, stride_sn, stride_sk, GROUP, SCALE_ROWS)
    return ws


@triton.jit
def fp8_tile_product(acc, a, xs, ws, k0, offs_n, w_ptr, K, N, stride_wn, stride_wk, PER_TILE: tl.constexpr,
                     HW_FP8: tl.constexpr, FP8_DOT: tl.constexpr, BLOCK_K: tl.constexpr, dot_t: tl.constexpr,
                     DOT_F32: tl.constexpr, UNIFORM_WS: tl.constexpr, EVEN_K: tl.constexpr, SWAP_AB: tl.constexpr):
    """One W8A8 K tile into acc: fp8_codes_product_t's order (acc [BN, BM]) with SWAP_AB, else
    dequant.fp8_codes_product's (acc [BM, BN])."""
    if SWAP_AB:
        out = fp8_codes_product_t(acc, a, xs, ws, k0, offs_n, w_ptr, K, N, stride_wn, stride_wk, PER_TILE, HW_FP8,
                                  FP8_DOT, BLOCK_K, dot_t, DOT_F32, UNIFORM_WS, EVEN_K)
    else:
        out = fp8_codes_product(acc, a, xs, ws, k0, offs_n, w_ptr, K, N, stride_wn, stride_wk, PER_TILE, HW_FP8,
                                FP8_DOT, BLOCK_K, dot_t, DOT_F32, UNIFORM_WS, EVEN_K)
    return out


@triton.jit
def fp8_codes_product_t(acc, a, xs, ws, k0, offs_n, w_ptr, K, N, stride_wn, stride_wk, PER_TILE: tl.constexpr,
                        HW_FP8: tl.constexpr, FP8_DOT: tl.constexpr, BLOCK_K: tl.constexpr, dot_t: tl.constexpr,
                        DOT_F32: tl.constexpr, UNIFORM_WS: tl.constexpr = False, EVEN_K: tl.constexpr = False):
    """dequant.fp8_codes_product with the operands swapped (moe_gemm_kernel SWAP_AB): acc [BN, BM] +
    codes(W[offs_n, k0:k0+BK]) @ codes(A)^T, the tile's scales (xs [BM], ws [BN] or one scalar with
    UNIFORM_WS) applied per tile as there. Each code product is exact in fp32, as there."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    w = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :] * stride_wk,
                mask=(offs_n < N)[:, None] & k_in(offs_k, K, EVEN_K)[None, :], other=0.0)
    wop, at = fp8_operand(w, FP8_DOT, HW_FP8, dot_t), tl.trans(a)
    if PER_TILE:
        p = code_product(wop, at, tl.zeros_like(acc), FP8_DOT, DOT_F32, BLOCK_K)
        if UNIFORM_WS:
            out = acc + p * (xs * ws)[None, :]
        else:
            out = acc + p * ws[:, None] * xs[None, :]
    else:
        out = code_product(wop, at, acc, FP8_DOT, DOT_F32, BLOCK_K)
    return out


@triton.jit
def topk_sum_kernel(pairs_ptr, ids_ptr, out_ptr, H, E, TOPK: tl.constexpr, BLOCK: tl.constexpr,
                    EXACT_BF16: tl.constexpr, topw_ptr=None, WEIGH: tl.constexpr = False,
                    DEDUP: tl.constexpr = False, TOPK_P2: tl.constexpr = 1):
    """out[m, :] = sum over the top-k slots of the weighted expert outputs (fp32, fixed order). A slot
    whose expert id is outside [0, E) adds nothing: the alignment launches drop such a pair, so no GEMM
    writes its row of pairs_ptr (what it holds is stale), and a captured graph cannot check the ids.
    WEIGH: the pair rows are the GEMM's rounded outputs (RAW_PAIRS), each multiplied here by its router
    weight in fp32 before it is added (the product the GEMM would have stored). DEDUP (moe_gemm_kernel
    BY_EXPERT): a slot whose id an earlier slot of the token holds reads that first slot's row (the
    same token and expert give the same row; only the first was computed), weighed by its own weight; the
    token's TOPK ids are loaded once as a vector (TOPK_P2: the next power of two), the first match found
    in one reduction (R11: a scalar load per earlier slot took the launch from 2.4 to 7.0 us)."""
    m = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < H
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    if DEDUP:
        slots = tl.arange(0, TOPK_P2)
        row_ids = tl.load(ids_ptr + m * TOPK + slots, mask=slots < TOPK, other=-1).to(tl.int32)
    for j in range(0, TOPK):
        e = tl.load(ids_ptr + m * TOPK + j).to(tl.int32)
        src = j
        if DEDUP:
            src = tl.min(tl.where((row_ids == e) & (slots < TOPK), slots, TOPK), axis=0)
        row = tl.load(pairs_ptr + (m * TOPK + src).to(tl.int64) * H + offs, mask=ok & (e >= 0) & (e < E),
                      other=0.0).to(tl.float32)
        if WEIGH:
            row = row * tl.load(topw_ptr + m * TOPK + j)
        acc += row
    tl.store(out_ptr + m * H + offs, to_dtype(acc, out_ptr.dtype.element_ty, EXACT_BF16), mask=ok)
