"""FP8 block W8A8 for a few rows in one launch (Triton): the activation's 1x128 groups quantized inside
the GEMV, then multiplied with the 128x128-block weights on tensor cores (16-row tiles).

Why: at decode sizes the cuBLASLt blockwise path (`gemm.blockwise`) is four launches per call (pad
M to 16, since cuBLAS refuses M = 1; quantize; lay the scales out M-major; the GEMM), each a few
microseconds of a layer whose weights stream in 2-3 us. Here every program quantizes the few
activation rows itself (the quantizer's arithmetic, `quantize_triton._to_e4m3`: the same codes and
scales as oracle-emulation) and multiplies them with its slice of output rows.

Numerics, as the cuBLASLt path: the products of two E4M3 values are exact in fp32; each 128-wide
group's fp32 sum is multiplied by its activation scale times its weight-block scale and added in
fp32, then rounded once to the layer's dtype.

Speed: a program owns BLOCK_N output rows (inside one 128-row scale block) and the whole of K. The
group loop feeds a tensor-core dot, so Triton pipelines its loads (cp.async, STAGES groups in
flight; compiled for sm_90 it is 22.5 KB of shared memory, 54 registers, no spills). An unrolled loop
(UNROLL, K a compile-time constant) is the alternative bench/bench_block_gemv.py times beside it.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from oracle.formats import FP8_BLOCK

from .quantize_triton import _e4m3_values, _scale_of

#: rows served here; more go to cuBLASLt (each program quantizes every row again; see bench results)
MAX_ROWS = 16
#: output rows per program (16, 32, 64 or 128), warps, unrolled group loop (else a pipelined loop of
#: STAGES): the H200 figures in bench/results
BLOCK_N, WARPS, UNROLL, STAGES, DOT = 16, 4, False, 4, "bf16"
#: K above this runs the pipelined loop: an unrolled body per 128 columns grows the code (and compile) with K
UNROLL_MAX_K = 8192
_DOTS = {"bf16": 0, "fp8": 1, "fp32": 2}


@triton.jit
def _group(acc, x_ptr, w_rows, ws_col, g, rows, offs_k, n_ok, stride_xm, stride_wsk,
           ROWS: tl.constexpr, GROUP: tl.constexpr, DOT: tl.constexpr):
    """acc + the 1x128 group g: the rows' codes (quantized here) @ the tile's weight codes, scaled.
    DOT 0: bf16 operands (every E4M3 value is a bf16 value), 1: float8 operands, 2: fp32 (interpreter)."""
    x = tl.load(x_ptr + rows[:, None] * stride_xm + g * GROUP + offs_k[None, :], mask=(rows < ROWS)[:, None],
                other=0.0).to(tl.float32)                                               # [BM, 128]
    s = _scale_of(tl.max(tl.abs(x), axis=1))                                           # [BM]
    q = _e4m3_values(x, s[:, None])                                                    # the codes' values
    w = tl.load(w_rows + g * GROUP, mask=n_ok[:, None], other=0.0)                     # [BN, 128] e4m3
    ws = tl.load(ws_col + g * stride_wsk)
    if DOT == 0:
        part = tl.dot(q.to(tl.bfloat16), tl.trans(w.to(tl.bfloat16)), out_dtype=tl.float32)
    elif DOT == 1:
        part = tl.dot(q.to(tl.float8e4nv), tl.trans(w), out_dtype=tl.float32, max_num_imprecise_acc=GROUP)
    else:
        part = tl.dot(q, tl.trans(w.to(tl.float32)), input_precision="ieee")
    return acc + part * (s * ws)[:, None]          # exact products; fp32 sums


@triton.jit
def _block_gemv_kernel(x_ptr, w_ptr, ws_ptr, y_ptr, N, stride_xm, stride_ym, stride_wsk, stride_wsn,
                       K: tl.constexpr, ROWS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       GROUP: tl.constexpr, UNROLL: tl.constexpr, STAGES: tl.constexpr, DOT: tl.constexpr):
    n0 = tl.program_id(0) * BLOCK_N
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, GROUP)
    rows = tl.arange(0, BLOCK_M)
    n_ok = offs_n < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    w_rows = w_ptr + offs_n[:, None] * K + offs_k[None, :]
    ws_col = ws_ptr + (n0 // GROUP) * stride_wsn       # the tile lies in one 128-row block (BLOCK_N | 128)
    if UNROLL:
        for g in tl.static_range(K // GROUP):
            acc = _group(acc, x_ptr, w_rows, ws_col, g, rows, offs_k, n_ok, stride_xm, stride_wsk, ROWS, GROUP, DOT)
    else:
        for g in tl.range(0, K // GROUP, num_stages=STAGES):
            acc = _group(acc, x_ptr, w_rows, ws_col, g, rows, offs_k, n_ok, stride_xm, stride_wsk, ROWS, GROUP, DOT)
    out = y_ptr + rows[:, None] * stride_ym + offs_n[None, :]
    tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=(rows[:, None] < ROWS) & n_ok[None, :])


def block_gemv(x: torch.Tensor, weight: torch.Tensor, weight_scale_t: torch.Tensor,
               out_dtype: torch.dtype, block_n: int = BLOCK_N, warps: int = WARPS, unroll: bool | None = None,
               stages: int = STAGES, dot: str = DOT) -> torch.Tensor:
    """x [M, K] (M <= MAX_ROWS, K % 128 == 0) x weight [N, K] e4m3 (row-major), weight_scale_t the
    [K/128, N/128] fp32 block scales (any strides) -> [M, N] in out_dtype."""
    m, k = x.shape
    n = weight.shape[0]
    if m > MAX_ROWS or k % FP8_BLOCK or weight.stride() != (k, 1) or x.stride(1) != 1:
        raise ValueError(f"block_gemv: expected M <= {MAX_ROWS}, K % {FP8_BLOCK} == 0, row-major operands; "
                         f"got x {tuple(x.shape)} strides {x.stride()}, weight strides {weight.stride()}")
    bn = block_n
    unroll = (UNROLL and k <= UNROLL_MAX_K) if unroll is None else unroll
    if x.device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        dot = "fp32"          # the interpreter's bf16 and TF32 dots are not exact
    y = torch.empty(m, n, dtype=out_dtype, device=x.device)
    _block_gemv_kernel[(triton.cdiv(n, bn),)](
        x, weight, weight_scale_t, y, n, x.stride(0), y.stride(0), weight_scale_t.stride(0),
        weight_scale_t.stride(1), K=k, ROWS=m, BLOCK_M=16, BLOCK_N=bn,
        GROUP=FP8_BLOCK, UNROLL=unroll, STAGES=stages, DOT=_DOTS[dot], num_warps=warps)
    return y
