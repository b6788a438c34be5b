"""The Triton kernel of oracle::topk (oracle.hf.topk): the k largest values of a row, one after another.

Its own module so that importing oracle.hf.topk (a CPU compile, the graph pass) never imports triton;
oracle.hf.topk imports this at the op's first CUDA call.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def topk_rows(x_ptr, v_ptr, i_ptr, E, stride, K: tl.constexpr, BLOCK: tl.constexpr):
    """Program r: row r of x [rows, E] (row stride `stride`) -> its K largest values, descending, into
    v [rows, K] and their indices into i [rows, K]; the smaller index first among equal values; NaN counts
    as larger than any number, as in torch.topk (so an index is always one of the row's own)."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + offs, mask=offs < E, other=0.0).to(tl.float32)
    nan = x != x
    taken = offs >= E                                  # padding and values already picked
    for j in tl.static_range(K):
        first_nan = tl.min(tl.where(~taken & nan, offs, BLOCK), axis=0)
        best = tl.max(tl.where(taken | nan, float("-inf"), x), axis=0)
        pick = tl.min(tl.where(~taken & ~nan & (x == best), offs, BLOCK), axis=0)
        pick = tl.where(first_nan < BLOCK, first_nan, pick)
        value = tl.sum(tl.where(offs == pick, x, 0.0), axis=0)      # x[pick] itself (a NaN included)
        tl.store(v_ptr + row * K + j, value.to(v_ptr.dtype.element_ty))
        tl.store(i_ptr + row * K + j, pick.to(tl.int64))
        taken = taken | (offs == pick)
