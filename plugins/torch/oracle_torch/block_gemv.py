"""FP8 block W8A8 for one row (Triton): the activation's 1x128 groups quantized inside the GEMV, then
multiplied with the 128x128-block weights on CUDA cores, the work split over N and over K so that the
weights stream with many loads in flight.

Why: at decode sizes the cuBLASLt blockwise path (`gemm.blockwise`) is four launches per call (pad
M to 16, since cuBLAS refuses M = 1; quantize; lay the scales out M-major; the GEMM): 13.6 us for
Qwen3-30B's fused q/k/v projection on an H200 (bench/bench_block_gemv.py), whose FP8 weights stream
in 2.5 us and whose BF16 weights take cuBLAS 8.2 us. Here the row is rounded first by one launch of the
fused group quantizer (PREQUANT, the default: the same codes and scales as oracle-emulation), or,
with prequant off, every program quantizes its K slice of the row itself (`quantize_triton._e4m3_values`),
and each program multiplies the codes with its BLOCK_N output rows.

Numerics, as the cuBLASLt path: the products of two E4M3 values are exact in fp32; each 128-wide
group's fp32 sum is multiplied by its activation scale times its weight-block scale and added in
fp32, then rounded once to the layer's dtype. Split over K, each slice's fp32 sum is written apart and
added in a fixed order (deterministic): by the tile's last program to arrive (an atomic arrival counter
the caller owns, as oracle-triton's split-K tiles do), or, without a counter, by a second small launch.

Parallelism: a first one-row version ran 16 output rows per program over the whole K, 320 programs
for that projection (about 2 per SM), each a chain of dependent 512-column chunks with about ten
barriers each: latency bound at 13.2 us, ~0.8 TB/s (H200, r5). `plan` now picks 8 output rows per
program (the row's quantization, redone per program, stays a quarter of the weight bytes read) and
splits K until there are at least `PROGRAMS_PER_SM` programs per SM. Within a program the weights
still come G groups at a time with the next chunk's load issued before this chunk's arithmetic:
Triton does not pipeline loads that feed no tensor-core dot.
"""
from __future__ import annotations

import functools
import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from oracle.formats import FP8_BLOCK

from .quantize_triton import _e4m3_values, _scale_of

#: rows served here; more go to cuBLASLt
MAX_ROWS = 1
#: default output rows per program (a power of two dividing 128), 128-wide groups per load (at most), warps
BLOCK_N, GROUPS, WARPS = 8, 4, 4
#: K is split until the grid has this many programs per SM (or a slice is one load of G groups)
PROGRAMS_PER_SM = 6
#: weights (N x K) served here. H200 r6, one row, graph replay, HBM-resident (bench/bench_block_gemv.py):
#: the GEMV leads the cuBLASLt path on Qwen3-30B's projections (5120x2048: 10.2 vs 13.7 us; 2048x4096:
#: 9.4 vs 18.8) and trails it on DeepSeek-R1's (24576x1536: 36.4 vs 20.4; 7168x16384: 94.6 vs 48.7)
MAX_WEIGHTS = 16 * 1024 * 1024
#: ORACLE_TORCH_BLOCK_GEMV: "0" keeps one-row calls on the cuBLASLt path, "prequant" rounds the row in a
#: launch of its own first (`block_gemv(prequant=True)`), "inline" has every program round its K slice,
#: "1" or unset: PREQUANT (benchmarks compare them)
ENV = "ORACLE_TORCH_BLOCK_GEMV"
#: the layers' default: H200 r9, one row, graph replay, HBM-resident, the quantizer's launch included:
#: 8.8 vs 9.7 us (Qwen3 q/k/v 5120x2048) and 8.3 vs 9.2 (o_proj 2048x4096) against in-program rounding
PREQUANT = True
_VALUES = ("0", "1", "prequant", "inline")


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def prequant() -> bool:
    """Whether the layers' one-row calls round the row first (ENV); an undocumented value is an error."""
    value = os.environ.get(ENV, "1")
    if value not in _VALUES:
        raise ValueError(f"{ENV}={value!r}: expected one of {', '.join(_VALUES)}")
    return value == "prequant" or (value == "1" and PREQUANT)


def serves(n: int, k: int) -> bool:
    """Whether a one-row call of an N x K layer is faster here than on the cuBLASLt path (MAX_WEIGHTS)."""
    return n * k <= MAX_WEIGHTS


class Plan(NamedTuple):
    """One launch's shape: output rows per program, groups per load, K slices, warps."""
    block_n: int
    groups: int
    split: int
    warps: int


@triton.jit
def _chunk(acc, w, x, ws):
    """acc + one K chunk: the row's G groups x [G, 128] quantized here, times the weight codes
    w [BN, G, 128] (exact products), each group's fp32 sum times its two scales (ws [G]: the weights')."""
    x = x.to(tl.float32)
    s = _scale_of(tl.max(tl.abs(x), axis=1))                                             # [G]
    part = tl.sum(w.to(tl.float32) * _e4m3_values(x, s[:, None])[None, :, :], axis=2)   # [BN, G]
    return acc + tl.sum(part * (s * ws)[None, :], axis=1)


@triton.jit
def _chunk_codes(acc, w, xq, sx, ws):
    """acc + one K chunk of a row already rounded (PREQUANT): codes xq [BN, G, 128] (the same row for every
    output row: loaded in the weights' layout, so no exchange between threads), group scales sx [G]."""
    part = tl.sum(w.to(tl.float32) * xq.to(tl.float32), axis=2)                        # [BN, G]
    return acc + tl.sum(part * (sx * ws)[None, :], axis=1)


@triton.jit
def _block_gemv_kernel(x_ptr, w_ptr, ws_ptr, part_ptr, y_ptr, cnt_ptr, sx_ptr, N, stride_wsk, stride_wsn,
                       K: tl.constexpr, SPLIT: tl.constexpr, BLOCK_N: tl.constexpr, G: tl.constexpr,
                       GROUP: tl.constexpr, TICKET: tl.constexpr, PREQUANT: tl.constexpr = False):
    """Program (i, j): output rows [i*BLOCK_N, +BLOCK_N) over the K slice j of SPLIT. Unsplit it writes y;
    split, its fp32 sums go to part[j] and, with TICKET, the tile's last program to arrive (atomic
    counter) adds the slices in order, writes y and resets the counter (so a graph replay finds it at
    zero); without, _sum_slices_kernel does that in a second launch."""
    n0 = tl.program_id(0) * BLOCK_N
    slice_k: tl.constexpr = K // SPLIT
    k_lo = tl.program_id(1) * slice_k
    offs_n = n0 + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    chunk: tl.constexpr = G * GROUP
    w_ptrs = w_ptr + offs_n[:, None, None] * K + k_lo + tl.arange(0, G)[None, :, None] * GROUP + \
        tl.arange(0, GROUP)[None, None, :]                                                 # [BN, G, 128]
    ws_col = ws_ptr + (n0 // GROUP) * stride_wsn       # the tile lies in one 128-row block (BLOCK_N | 128)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    ws_ptrs = ws_col + (k_lo // GROUP + tl.arange(0, G)) * stride_wsk                             # [G]
    # each chunk's loads (weights, row, weight scales) are issued before the previous chunk's arithmetic
    w_next = tl.load(w_ptrs, mask=n_ok[:, None, None], other=0.0)
    ws_next = tl.load(ws_ptrs)
    if PREQUANT:
        x_ptrs = x_ptr + offs_n[:, None, None] * 0 + k_lo + tl.arange(0, G)[None, :, None] * GROUP + \
            tl.arange(0, GROUP)[None, None, :]                                             # [BN, G, 128]
        sx_ptrs = sx_ptr + k_lo // GROUP + tl.arange(0, G)                                 # [G]
        x_next = tl.load(x_ptrs)
        sx_next = tl.load(sx_ptrs)
        for c in range(0, slice_k // chunk - 1):
            w, x, ws, sx = w_next, x_next, ws_next, sx_next
            w_next = tl.load(w_ptrs + (c + 1) * chunk, mask=n_ok[:, None, None], other=0.0)
            x_next = tl.load(x_ptrs + (c + 1) * chunk)
            ws_next = tl.load(ws_ptrs + (c + 1) * G * stride_wsk)
            sx_next = tl.load(sx_ptrs + (c + 1) * G)
            acc = _chunk_codes(acc, w, x, sx, ws)
        acc = _chunk_codes(acc, w_next, x_next, sx_next, ws_next)
    else:
        x_ptrs = x_ptr + k_lo + tl.arange(0, G)[:, None] * GROUP + tl.arange(0, GROUP)[None, :]  # [G, 128]
        x_next = tl.load(x_ptrs)
        for c in range(0, slice_k // chunk - 1):
            w, x, ws = w_next, x_next, ws_next
            w_next = tl.load(w_ptrs + (c + 1) * chunk, mask=n_ok[:, None, None], other=0.0)
            x_next = tl.load(x_ptrs + (c + 1) * chunk)
            ws_next = tl.load(ws_ptrs + (c + 1) * G * stride_wsk)
            acc = _chunk(acc, w, x, ws)
        acc = _chunk(acc, w_next, x_next, ws_next)
    if SPLIT == 1:
        tl.store(y_ptr + offs_n, acc.to(y_ptr.dtype.element_ty), mask=n_ok)
    else:
        tl.store(part_ptr + tl.program_id(1) * N + offs_n, acc, mask=n_ok)
        if TICKET:
            tl.debug_barrier()
            arrived = tl.atomic_add(cnt_ptr + tl.program_id(0), 1)
            if arrived == SPLIT - 1:
                acc = tl.zeros([BLOCK_N], dtype=tl.float32)
                for j in range(0, SPLIT):
                    acc += tl.load(part_ptr + j * N + offs_n, mask=n_ok, other=0.0, cache_modifier=".cg")
                tl.store(y_ptr + offs_n, acc.to(y_ptr.dtype.element_ty), mask=n_ok)
                tl.atomic_xchg(cnt_ptr + tl.program_id(0), 0)


@triton.jit
def _sum_slices_kernel(part_ptr, y_ptr, N, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    """y[n] = the fp32 sum of part[0..SPLIT, n] in slice order, rounded once to y's dtype."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for j in range(SPLIT):
        acc += tl.load(part_ptr + j * N + offs, mask=ok, other=0.0)
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=ok)


def groups_per_chunk(k: int, most: int) -> int:
    """128-wide groups loaded at once: the most (a power of two) that divides K/128."""
    g = most
    while (k // FP8_BLOCK) % g:
        g //= 2
    return g


@functools.cache
def sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def plan(n: int, k: int, sms: int, block_n: int = BLOCK_N, groups: int = GROUPS, warps: int = WARPS,
         split: int | None = None) -> Plan:
    """The launch for N x K on `sms` SMs: K halved (while each slice stays whole loads of G groups)
    until there are PROGRAMS_PER_SM programs per SM, unless `split` is given."""
    g = groups_per_chunk(k, groups)
    if split is None:
        split, tiles = 1, -(-n // block_n)
        while tiles * split < PROGRAMS_PER_SM * sms and (k // FP8_BLOCK) % (2 * split * g) == 0:
            split *= 2
    g = groups_per_chunk(k // split, g)
    return Plan(block_n, g, split, warps)


def counter(n: int, device: torch.device | str) -> torch.Tensor:
    """The arrival counters of block_gemv's one-launch split (`counter=`): one per tile of N at the
    smallest BLOCK_N used, zero between calls. A caller keeps its own (a layer's calls run in order)."""
    return torch.zeros(-(-n // 4), dtype=torch.int32, device=device)


def block_gemv(x: torch.Tensor, weight: torch.Tensor, weight_scale_t: torch.Tensor,
               out_dtype: torch.dtype, block_n: int = BLOCK_N, groups: int = GROUPS,
               warps: int = WARPS, split: int | None = None, counter: torch.Tensor | None = None,
               prequant: bool = False) -> torch.Tensor:
    """x [1, K] (K % 128 == 0) x weight [N, K] e4m3 (row-major), weight_scale_t the [K/128, N/128]
    fp32 block scales (any strides) -> [1, N] in out_dtype. `split` fixes the K slices (default: `plan`);
    split K is summed in the same launch when `counter` (from `counter()`, not shared with a call that
    may run at the same time) is given, else by a second launch. `prequant`: the row is rounded by one
    launch of the fused group quantizer before the GEMV (same codes and scales), whose programs then only
    convert and multiply codes, instead of each program rounding its K slice itself."""
    m, k = x.shape
    n = weight.shape[0]
    if m > MAX_ROWS or k % FP8_BLOCK or weight.stride() != (k, 1) or x.stride(1) != 1 or FP8_BLOCK % block_n:
        raise ValueError(f"block_gemv: expected M <= {MAX_ROWS}, K % {FP8_BLOCK} == 0, row-major operands, "
                         f"BLOCK_N dividing {FP8_BLOCK}; got x {tuple(x.shape)} strides {x.stride()}, weight "
                         f"strides {weight.stride()}, BLOCK_N {block_n}")
    sms = sm_count(x.device.index or 0) if x.is_cuda else 1
    p = plan(n, k, sms, block_n, groups, warps, split)
    if (k // FP8_BLOCK) % p.split:
        raise ValueError(f"block_gemv: split {p.split} does not divide K/{FP8_BLOCK} = {k // FP8_BLOCK}")
    tiles = triton.cdiv(n, p.block_n)
    ticket = p.split > 1 and counter is not None and counter.numel() >= tiles
    y = torch.empty(m, n, dtype=out_dtype, device=x.device)
    part = y if p.split == 1 else torch.empty(p.split, n, dtype=torch.float32, device=x.device)
    sx = y
    if prequant:
        from .quantize_triton import fp8_per_group
        x, sx = fp8_per_group(x.contiguous())          # one row: its M-major scales are contiguous
    _block_gemv_kernel[(tiles, p.split)](
        x, weight, weight_scale_t, part, y, counter if ticket else y, sx, n, weight_scale_t.stride(0),
        weight_scale_t.stride(1), K=k, SPLIT=p.split, BLOCK_N=p.block_n, G=p.groups, GROUP=FP8_BLOCK,
        TICKET=ticket, PREQUANT=prequant, num_warps=p.warps, num_stages=1)
    if p.split > 1 and not ticket:
        _sum_slices_kernel[(triton.cdiv(n, 1024),)](part, y, n, SPLIT=p.split, BLOCK=1024, num_warps=4)
    return y


# ---------------------------------------------------------------- tensor-core variant (FP8 MMA, swap-AB)
# Measured slower, kept for bench/bench_block_gemv.py (--tc) and not used by the layers. H200, r7, one row,
# graph replay, HBM-resident weights: Qwen3's q/k/v 5120 x 2048 best 11.3 us (128 rows, 8 warps, K in 8
# slices; 64 rows: 15.2) against 9.5 for the CUDA-core GEMV; o_proj 2048 x 4096 best 10.7 against 9.0.
# Unsplit, 64 rows over K = 2048 took 39.8 us: ~2.5 us per 128-wide K tile, a serial chain per tile (the
# row's group max across warps, its codes stored for the MMA's shared-memory operand, the MMA, its wait)
# that the weight pipeline does not hide; splitting K only spreads that chain over more programs.
#: its default output rows per program (one warpgroup's MMA is 64 rows), warps, pipeline stages
TC_BLOCK_N, TC_WARPS, TC_STAGES = 64, 4, 3
#: K is split until the grid has this many programs per SM (each slice keeps at least TC_MIN_TILES K tiles)
TC_PROGRAMS_PER_SM, TC_MIN_TILES = 2, 2
#: the activation column padded to the smallest tensor-core tile width Triton's dot takes
_TC_COLS = 16


@triton.jit
def _block_gemv_tc_kernel(x_ptr, w_ptr, ws_ptr, part_ptr, y_ptr, stride_wsk, stride_wsn,
                          K: tl.constexpr, N: tl.constexpr, SPLIT: tl.constexpr, BLOCK_N: tl.constexpr,
                          GROUP: tl.constexpr, COLS: tl.constexpr, STAGES: tl.constexpr):
    """Program (i, j): output rows [i*BLOCK_N, +BLOCK_N) over K slice j. Per 128-wide K tile: the row's
    group rounded to E4M3 here (emulation's codes and scale), put in column 0 of a [128, COLS] operand
    (the other columns zero), one FP8 tensor-core dot with the [BLOCK_N, 128] weight codes (exact
    products, fp32 sum of one group), times the group's two scales, added in fp32. The weight loads
    feed a dot, so Triton pipelines them (STAGES) -- what the CUDA-core kernel above cannot get."""
    n0 = tl.program_id(0) * BLOCK_N
    slice_k: tl.constexpr = K // SPLIT
    k_lo = tl.program_id(1) * slice_k
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, GROUP)
    col0 = tl.arange(0, COLS)[None, :] == 0
    w_ptrs = w_ptr + offs_n[:, None] * K + k_lo + offs_k[None, :]                      # [BN, 128]
    ws_ptrs = ws_ptr + (n0 // GROUP) * stride_wsn + (k_lo // GROUP) * stride_wsk      # BN | 128: one block row
    acc = tl.zeros([BLOCK_N, COLS], dtype=tl.float32)
    for t in tl.range(0, slice_k // GROUP, num_stages=STAGES):
        w = tl.load(w_ptrs + t * GROUP)
        x = tl.load(x_ptr + k_lo + t * GROUP + offs_k).to(tl.float32)
        s = _scale_of(tl.max(tl.abs(x), axis=0))
        b = tl.where(col0, _e4m3_values(x, s)[:, None], 0.0).to(tl.float8e4nv)        # [128, COLS]
        acc += tl.dot(w, b) * (s * tl.load(ws_ptrs + t * stride_wsk))
    y = tl.sum(acc, axis=1)                      # the zero columns add nothing
    if SPLIT == 1:
        tl.store(y_ptr + offs_n, y.to(y_ptr.dtype.element_ty))
    else:
        tl.store(part_ptr + tl.program_id(1) * N + offs_n, y)


def plan_tc(n: int, k: int, sms: int, block_n: int = TC_BLOCK_N, split: int | None = None) -> int:
    """K slices of the tensor-core launch: halved until TC_PROGRAMS_PER_SM programs per SM, each slice
    keeping at least TC_MIN_TILES K tiles (the pipeline needs a loop to overlap), unless given."""
    if split is not None:
        return split
    split, tiles = 1, -(-n // block_n)
    while tiles * split < TC_PROGRAMS_PER_SM * sms and (k // FP8_BLOCK) % (2 * split) == 0 \
            and k // FP8_BLOCK // (2 * split) >= TC_MIN_TILES:
        split *= 2
    return split


def block_gemv_tc(x: torch.Tensor, weight: torch.Tensor, weight_scale_t: torch.Tensor, out_dtype: torch.dtype,
                  block_n: int = TC_BLOCK_N, warps: int = TC_WARPS, stages: int = TC_STAGES,
                  split: int | None = None) -> torch.Tensor:
    """`block_gemv` on FP8 tensor cores (see `_block_gemv_tc_kernel`): x [1, K], weight [N, K] e4m3
    row-major with N a multiple of BLOCK_N, weight_scale_t [K/128, N/128] -> [1, N]; split K is summed
    in slice order by a second launch."""
    m, k = x.shape
    n = weight.shape[0]
    if m > MAX_ROWS or k % FP8_BLOCK or n % block_n or FP8_BLOCK % block_n or weight.stride() != (k, 1) \
            or x.stride(1) != 1:
        raise ValueError(f"block_gemv_tc: expected M <= {MAX_ROWS}, K % {FP8_BLOCK} == 0, N % BLOCK_N == 0, "
                         f"BLOCK_N dividing {FP8_BLOCK}, row-major operands; got x {tuple(x.shape)} strides "
                         f"{x.stride()}, weight {tuple(weight.shape)} strides {weight.stride()}, BLOCK_N {block_n}")
    s = plan_tc(n, k, sm_count(x.device.index or 0) if x.is_cuda else 1, block_n, split)
    if (k // FP8_BLOCK) % s:
        raise ValueError(f"block_gemv_tc: split {s} does not divide K/{FP8_BLOCK} = {k // FP8_BLOCK}")
    y = torch.empty(m, n, dtype=out_dtype, device=x.device)
    part = y if s == 1 else torch.empty(s, n, dtype=torch.float32, device=x.device)
    _block_gemv_tc_kernel[(n // block_n, s)](
        x, weight, weight_scale_t, part, y, weight_scale_t.stride(0), weight_scale_t.stride(1), K=k, N=n,
        SPLIT=s, BLOCK_N=block_n, GROUP=FP8_BLOCK, COLS=_TC_COLS, STAGES=stages, num_warps=warps)
    if s > 1:
        _sum_slices_kernel[(triton.cdiv(n, 1024),)](part, y, n, SPLIT=s, BLOCK=1024, num_warps=4)
    return y
