"""The two Triton launches around torch._int_mm in oracle_torch.int8 (CUDA, W8A8 int8).

`int8_per_token` quantizes [M, K] activations in one launch: one program per row, scale =
amax / 127 by IEEE division (`div_rn`; a plain `/` on fp32 compiles to an approximate one), a
zero row gets scale 1, codes = x / scale by IEEE division, rounded half to even, clamped to
+-127: the arithmetic of oracle-emulation's int8 activations (its `activations.int8_qdq`) and
of oracle_torch.cpu_int.quantize_per_token, which stay the references. Rows M .. rows-1 (the
padding cuBLASLt's int8 GEMM needs: torch._int_mm asks for more than 16 rows on CUDA) are
written as zero codes with scale 1 in the same launch, so no separate fill runs.

`scale_epilogue` turns the int32 products into the layer's dtype in one launch:
y = (acc * s_x[m]) * s_w[n] in float32, rounded once, then + bias in that dtype (the order of
the CPU kernel, so both give the same values for the same products; compiled without fused
multiply-adds, which would skip the product's rounding before the bias in float32 output).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .quantize_triton import _round_half_even   # nearest integer of t >= 0, ties to even

@triton.jit
def _row_kernel(x_ptr, q_ptr, s_ptr, M, K, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    live = row < M
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, K, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * K + offs, mask=(offs < K) & live, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    top = tl.max(amax, axis=0)
    s = tl.math.div_rn(top, tl.full(top.shape, 127.0, tl.float32))
    s = tl.where(s > 0, s, 1.0)
    for start in range(0, K, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * K + offs, mask=(offs < K) & live, other=0.0).to(tl.float32)
        v = tl.math.div_rn(x, s)
        q = tl.minimum(_round_half_even(tl.abs(v)), 127.0)
        q = tl.where(v < 0, -q, q)
        tl.store(q_ptr + row * K + offs, q.to(tl.int8), mask=offs < K)
    tl.store(s_ptr + row, s)


@triton.jit
def _epilogue_kernel(acc_ptr, sx_ptr, sw_ptr, b_ptr, y_ptr, N, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    acc = tl.load(acc_ptr + row * N + offs, mask=mask, other=0).to(tl.float32)
    sx = tl.load(sx_ptr + row)
    sw = tl.load(sw_ptr + offs, mask=mask, other=0.0)
    y = ((acc * sx) * sw).to(y_ptr.dtype.element_ty)
    if HAS_BIAS:
        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        y = (y.to(tl.float32) + b.to(tl.float32)).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + row * N + offs, y, mask=mask)


def int8_per_token(x: torch.Tensor, rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, K] contiguous CUDA -> (int8 codes [rows, K], fp32 scales [rows, 1]); rows >= M (default M),
    the rows past M zero codes with scale 1."""
    m, k = x.shape
    rows = m if rows is None else rows
    q = torch.empty(rows, k, dtype=torch.int8, device=x.device)
    s = torch.empty(rows, 1, dtype=torch.float32, device=x.device)
    _row_kernel[(rows,)](x, q, s, m, k, BLOCK=1024)
    return q, s


#: the epilogue's columns per program and warps (bench/bench_int8.py --epilogue-sweep times others)
EPILOGUE_BLOCK, EPILOGUE_WARPS = 1024, 4


def scale_epilogue(acc: torch.Tensor, sx: torch.Tensor, sw: torch.Tensor, bias: torch.Tensor | None,
                   m: int, dtype: torch.dtype, block: int | None = None, warps: int | None = None) -> torch.Tensor:
    """int32 acc [>= m, N], fp32 sx [>= m, 1], fp32 sw [N] -> [m, N] in `dtype` (+ bias [N] in `dtype`)."""
    n = acc.shape[1]
    y = torch.empty(m, n, dtype=dtype, device=acc.device)
    block = block or EPILOGUE_BLOCK
    _epilogue_kernel[(m, triton.cdiv(n, block))](acc, sx, sw, y if bias is None else bias, y, n,
                                                 HAS_BIAS=bias is not None, BLOCK=block,
                                                 num_warps=warps or EPILOGUE_WARPS, enable_fp_fusion=False)
    return y
