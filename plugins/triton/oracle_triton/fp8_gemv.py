"""One activation row of FP8 W8A8 with scales constant along K, on CUDA cores (cfg ROWGEMV).

Why: at M = 1 the swap-AB float8 GEMM (gemm.fp8_swap_kernel) streamed 8192x8192 at about 3.3 TB/s
(22.9 us against 16.2 us of HBM time, seventh pass) while gemlite's CUDA-core GEMV, two rows per
program across thousands of programs, reached about 3.8 TB/s. The float8 MMA needs a 16-row
operand and a register-to-shared copy of the rounded row per K tile; a row GEMV needs neither:
each program takes a few weight rows (contiguous along K) in wide chunks, many programs per SM keep
many loads in flight.

Each program rounds the activation row itself (per token: the row's amax over all of K, then the
E4M3 code of x / scale per chunk, as act_qdq_kernel computes them; per tensor: the given scale), so
one launch serves the call. The products of two E4M3 values are exact in fp32 and are summed in
fp32 (elementwise per thread, one reduction at the end): the same terms as the tensor-core path,
summed in another order.

Measured slower than the swap GEMM on an H200 (eighth pass R20, 8192x8192 M=1, graph replay, weights from
HBM: 27.6-50.4 us for 2-16 rows per program, 37.5-117.1 with the next chunk loaded ahead, against 21.1), so
no rule chooses it; a tuned entry (cfg ROWGEMV) may. Each program re-reads and re-rounds the bf16 row, which
gemlite's GEMV avoids by reading the codes of a separate quantizer launch.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .dequant import e4m3_rounded, e4m3_values, finish_tile, fp8_scale, split_range


@triton.jit
def _w_tile(w_rows, n_ok, t, t1, K, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """K chunk min(t, t1 - 1) of the program's weight rows (uint8 codes; zeros past N and K)."""
    offs_k = tl.minimum(t, t1 - 1) * BLOCK_K + tl.arange(0, BLOCK_K)
    if EVEN_K:
        w = tl.load(w_rows + offs_k[None, :], mask=n_ok[:, None], other=0)
    else:
        w = tl.load(w_rows + offs_k[None, :], mask=n_ok[:, None] & (offs_k < K)[None, :], other=0)
    return w


@triton.jit
def fp8_row_gemv_kernel(x_ptr, as_ptr, w_ptr, s_ptr, b_ptr, y_ptr, part_ptr, cnt_ptr, N, K, stride_wn, stride_sn,
                        A_CODES: tl.constexpr, HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, AMAX_K: tl.constexpr,
                        HW_FP8: tl.constexpr, EXACT_BF16: tl.constexpr, EVEN_K: tl.constexpr,
                        AHEAD: tl.constexpr = False):
    """y[0, n] = s_x * s_w[n] * sum_k code(x[k] / s_x) * code(w[n, k]) (+ bias). Grid (N / BLOCK_N, SPLIT_K).
    A_CODES 2: per-token scale from the row's amax (AMAX_K-wide loads); 3: the per-tensor scale at as_ptr.
    AHEAD: the next chunk's weights loaded before the current one is multiplied (registers double-buffer
    them: twice the bytes in flight per program, about twice the registers)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    if A_CODES == 2:
        offs_a = tl.arange(0, AMAX_K)
        run = tl.abs(tl.load(x_ptr + offs_a, mask=offs_a < K, other=0.0).to(tl.float32))
        for c in range(AMAX_K, K, AMAX_K):
            run = tl.maximum(run, tl.abs(tl.load(x_ptr + c + offs_a, mask=c + offs_a < K, other=0.0).to(tl.float32)))
        xs = fp8_scale(tl.max(run, axis=0))
    else:
        xs = tl.load(as_ptr)
    t0, t1 = split_range(K, BLOCK_K, SPLIT_K, pid_k)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    w_rows = w_ptr + offs_n[:, None].to(tl.int64) * stride_wn
    w = _w_tile(w_rows, n_ok, t0, t1, K, BLOCK_K, EVEN_K)
    for t in range(t0, t1):
        if AHEAD:
            w_next = _w_tile(w_rows, n_ok, t + 1, t1, K, BLOCK_K, EVEN_K)
        else:
            w = _w_tile(w_rows, n_ok, t, t1, K, BLOCK_K, EVEN_K)
        offs_k = t * BLOCK_K + tl.arange(0, BLOCK_K)
        if EVEN_K:
            xv = tl.load(x_ptr + offs_k)
        else:
            xv = tl.load(x_ptr + offs_k, mask=offs_k < K, other=0.0)
        xq = e4m3_rounded(tl.math.div_rn(xv.to(tl.float32), xs), HW_FP8)
        wv = e4m3_values(w, HW_FP8)
        acc += wv * xq[None, :]
        if AHEAD:
            w = w_next
    ws = tl.load(s_ptr + offs_n * stride_sn, mask=n_ok, other=0.0)
    y = tl.sum(acc, axis=1) * xs * ws
    finish_tile(y[None, :], part_ptr, cnt_ptr, pid_n, pid_k, b_ptr, y_ptr, tl.arange(0, 1), offs_n, 1, N, N,
                SPLIT_K, HAS_BIAS, EXACT_BF16)
