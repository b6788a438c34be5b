"""FP8 block W8A8 for one row in one launch (Triton): the activation's 1x128 groups quantized inside
the GEMV, then multiplied with the 128x128-block weights on CUDA cores.

Why: at decode sizes the cuBLASLt blockwise path (`gemm.blockwise`) is four launches per call (pad
M to 16, since cuBLAS refuses M = 1; quantize; lay the scales out M-major; the GEMM): 13.6 us for
Qwen3-30B's fused q/k/v projection on an H200 (bench/bench_block_gemv.py), whose FP8 weights stream
in 2.5 us and whose BF16 weights take cuBLAS 8.2 us. Here every program quantizes the row itself (the
fused quantizer's arithmetic, `quantize_triton._e4m3_values`: the same codes and scales as
oracle-emulation) and multiplies it with its BLOCK_N output rows.

Numerics, as the cuBLASLt path: the products of two E4M3 values are exact in fp32; each 128-wide
group's fp32 sum is multiplied by its activation scale times its weight-block scale and added in
fp32, then rounded once to the layer's dtype.

Only one row: a first version padded the rows to 16 for a tensor-core dot and quantized all 16 in
every program; it took 77-80 us for that projection (H200, r4). Each program here quantizes the K
values of the row (its share of the redundant work: 2048 divisions over 128 threads for K=2048).
Loads: Triton does not pipeline loads that feed no tensor-core dot, and the cross-warp reductions put
a barrier in every group, past which no load is hoisted; so the weights come G groups at a time and
the next chunk's load is issued by hand before the current chunk's arithmetic (two chunks in flight).
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from oracle.formats import FP8_BLOCK

from .quantize_triton import _e4m3_values, _scale_of

#: rows served here; more go to cuBLASLt
MAX_ROWS = 1
#: output rows per program (a power of two up to 128), 128-wide groups per load (at most) and warps:
#: the H200 figures in bench/results
BLOCK_N, GROUPS, WARPS = 16, 4, 4
#: ORACLE_TORCH_BLOCK_GEMV=0 keeps one-row calls on the cuBLASLt path (benchmarks compare the two)
ENV = "ORACLE_TORCH_BLOCK_GEMV"


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


@triton.jit
def _chunk(acc, w, x_ptr, ws_col, k0, stride_wsk, G: tl.constexpr, GROUP: tl.constexpr):
    """acc + the K chunk [k0, k0 + G*128): the row's G groups quantized here, times the weight codes
    w [BN, G, 128] (exact products), each group's fp32 sum times its two scales."""
    offs_g = tl.arange(0, G)
    offs_k = tl.arange(0, GROUP)
    x = tl.load(x_ptr + k0 + offs_g[:, None] * GROUP + offs_k[None, :]).to(tl.float32)     # [G, 128]
    s = _scale_of(tl.max(tl.abs(x), axis=1))                                             # [G]
    part = tl.sum(w.to(tl.float32) * _e4m3_values(x, s[:, None])[None, :, :], axis=2)   # [BN, G]
    ws = tl.load(ws_col + (k0 // GROUP + offs_g) * stride_wsk)                           # [G]
    return acc + tl.sum(part * (s * ws)[None, :], axis=1)


@triton.jit
def _block_gemv_kernel(x_ptr, w_ptr, ws_ptr, y_ptr, N, stride_wsk, stride_wsn,
                       K: tl.constexpr, BLOCK_N: tl.constexpr, G: tl.constexpr, GROUP: tl.constexpr):
    n0 = tl.program_id(0) * BLOCK_N
    offs_n = n0 + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    chunk: tl.constexpr = G * GROUP
    w_ptrs = w_ptr + offs_n[:, None, None] * K + tl.arange(0, G)[None, :, None] * GROUP + \
        tl.arange(0, GROUP)[None, None, :]                                                 # [BN, G, 128]
    ws_col = ws_ptr + (n0 // GROUP) * stride_wsn       # the tile lies in one 128-row block (BLOCK_N | 128)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    w_next = tl.load(w_ptrs, mask=n_ok[:, None, None], other=0.0)
    for c in range(0, K // chunk - 1):     # the next chunk's load is issued before this chunk's arithmetic
        w = w_next
        w_next = tl.load(w_ptrs + (c + 1) * chunk, mask=n_ok[:, None, None], other=0.0)
        acc = _chunk(acc, w, x_ptr, ws_col, c * chunk, stride_wsk, G, GROUP)
    acc = _chunk(acc, w_next, x_ptr, ws_col, K - chunk, stride_wsk, G, GROUP)
    tl.store(y_ptr + offs_n, acc.to(y_ptr.dtype.element_ty), mask=n_ok)


def groups_per_chunk(k: int, most: int) -> int:
    """128-wide groups loaded at once: the most (a power of two) that divides K/128."""
    g = most
    while (k // FP8_BLOCK) % g:
        g //= 2
    return g


def block_gemv(x: torch.Tensor, weight: torch.Tensor, weight_scale_t: torch.Tensor,
               out_dtype: torch.dtype, block_n: int = BLOCK_N, groups: int = GROUPS,
               warps: int = WARPS) -> torch.Tensor:
    """x [1, K] (K % 128 == 0) x weight [N, K] e4m3 (row-major), weight_scale_t the [K/128, N/128]
    fp32 block scales (any strides) -> [1, N] in out_dtype."""
    m, k = x.shape
    n = weight.shape[0]
    if m > MAX_ROWS or k % FP8_BLOCK or weight.stride() != (k, 1) or x.stride(1) != 1 or FP8_BLOCK % block_n:
        raise ValueError(f"block_gemv: expected M <= {MAX_ROWS}, K % {FP8_BLOCK} == 0, row-major operands, "
                         f"BLOCK_N dividing {FP8_BLOCK}; got x {tuple(x.shape)} strides {x.stride()}, weight "
                         f"strides {weight.stride()}, BLOCK_N {block_n}")
    y = torch.empty(m, n, dtype=out_dtype, device=x.device)
    _block_gemv_kernel[(triton.cdiv(n, block_n),)](
        x, weight, weight_scale_t, y, n, weight_scale_t.stride(0), weight_scale_t.stride(1),
        K=k, BLOCK_N=block_n, G=groups_per_chunk(k, groups), GROUP=FP8_BLOCK, num_warps=warps, num_stages=1)
    return y
