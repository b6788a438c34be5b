"""One activation row of 4-bit W4A16 weights in GPTQ's [K/8, N] word layout (INT4, and MXFP4 / NVFP4 repacked at
load: weights.repack_words), each program's whole weight tile in one load (cfg W4ROW 1, a tuned entry's option at
M = 1).

Why: at 2048x4096 the weights are 4 MB (about 1 us of HBM time) and the shipped GEMV (gemv.gemv_kernel, split-K
16, two K tiles per program with the next tile's loads in flight) took 6.3 us against tinygemm's 5.6: latency,
not bytes. fp8_rowgemv's one-tile form (ROWGEMV 3) reads 8 MB of FP8 at the same shape in 4.7 us: every byte a
program needs is asked for by one tl.load, so ptxas issues all of a thread's 16-byte loads before the first
product, and without a K split there is no serial tail (partials to L2, an atomic, the last program's sum).
Here a program multiplies BLOCK_N output columns over a K range of BLOCK_K (SPLIT_K = cdiv(K, BLOCK_K) ranges):
its [BLOCK_K / 8, BLOCK_N] words, [BLOCK_K / GROUP, BLOCK_N] scales (and zero points), and the BLOCK_K
activations, each one load. SPLIT_K 1 (the whole K per program: narrow BLOCK_N, more programs) needs no
reduction across programs; SPLIT_K > 1 sums the slices as the GEMV does (dequant.finish_tile, fixed order).

Numerics: those of gemv.gemv_kernel's word decoders (DECODE 3: gemv._int4_word_products, gemv._fp4_kn_products,
compiled only) or of exact integer decoding (DECODE 0, any device and the interpreter): (q - z) or the E2M1 value
times the activation, summed in fp32 over each word, times the group scale, summed in fp32 over the program's K
range (tl.sum's tree order), then the K slices in a fixed order, plus the bias.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .dequant import e2m1_bits, finish_tile, group_scales, group_scales_hw
from .formats import INT4 as _INT4_CODE
from .gemv import _E2M1_WORD_PTX, _INT4_WORD_PTX, int4_pair_lines, split8

INT4 = tl.constexpr(_INT4_CODE)   # formats' element code, as a compile-time constant for the kernel

#: HX 1 (INT4, compiled only): one GPTQ word ($1), its zero point as the f16 pair {1024 + z, 1024 + z} ($2) and its
#: 8 activations x 2**-4 as f16 in the nibble pairs' order ($3: x0, x4, x1, x5; $4: x2, x6, x3, x7) -> the sum of the
#: 8 products (q - z) x / 16 (fp32, $0): the pairs q - z by one f16x2 subtraction each (exact, as _INT4_WORD_PTX),
#: multiplied and summed by packed f16 FMAs (two lanes of 4 products), the lanes added in fp32: 4 packed FMAs and 2
#: conversions where the fp32 form takes 8 conversions and 8 FMAs. Each lane rounds to f16's 11 bits; |q - z| <= 15,
#: so a lane stays below 3.75 x max|x| (inside f16's range for |x| < 17000; the x 2**-4 keeps it there).
_INT4_HX_PTX = tl.constexpr("""{
.reg .b32 t0, t1, t2, t3, x0, x1, x2, x3, s;
.reg .b16 h0, h1;
.reg .f32 f0, f1;
""" + int4_pair_lines("$1", "$2") + """mov.b64 {x0, x1}, $3;
mov.b64 {x2, x3}, $4;
mul.rn.f16x2 s, t0, x0;
fma.rn.f16x2 s, t1, x1, s;
fma.rn.f16x2 s, t2, x2, s;
fma.rn.f16x2 s, t3, x3, s;
mov.b32 {h0, h1}, s;
cvt.f32.f16 f0, h0;
cvt.f32.f16 f1, h1;
add.rn.f32 $0, f0, f1;
}""")


@triton.jit
def _f16_bits(v):
    """fp32 values -> their f16 roundings' 16 bits (int64, zero-extended)."""
    return v.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int64) & 0xFFFF


@triton.jit
def _int4_hx_sums(u, zpair, x):
    """HX 1: u [G, UJ, BN] GPTQ words, zpair their zero points' f16 pairs, x [G, UJ, 8] their activations (k order)
    -> [G, UJ, BN] sums of (q - z) x / 16 per word (_INT4_HX_PTX; the caller multiplies the 16 back)."""
    x0, x1, x2, x3, x4, x5, x6, x7 = split8(x.to(tl.float32) * 0.0625)
    xa = _f16_bits(x0) | (_f16_bits(x4) << 16) | (_f16_bits(x1) << 32) | (_f16_bits(x5) << 48)
    xb = _f16_bits(x2) | (_f16_bits(x6) << 16) | (_f16_bits(x3) << 32) | (_f16_bits(x7) << 48)
    return tl.inline_asm_elementwise(_INT4_HX_PTX, "=r,r,r,l,l",
                                     [u, zpair, tl.broadcast_to(xa[:, :, None], u.shape),
                                      tl.broadcast_to(xb[:, :, None], u.shape)],
                                     dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _word_products(w0, w1, w2, w3, w4, w5, w6, w7, x):
    """sum over a word's 8 values w0..w7 [G, UJ, BN] of value x activation, x [G, UJ, 8] the activations of each
    word row (k order)."""
    x0, x1, x2, x3, x4, x5, x6, x7 = split8(x.to(tl.float32))
    return (w0 * x0[:, :, None] + w1 * x1[:, :, None] + w2 * x2[:, :, None] + w3 * x3[:, :, None]
            + w4 * x4[:, :, None] + w5 * x5[:, :, None] + w6 * x6[:, :, None] + w7 * x7[:, :, None])


@triton.jit
def _word_sums(u, z, x, n3, ELEM: tl.constexpr, HAS_ZERO: tl.constexpr, DECODE: tl.constexpr,
               HX: tl.constexpr = 0):
    """u [G, UJ, BN] words (8 codes along K each, low nibble first), z [G, 1, BN] GPTQ zero-point words (INT4 with
    HAS_ZERO; else unused), x [G, UJ, 8] the activations of each word row (k order), n3 [1, 1, BN] the output
    columns -> [G, UJ, BN] fp32 sums over each word's 8 products: (q - z) x (INT4), value x (E2M1; x 2**-6 with
    DECODE 3); HX 1 (INT4, DECODE 3): packed f16 products, x 2**-4."""
    if ELEM == INT4 and DECODE == 3 and HX == 1:
        if HAS_ZERO:
            zq = (z >> ((n3 % 8) * 4)) & 15
        else:
            zq = tl.full(n3.shape, 8, tl.int32)
        return _int4_hx_sums(u, tl.broadcast_to((zq + 0x6400) * 65537, u.shape), x)
    if ELEM == INT4:
        if HAS_ZERO:
            zq = (z >> ((n3 % 8) * 4)) & 15
        else:
            zq = tl.full(n3.shape, 8, tl.int32)
        if DECODE == 3:       # one f16x2 subtraction per nibble pair (gemv._INT4_WORD_PTX)
            w0, w1, w2, w3, w4, w5, w6, w7 = tl.inline_asm_elementwise(
                _INT4_WORD_PTX, "=r,=r,=r,=r,=r,=r,=r,=r,r,r", [u, tl.broadcast_to((zq + 0x6400) * 65537, u.shape)],
                dtype=(tl.float32,) * 8, is_pure=True, pack=1)
        else:
            w0, w1, w2, w3, w4, w5, w6, w7 = _int_values(u, zq)
    elif DECODE == 3:
        w0, w1, w2, w3, w4, w5, w6, w7 = tl.inline_asm_elementwise(
            _E2M1_WORD_PTX, "=r,=r,=r,=r,=r,=r,=r,=r,r", [u], dtype=(tl.float32,) * 8, is_pure=True, pack=1)
    else:
        w0, w1, w2, w3, w4, w5, w6, w7 = _e2m1_values(u)
    return _word_products(w0, w1, w2, w3, w4, w5, w6, w7, x)


@triton.jit
def _int_values(u, zq):
    """GPTQ words -> their 8 values q - z as fp32 (exact integer decoding)."""
    return (((u & 15) - zq).to(tl.float32), (((u >> 4) & 15) - zq).to(tl.float32),
            (((u >> 8) & 15) - zq).to(tl.float32), (((u >> 12) & 15) - zq).to(tl.float32),
            (((u >> 16) & 15) - zq).to(tl.float32), (((u >> 20) & 15) - zq).to(tl.float32),
            (((u >> 24) & 15) - zq).to(tl.float32), (((u >> 28) & 15) - zq).to(tl.float32))


@triton.jit
def _e2m1_values(u):
    """E2M1 words -> their 8 values as fp32 (dequant.e2m1_bits)."""
    return (e2m1_bits(u & 15), e2m1_bits((u >> 4) & 15), e2m1_bits((u >> 8) & 15), e2m1_bits((u >> 12) & 15),
            e2m1_bits((u >> 16) & 15), e2m1_bits((u >> 20) & 15), e2m1_bits((u >> 24) & 15),
            e2m1_bits((u >> 28) & 15))


@triton.jit
def w4_tile_gemv_kernel(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, y_ptr, part_ptr, cnt_ptr, N, K,
                        stride_wk, stride_sk, stride_zk,
                        ELEM: tl.constexpr, GROUP: tl.constexpr, HAS_ZERO: tl.constexpr, HAS_BIAS: tl.constexpr,
                        SPLIT_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DECODE: tl.constexpr,
                        EVEN: tl.constexpr, EXACT_BF16: tl.constexpr, EVICT: tl.constexpr = False,
                        HX: tl.constexpr = 0):
    """y[0, n] = sum_k x[k] * dequant(W)[n, k] (+ bias) for one row x. Grid (cdiv(N, BLOCK_N), SPLIT_K =
    cdiv(K, BLOCK_K)): program (i, j) takes columns [i*BLOCK_N, +BLOCK_N) over K range [j*BLOCK_K, +BLOCK_K),
    each operand in one load. EVEN: N % BLOCK_N == 0 and K % BLOCK_K == 0 (no masks). EVICT: the words loaded
    evict-first (read once). HX 1 (INT4 with DECODE 3): each word's products in packed f16 (_INT4_HX_PTX)."""
    G: tl.constexpr = BLOCK_K // GROUP
    UJ: tl.constexpr = GROUP // 8
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n3 = offs_n[None, None, :]
    j3 = (pid_k * (BLOCK_K // 8) + tl.arange(0, G)[:, None] * UJ + tl.arange(0, UJ)[None, :])[:, :, None]
    g3 = pid_k * G + tl.arange(0, G)[:, None, None]
    kx = j3 * 8 + tl.arange(0, 8)[None, None, :]                                      # [G, UJ, 8]
    w_ptrs = w_ptr + j3.to(tl.int64) * stride_wk + n3
    if EVEN:
        x = tl.load(x_ptr + kx)
        u = tl.load(w_ptrs, eviction_policy="evict_first" if EVICT else "")
        s = tl.load(s_ptr + g3 * stride_sk + n3)
        z = tl.load(z_ptr + g3 * stride_zk + n3 // 8) if HAS_ZERO else n3
    else:
        n_ok = n3 < N
        x = tl.load(x_ptr + kx, mask=kx < K, other=0.0)
        u = tl.load(w_ptrs, mask=(j3 < K // 8) & n_ok, other=0, eviction_policy="evict_first" if EVICT else "")
        s_ok = (g3 < tl.cdiv(K, GROUP)) & n_ok
        s = tl.load(s_ptr + g3 * stride_sk + n3, mask=s_ok, other=0)
        z = tl.load(z_ptr + g3 * stride_zk + n3 // 8, mask=s_ok, other=0) if HAS_ZERO else n3
    gscale = 1.0
    if ELEM == 2:
        gscale = tl.load(g_ptr)
    if ELEM == INT4 and DECODE == 3 and HX == 1:
        sg = s.to(tl.float32) * 16.0                        # the packed products are x 2**-4
    elif ELEM == INT4:
        sg = s.to(tl.float32)
    elif DECODE == 3:
        sg = group_scales_hw(s, gscale, ELEM) * 64.0       # the word decoder's values are x 2**-6
    else:
        sg = group_scales(s, gscale, ELEM)
    p = _word_sums(u, z, x, n3, ELEM, HAS_ZERO, DECODE, HX) * sg
    acc = tl.sum(tl.reshape(p, [G * UJ, BLOCK_N]), axis=0)
    finish_tile(acc[None, :], part_ptr, cnt_ptr, pid_n, pid_k, b_ptr, y_ptr, tl.arange(0, 1), offs_n, 1, N, N,
                SPLIT_K, HAS_BIAS, EXACT_BF16)
