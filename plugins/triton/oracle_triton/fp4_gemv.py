"""One activation row against E2M1 weights (MXFP4 / NVFP4, W4A16): the row held, the weight rows walked.

gemv.gemv_kernel walks K with a fixed set of weight rows, so every K tile brings a new slice of the
activation row, and bringing it into the registers where each thread multiplies is a layout change
through shared memory, with barriers, every K tile (its sm_90 SASS: 18 barriers per tile against 8
in the INT4 GEMV, whose GPTQ words spread N over the threads); the E2M1 GEMV runs at a third of the
HBM limit while INT4's, with the same instructions per weight, runs at half. Here a program owns
one K chunk of the row (BLOCK_K values, loaded and placed once) and walks ROWS weight rows,
BLOCK_N at a time: each thread keeps its 32 activation values of a 4-word quad (one MX group, two
NV groups) in registers for every row it visits, reduces each row's products over its lanes, and
the K chunks of a row are summed in a fixed order by the last program to finish (split-K over
K / BLOCK_K chunks, dequant.finish-style counter reset for CUDA-graph replay).

Words are decoded by gemv's inline-PTX converter words (_E2M1_WORD_PTX: capability >= 8.9,
compiled only; the interpreter takes the integer decoder, PTX False); products of codes and
activations are exact in fp32 and the group scale multiplies each lane's group sum, as in
gemv.gemv_kernel.

Measured on an H200 (2026-12-02 R8, weights from HBM, graph replay): 1.16x the GEMV on MXFP4
36864x7168 (95.2 against 110.2 us, the tuned entry), slower on the other shapes (fewer programs,
a lane reduction per row), so only the tuned table selected it. Since W4A16 E2M1 weights are
repacked at load into GPTQ's word layout (weights.repack_words), whose GEMV runs INT4's structure
and measured 1.6-1.8x faster than this kernel on that shape (R10: 52.8 against 94.6 us), it serves
only the checkpoint layout (linear.WORD_LAYOUT False): kept as that layout's fastest tall-shape path.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .dequant import e2m1_decode, e4m3_decode, e8m0_decode, to_dtype
from .gemv import _E2M1_WORD_PTX, split8


@triton.jit
def _quad_sums(u, x0, x1, x2, x3, x4, x5, x6, x7, PTX: tl.constexpr):
    """u [BN, Q, 4] words of E2M1 codes, x0..x7 [Q, 4] fp32 activations (value i of each word) ->
    [BN, Q, 4] sums of each word's 8 products (values x 2**-6). PTX: gemv's bit-placement decoder;
    else integer decoding (the interpreter: same values, so the CPU tests check everything else)."""
    if PTX:
        w0, w1, w2, w3, w4, w5, w6, w7 = tl.inline_asm_elementwise(
            _E2M1_WORD_PTX, "=r,=r,=r,=r,=r,=r,=r,=r,r", [u], dtype=(tl.float32,) * 8, is_pure=True, pack=1)
    else:
        w0 = e2m1_decode(u & 15) * 0.015625
        w1 = e2m1_decode((u >> 4) & 15) * 0.015625
        w2 = e2m1_decode((u >> 8) & 15) * 0.015625
        w3 = e2m1_decode((u >> 12) & 15) * 0.015625
        w4 = e2m1_decode((u >> 16) & 15) * 0.015625
        w5 = e2m1_decode((u >> 20) & 15) * 0.015625
        w6 = e2m1_decode((u >> 24) & 15) * 0.015625
        w7 = e2m1_decode((u >> 28) & 15) * 0.015625
    return (w0 * x0[None, :, :] + w1 * x1[None, :, :] + w2 * x2[None, :, :] + w3 * x3[None, :, :]
            + w4 * x4[None, :, :] + w5 * x5[None, :, :] + w6 * x6[None, :, :] + w7 * x7[None, :, :])


@triton.jit
def _load_rows(w_ptr, s_ptr, offs_n, n_end, jw, gq, K, stride_wn, stride_sn, ELEM: tl.constexpr, EVEN_K: tl.constexpr):
    """The words [BN, Q, 4] and raw scales of rows offs_n (those below n_end) over the chunk's quads:
    MX [BN, Q] (one per quad), NV [BN, Q, 2] (one per word pair). EVEN_K: the chunk is whole (no
    mask along K, so the words load 16 bytes at a time)."""
    gq = gq * (stride_sn // stride_sn)      # no contiguity known: each lane loads its own scale byte
    n_ok = (offs_n < n_end)[:, None, None]
    if EVEN_K:
        wmask = n_ok
    else:
        wmask = n_ok & (jw[None, :, :] < K // 8)
    u = tl.load(w_ptr.to(tl.pointer_type(tl.int32)) + offs_n[:, None, None] * (stride_wn // 4) + jw[None, :, :],
                mask=wmask, other=0)
    if ELEM == 1:
        s = tl.load(s_ptr + offs_n[:, None] * stride_sn + gq[None, :],
                    mask=(offs_n < n_end)[:, None] & (gq[None, :] < K // 32), other=0)
    else:
        g2 = (2 * gq)[:, None] + tl.arange(0, 2)[None, :]                                  # [Q, 2]
        s = tl.load(s_ptr + offs_n[:, None, None] * stride_sn + g2[None, :, :],
                    mask=n_ok & (g2[None, :, :] < K // 16), other=0)
    return u, s


@triton.jit
def _row_sums(u, s, gscale, x0, x1, x2, x3, x4, x5, x6, x7, ELEM: tl.constexpr, PTX: tl.constexpr):
    """[BN] sums over the chunk of rows u (values, not x 2**-6), each group's sum times its scale."""
    p = _quad_sums(u, x0, x1, x2, x3, x4, x5, x6, x7, PTX)                                   # [BN, Q, 4]
    if ELEM == 1:
        r = tl.sum(tl.sum(p, axis=2) * e8m0_decode(s.to(tl.int32)), axis=1) * 64.0
    else:
        pa, pb = tl.split(tl.reshape(p, [p.shape[0], p.shape[1], 2, 2]))                 # words 2a, 2a + 1
        if PTX:     # the E4M3 scale by the hardware conversion (capability >= 8.9, as the word decoder)
            sv = s.to(tl.float8e4nv, bitcast=True).to(tl.float32)
        else:
            sv = e4m3_decode(s.to(tl.int32))
        r = tl.sum(tl.sum((pa + pb) * sv, axis=2), axis=1) * (64.0 * gscale)
    return r


@triton.jit
def fp4_rows_kernel(x_ptr, w_ptr, s_ptr, g_ptr, b_ptr, y_ptr, part_ptr, cnt_ptr, N, K, stride_wn, stride_sn,
                    ELEM: tl.constexpr, HAS_BIAS: tl.constexpr, SPLIT: tl.constexpr, ROWS: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, OUT_F16: tl.constexpr, PTX: tl.constexpr,
                    EXACT_BF16: tl.constexpr, EVEN_K: tl.constexpr):
    """y[0, n] = sum_k x[0, k] W[n, k]. Grid (cdiv(N, ROWS), cdiv(K, BLOCK_K)); SPLIT: more than one
    chunk (a runtime count, so one compiled kernel serves every K); EVEN_K: BLOCK_K divides K;
    BLOCK_K a power of two >= 64, BLOCK_N divides ROWS."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    chunks = tl.num_programs(1)
    Q: tl.constexpr = BLOCK_K // 32
    gq = pid_k * Q + tl.arange(0, Q)                                                       # quads (MX groups)
    jw = gq[:, None] * 4 + tl.arange(0, 4)[None, :]                                        # [Q, 4] words
    kx = jw[:, :, None] * 8 + tl.arange(0, 8)[None, None, :]                               # [Q, 4, 8]
    x0, x1, x2, x3, x4, x5, x6, x7 = split8(tl.load(x_ptr + kx, mask=kx < K, other=0.0).to(tl.float32))
    gscale = 1.0
    if ELEM == 2:
        gscale = tl.load(g_ptr)
    n_first = pid_n * ROWS
    n_end = tl.minimum(N, n_first + ROWS)
    offs = tl.arange(0, BLOCK_N)
    # rows two steps ahead are in flight while a step is multiplied (one step ahead was not enough:
    # ptxas schedules those loads late in the loop body, leaving the next step to wait for memory)
    u, s = _load_rows(w_ptr, s_ptr, n_first + offs, n_end, jw, gq, K, stride_wn, stride_sn, ELEM, EVEN_K)
    u1, s1 = _load_rows(w_ptr, s_ptr, n_first + BLOCK_N + offs, n_end, jw, gq, K, stride_wn, stride_sn, ELEM, EVEN_K)
    for r in range(0, ROWS, BLOCK_N):
        u2, s2 = _load_rows(w_ptr, s_ptr, n_first + r + 2 * BLOCK_N + offs, n_end, jw, gq, K, stride_wn, stride_sn,
                            ELEM, EVEN_K)
        y = _row_sums(u, s, gscale, x0, x1, x2, x3, x4, x5, x6, x7, ELEM, PTX)
        offs_n = n_first + r + offs
        if not SPLIT:
            _store_rows(y, offs_n, b_ptr, y_ptr, N, HAS_BIAS, OUT_F16, EXACT_BF16)
        else:
            tl.store(part_ptr + pid_k * N + offs_n, y, mask=offs_n < N)
        u, s = u1, s1
        u1, s1 = u2, s2
    if SPLIT:               # the last chunk to finish sums the row block's chunks in order
        tl.debug_barrier()
        arrived = tl.atomic_add(cnt_ptr + pid_n, 1)
        if arrived == chunks - 1:
            for r in range(0, ROWS, BLOCK_N):
                offs_n = n_first + r + offs
                acc = tl.zeros([BLOCK_N], dtype=tl.float32)
                for c in range(0, chunks):
                    acc += tl.load(part_ptr + c * N + offs_n, mask=offs_n < N, other=0.0, cache_modifier=".cg")
                _store_rows(acc, offs_n, b_ptr, y_ptr, N, HAS_BIAS, OUT_F16, EXACT_BF16)
            tl.atomic_xchg(cnt_ptr + pid_n, 0)


@triton.jit
def _store_rows(acc, offs_n, b_ptr, y_ptr, N, HAS_BIAS: tl.constexpr, OUT_F16: tl.constexpr,
                EXACT_BF16: tl.constexpr):
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs_n, to_dtype(acc, tl.float16 if OUT_F16 else tl.bfloat16, EXACT_BF16), mask=offs_n < N)
