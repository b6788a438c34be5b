"""Small-batch (decode) products on CUDA cores: y = x @ dequant(W)^T for a few rows of x.

At M = 1..8 a tensor-core tile is mostly padding, and feeding it decoded weights costs layout
shuffles through shared memory; the product is bound by reading the weights. So each program
streams a [BLOCK_N, BLOCK_K] tile of packed weights with vector loads along the storage's
contiguous dim, decodes it in registers, multiplies it with the activation rows broadcast along
N and reduces along K. Scales multiply per-group partial sums (one multiply per group, not per
weight): the products of codes are exact in fp32, so this is closer to the exact product than
the reference, which rounds each dequantized weight to the layer dtype first (relative 2**-9 per
weight, far inside the stated tolerances). Activations of W8A8/W4A4 modes are rounded in the
prologue of each K tile, exactly as oracle-emulation rounds them (no separate launch).

The dense kernel splits K across programs when N alone cannot fill the GPU (dequant.finish_tile
sums the partials in a fixed order); the MoE kernels (moe_gemv.py) reuse `product_tile`.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .dequant import (e2m1_bits, e2m1_decode, e4m3_decode, e8m0_decode, finish_tile, group_scales_hw, quantize_tile,
                      split_range, to_dtype)

#: e2m1 decoders (constexpr DECODE): 0 integer arithmetic (dequant.e2m1_decode, any device and the
#: interpreter); 1 E2M1 bits placed in an E4M3 byte and converted by hardware (values x 2**-6,
#: capability >= 8.9); 2 bits placed in an fp16 (values x 2**-14, subnormals exact); 3 as 1 on
#: whole 32-bit words by inline PTX (_E2M1_WORD_PTX; capability >= 8.9, compiled only: the
#: interpreter has no PTX). DECODE 3 also reads FP8 (_E4M3_WORD_PTX) and GPTQ int4 (_INT4_WORD_PTX)
#: weights a word at a time; it serves activations in the layer dtype only (W8A16, W4A16).
DECODE_INT, DECODE_E4M3, DECODE_F16, DECODE_E4M3_PTX = 0, 1, 2, 3

def _f16x2_to_f32(pairs: list[tuple[str, int, int]]) -> str:
    """PTX lines: each f16x2 register of `pairs` (register, output of its low half, of its high
    half) -> two fp32 outputs."""
    lines = [f".reg .b16 h<{2 * len(pairs)}>;"]
    for i, (reg, lo, hi) in enumerate(pairs):
        lines += [f"mov.b32 {{h{2 * i}, h{2 * i + 1}}}, {reg};", f"cvt.f32.f16 ${lo}, h{2 * i};",
                  f"cvt.f32.f16 ${hi}, h{2 * i + 1};"]
    return "\n".join(lines)


def _e2m1_f16_pairs(word: str) -> list[str]:
    """PTX lines: the E2M1 word `word` -> its 8 values x 2**-6 as the f16 pairs p0..p3 (k 0-1, 2-3, 4-5,
    6-7; registers a, c, lo, hi, p0-p3 (.b32) and l0, l1, m0, m1 (.b16) declared by the caller): the
    nibbles are moved into E4M3 bytes four at a time (mag bits to E4M3's exponent/mantissa, sign to bit
    7; masks stop bits leaking across bytes) and converted two at a time by the hardware (cvt e4m3x2 ->
    f16x2, subnormal 0.5 included)."""
    return [f"shl.b32 a, {word}, 2;", "and.b32 a, a, 0x1C1C1C1C;", f"shl.b32 c, {word}, 4;",
            "and.b32 c, c, 0x80808080;", "or.b32 lo, a, c;", f"shr.b32 a, {word}, 2;", "and.b32 a, a, 0x1C1C1C1C;",
            f"and.b32 c, {word}, 0x80808080;", "or.b32 hi, a, c;", "prmt.b32 p0, lo, hi, 0x5140;",
            "prmt.b32 p1, lo, hi, 0x7362;", "mov.b32 {l0, l1}, p0;", "mov.b32 {m0, m1}, p1;",
            "cvt.rn.f16x2.e4m3x2 p0, l0;", "cvt.rn.f16x2.e4m3x2 p1, l1;", "cvt.rn.f16x2.e4m3x2 p2, m0;",
            "cvt.rn.f16x2.e4m3x2 p3, m1;"]


#: One 32-bit word of packed E2M1 (bytes b0..b3, low nibble first = k order) -> its 8 values as
#: fp32 x 2**-6, in k order (_e2m1_f16_pairs, then each half to fp32).
_E2M1_WORD_PTX = tl.constexpr("{\n.reg .b32 a, c, lo, hi, p0, p1, p2, p3;\n.reg .b16 l0, l1, m0, m1;\n"
                              + "\n".join(_e2m1_f16_pairs("$8")) + "\n"
                              + _f16x2_to_f32([("p0", 0, 1), ("p1", 2, 3), ("p2", 4, 5), ("p3", 6, 7)]) + "\n}")

#: One word of 4 E4M3 bytes (k order) -> 4 fp32 values: two hardware conversions e4m3x2 -> f16x2.
_E4M3_WORD_PTX = tl.constexpr("""{
.reg .b16 a, b;
.reg .b32 p0, p1;
mov.b32 {a, b}, $4;
cvt.rn.f16x2.e4m3x2 p0, a;
cvt.rn.f16x2.e4m3x2 p1, b;
""" + _f16x2_to_f32([("p0", 0, 1), ("p1", 2, 3)]) + "\n}")


def int4_pair_lines(word: str, zero: str) -> str:
    """PTX lines: GPTQ word `word` and zero pair `zero` -> t0..t3 (declared by the caller), the f16 pairs
    {q_i - z, q_i+4 - z} for i = 0..3 (shared by _INT4_WORD_PTX and w4_rowgemv's packed-f16 products)."""
    lines = []
    for i in range(4):
        src = word if i == 0 else f"t{i}"
        if i:
            lines.append(f"shr.b32 t{i}, {word}, {4 * i};")
        lines += [f"and.b32 t{i}, {src}, 0x000F000F;", f"or.b32 t{i}, t{i}, 0x64006400;"]
    return "\n".join(lines + [f"sub.f16x2 t{i}, t{i}, {zero};" for i in range(4)]) + "\n"


#: One GPTQ word (8 nibbles, k order, low first) and its zero point as the fp16 pair
#: {1024 + z, 1024 + z} -> the 8 values q - z as fp32: each nibble pair (i, i + 4) is ORed into
#: the fp16 pair {1024 + q_i, 1024 + q_i+4} and one f16x2 subtraction gives both differences
#: exactly (integers below 2048 are exact in fp16).
_INT4_WORD_PTX = tl.constexpr("""{
.reg .b32 t0, t1, t2, t3;
""" + int4_pair_lines("$8", "$9") + _f16x2_to_f32([("t0", 0, 4), ("t1", 1, 5), ("t2", 2, 6), ("t3", 3, 7)]) + "\n}")


def _e2m1_hx_ptx(words: int) -> str:
    """PTX (HX): `words` E2M1 words ($1..$words, k order) and their activations as f16 (then $: each
    word's k 0-3, then each word's k 4-7, 64-bit words of 4 halves, little-endian) -> the sum of the
    8 x words products x 2**-6, fp32 ($0). Each word is decoded by _e2m1_f16_pairs into 4 f16 pairs
    (k 0-1, 2-3, 4-5, 6-7: the activations' own pairing, so they need no shuffle), multiplied and
    summed by packed f16 FMAs (2 lanes), and the two lanes added in fp32: per word 4 packed
    multiply-adds where the fp32 form needs 8 conversions of the weights, 8 of the activations and 8
    FMAs. The weights are exact in f16 (value x 2**-6, at most 6/64); each lane rounds its products
    and sums to f16's 11 bits, and its 4 x words terms sum to at most words x 0.375 |activation|:
    inside f16's range for every activation f16 holds (|x| <= 65504) with one word, below 43690 with 4."""
    lines = [".reg .b32 a, c, lo, hi, p0, p1, p2, p3, s, x0, x1, x2, x3;", ".reg .b16 l0, l1, m0, m1, h0, h1;",
             ".reg .f32 f0, f1;"]
    for w in range(words):
        lines += _e2m1_f16_pairs(f"${1 + w}")
        lines += [f"mov.b64 {{x0, x1}}, ${1 + words + w};", f"mov.b64 {{x2, x3}}, ${1 + 2 * words + w};",
                  "mul.rn.f16x2 s, p0, x0;" if w == 0 else "fma.rn.f16x2 s, p0, x0, s;",
                  "fma.rn.f16x2 s, p1, x1, s;", "fma.rn.f16x2 s, p2, x2, s;", "fma.rn.f16x2 s, p3, x3, s;"]
    lines += ["mov.b32 {h0, h1}, s;", "cvt.f32.f16 f0, h0;", "cvt.f32.f16 f1, h1;", "add.rn.f32 $0, f0, f1;"]
    return "{\n" + "\n".join(lines) + "\n}"


#: HX 1: one word per call; HX 2: the 4 words of an MX group (one f16 sum per group)
_E2M1_HX_PTX = tl.constexpr(_e2m1_hx_ptx(1))
_E2M1_HX4_PTX = tl.constexpr(_e2m1_hx_ptx(4))
_E2M1_HX4_CONSTRAINTS = tl.constexpr("=r," + ",".join(["r"] * 4 + ["l"] * 8))

#: 4 bf16 activations in a 64-bit word ($1) -> the same 4 values as f16 ($0): each bf16 is the top
#: half of its fp32, and one conversion rounds two fp32 to an f16 pair (exact for |x| in f16's normal
#: range, 2**-14..65504; smaller values keep f16's subnormal steps of 2**-24).
_BF16X4_TO_F16X4_PTX = tl.constexpr("""{
.reg .b32 a, b, t0, t1, t2, t3, o0, o1;
mov.b64 {a, b}, $1;
shl.b32 t0, a, 16;
and.b32 t1, a, 0xFFFF0000;
shl.b32 t2, b, 16;
and.b32 t3, b, 0xFFFF0000;
cvt.rn.f16x2.f32 o0, t1, t0;
cvt.rn.f16x2.f32 o1, t3, t2;
mov.b64 $0, {o0, o1};
}""")


@triton.jit
def _fp4_pair(units, DECODE: tl.constexpr):
    """Packed bytes (low nibble = even k) -> (even, odd) fp32 values, times 2**-6 (DECODE 1, 3),
    2**-14 (DECODE 2) or 1 (DECODE 0); the caller multiplies the power of two back."""
    b = units.to(tl.int32)
    if DECODE == 1:
        lo = (((b & 7) << 2) | ((b & 8) << 4)).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
        hi = (((b >> 2) & 0x1C) | (b & 0x80)).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
    elif DECODE == 2:
        lo = (((b & 7) << 9) | ((b & 8) << 12)).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        hi = (((b & 0x70) << 5) | ((b & 0x80) << 8)).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    else:
        lo = e2m1_decode(b & 15)
        hi = e2m1_decode((b >> 4) & 15)
    return lo, hi


@triton.jit
def _fp8_values(units, HW_FP8: tl.constexpr):
    if HW_FP8:
        return units.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    return e4m3_decode(units.to(tl.int32))


@triton.jit
def round_act(x, amax_rows, xs_ptr, ACT: tl.constexpr, ROWS: tl.constexpr, BLOCK_K: tl.constexpr,
              io_t: tl.constexpr, EXACT_BF16: tl.constexpr):
    """fp32 [ROWS, BLOCK_K] activations rounded through the activation format (ACT != 0) to the values
    the reference multiplies (codes x scales, in the layer dtype)."""
    if ACT == 1:   # 1x128 groups: each group of the tile is its own row for quantize_tile
        G: tl.constexpr = BLOCK_K // 128
        x = tl.reshape(quantize_tile(tl.reshape(x, [ROWS * G, 128]), tl.zeros([ROWS * G], tl.float32), 1,
                                     xs_ptr, ROWS * G, 128), [ROWS, BLOCK_K])
        x = to_dtype(x, io_t, EXACT_BF16).to(tl.float32)
    elif ACT != 0:
        x = to_dtype(quantize_tile(x, amax_rows, ACT, xs_ptr, ROWS, BLOCK_K), io_t, EXACT_BF16).to(tl.float32)
    return x


@triton.jit
def row_amax(a_rows, row_ok, K, ACT: tl.constexpr, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """Per-row amax over all of K (per-token FP8 scales, ACT 2); zeros otherwise."""
    amax = tl.zeros([ROWS], dtype=tl.float32)
    if ACT == 2:
        for t in range(0, tl.cdiv(K, BLOCK_K)):
            offs_k = t * BLOCK_K + tl.arange(0, BLOCK_K)
            xa = tl.load(a_rows + offs_k[None, :], mask=row_ok[:, None] & (offs_k[None, :] < K), other=0.0)
            amax = tl.maximum(amax, tl.max(tl.abs(xa.to(tl.float32)), axis=1))
    return amax


@triton.jit
def tile_zeros(ELEM: tl.constexpr, GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               DECODE: tl.constexpr, KN: tl.constexpr = False, HX: tl.constexpr = 0):
    """The elementwise accumulator of one program (the shape tile_accumulate adds into).

    Products are accumulated element by element over the K loop and reduced once at the end
    (tile_reduce): a reduction per K tile would cost a round of warp shuffles every iteration."""
    # (one return: compiled Triton type-checks every return statement of a function)
    if HX == 2 and DECODE == 3 and not KN and ELEM != 0 and ELEM != 3:     # one sum per scale group
        acc = tl.zeros([BLOCK_N, BLOCK_K // GROUP], dtype=tl.float32)
    elif (ELEM == 3 or KN) and DECODE == 3:
        acc = tl.zeros([BLOCK_K // GROUP, GROUP // 8, BLOCK_N], dtype=tl.float32)
    elif ELEM == 3 or KN:
        acc = tl.zeros([BLOCK_K // GROUP, GROUP // 8, BLOCK_N, 8], dtype=tl.float32)
    elif ELEM == 0 and DECODE == 3:
        acc = tl.zeros([BLOCK_N, BLOCK_K // 4], dtype=tl.float32)
    elif ELEM == 0:
        acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    elif DECODE == 3:
        acc = tl.zeros([BLOCK_N, BLOCK_K // GROUP, GROUP // 8], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_N, BLOCK_K // GROUP, GROUP // 2], dtype=tl.float32)
    return acc


@triton.jit
def tile_reduce(acc, ELEM: tl.constexpr, DECODE: tl.constexpr, KN: tl.constexpr = False, HX: tl.constexpr = 0):
    """[BLOCK_N] sums of an accumulator from tile_zeros (undoing the E2M1 decoders' power of two)."""
    if HX == 2 and DECODE == 3 and not KN and ELEM != 0 and ELEM != 3:
        r = tl.sum(acc, axis=1) * 64.0
    elif KN and DECODE == 3:
        r = tl.sum(tl.sum(acc, axis=1), axis=0) * 64.0
    elif ELEM == 3 and DECODE == 3:
        r = tl.sum(tl.sum(acc, axis=1), axis=0)
    elif ELEM == 3 or KN:
        r = tl.sum(tl.sum(tl.sum(acc, axis=3), axis=1), axis=0)
    elif ELEM == 0:
        r = tl.sum(acc, axis=1)
    else:
        r = tl.sum(tl.sum(acc, axis=2), axis=1)
        if DECODE == 1 or DECODE == 3:
            r = r * 64.0
        elif DECODE == 2:
            r = r * 16384.0
    return r


@triton.jit
def tile_load(a_row, k0, k_end, offs_n, n0, w_ptr, s_ptr, z_ptr, N,
              stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
              ELEM: tl.constexpr, GROUP: tl.constexpr, SCALE_ROWS: tl.constexpr, HAS_ZERO: tl.constexpr,
              ACT: tl.constexpr, DECODE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              KN: tl.constexpr = False, XW: tl.constexpr = False, HX: tl.constexpr = 0,
              FULL: tl.constexpr = False):
    """Every global load of the K tile at k0 (weights, scales, zero points, activations), masked
    at k_end: -> (units, scales, zeros, x, x_odd), unused slots repeat `units`.

    The kernels call it one tile ahead (registers double-buffer the tile): Triton's pipeliner
    stages only loads that feed tl.dot, and a loop that waits for each tile's loads is bound by
    memory latency, not bandwidth. Each format's tile has the shape its scales broadcast over (no
    reshape of the big tile): FP8 [BN, BK]; E2M1 [BN, groups, bytes per group] (DECODE 3: 32-bit
    words per group, activations [groups, words, 8]); GPTQ int4 and KN (E2M1 repacked at load into
    GPTQ's [K/8, N] words, scales [K/group, N]: weights.repack_words) [groups, words per group, BN].

    XW (E2M1 words in the checkpoint layout, DECODE 3; bf16 activation rows 8-byte aligned): the
    activations of each weight word are read as two 64-bit words straight into the registers that
    multiply them (_bf16x4), instead of one [G, UW, 8] tile whose split into the word's 8 operands is a
    layout change through shared memory (4 per K tile: 8 barriers in the sm_90 SASS of the MoE's
    direct kernels; none with XW). HX 1 (with XW: tile_compute's f16 products): x and x_odd are the
    64-bit words of each weight word's activations k 0-3 and 4-7, converted to f16 as loaded (before
    the tile is spread over the rows that share it: each value converted once per program). FULL (E2M1
    words, DECODE 3, not KN; the caller knows the tile ends at or before k_end): no masks along K."""
    n_ok = offs_n < N
    if ELEM == 3 or KN:
        G: tl.constexpr = BLOCK_K // GROUP
        UJ: tl.constexpr = GROUP // 8
        j3 = (k0 // 8 + tl.arange(0, G)[:, None] * UJ + tl.arange(0, UJ)[None, :])[:, :, None]    # [G, UJ, 1]
        n3 = offs_n[None, None, :]
        u = tl.load(w_ptr + j3 * stride_wk + n3 * stride_wn, mask=(j3 < k_end // 8) & (n3 < N), other=0)
        gk = k0 // GROUP + tl.arange(0, G)[:, None, None]                                 # [G, 1, 1]
        smask = (gk < k_end // GROUP) & (n3 < N)
        s = tl.load(s_ptr + gk * stride_sk + n3 * stride_sn, mask=smask, other=0.0)
        if HAS_ZERO:
            z = tl.load(z_ptr + gk * stride_zk + n3 // 8, mask=smask, other=0)
        else:
            z = u
        if DECODE == 3:
            kx = j3 * 8 + tl.arange(0, 8)[None, None, :]                                    # [G, UJ, 8]
        else:
            kx = j3[:, :, :, None] * 8 + tl.arange(0, 8)[None, None, None, :]            # [G, UJ, 1, 8]
        x = tl.load(a_row + kx, mask=kx < k_end, other=0.0)
        x2 = u
    elif ELEM == 0:
        offs_k = k0 + tl.arange(0, BLOCK_K)
        if DECODE == 3:   # whole words: 4 E4M3 values each (W8A16 only)
            jw = k0 // 4 + tl.arange(0, BLOCK_K // 4)
            u = tl.load(w_ptr.to(tl.pointer_type(tl.int32)) + offs_n[:, None] * (stride_wn // 4) + jw[None, :] * stride_wk,
                        mask=n_ok[:, None] & (jw[None, :] < k_end // 4), other=0)
        else:
            u = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :] * stride_wk,
                        mask=n_ok[:, None] & (offs_k[None, :] < k_end), other=0)
        if GROUP == 1:
            s = u
        else:   # BLOCK_N divides SCALE_ROWS: the tile's rows share one row of block scales
            s = tl.load(s_ptr + (n0 // SCALE_ROWS) * stride_sn + (offs_k // GROUP) * stride_sk, mask=offs_k < k_end,
                        other=0.0)
        z = u
        x = tl.load(a_row + offs_k, mask=offs_k < k_end, other=0.0)
        x2 = u
    elif DECODE == 3:   # whole words: 8 E2M1 values each (W4A16 only)
        G4: tl.constexpr = BLOCK_K // GROUP
        UW: tl.constexpr = GROUP // 8
        gg = tl.arange(0, G4)
        jw = k0 // 8 + gg[:, None] * UW + tl.arange(0, UW)[None, :]                      # [G, UW] words
        gk = k0 // GROUP + gg
        if FULL:            # a whole K tile: no masks along K
            u = tl.load(w_ptr.to(tl.pointer_type(tl.int32)) + offs_n[:, None, None] * (stride_wn // 4)
                        + jw[None, :, :] * stride_wk, mask=n_ok[:, None, None], other=0)
            s = tl.load(s_ptr + offs_n[:, None] * stride_sn + gk[None, :] * stride_sk, mask=n_ok[:, None], other=0)
        else:
            u = tl.load(w_ptr.to(tl.pointer_type(tl.int32)) + offs_n[:, None, None] * (stride_wn // 4)
                        + jw[None, :, :] * stride_wk, mask=n_ok[:, None, None] & (jw[None, :, :] < k_end // 8),
                        other=0)
            s = tl.load(s_ptr + offs_n[:, None] * stride_sn + gk[None, :] * stride_sk,
                        mask=n_ok[:, None] & (gk[None, :] < k_end // GROUP), other=0)
        z = u
        if XW and HX != 0:
            a64 = a_row.to(tl.pointer_type(tl.int64))
            q = tl.arange(0, 2)[None, None, :]                                     # one 16-byte load per word
            if FULL:
                xq = tl.load(a64 + jw[:, :, None] * 2 + q)
            else:
                xq = tl.load(a64 + jw[:, :, None] * 2 + q, mask=(jw * 8 < k_end)[:, :, None] & (q < 2), other=0)
            xq = _f16x4(xq)     # as loaded: each value once, before the tile is spread over the rows
            x, x2 = tl.split(xq)
        elif XW:
            km = jw * 8 < k_end
            a64 = a_row.to(tl.pointer_type(tl.int64))
            x0, x1, x2_, x3 = _bf16x4(tl.load(a64 + jw * 2, mask=km, other=0))
            x4, x5, x6, x7 = _bf16x4(tl.load(a64 + jw * 2 + 1, mask=km, other=0))
            x = tl.reshape(tl.join(tl.join(tl.join(x0, x4), tl.join(x2_, x6)), tl.join(tl.join(x1, x5), tl.join(x3, x7))),
                           [G4, UW, 8])                                                       # split8's order
        else:
            kx = jw[:, :, None] * 8 + tl.arange(0, 8)[None, None, :]                       # [G, UW, 8]
            x = tl.load(a_row + kx, mask=kx < k_end, other=0.0)
        if not (XW and HX != 0):
            x2 = u
    else:
        G4: tl.constexpr = BLOCK_K // GROUP
        UG: tl.constexpr = GROUP // 2
        gg = tl.arange(0, G4)
        j2 = k0 // 2 + gg[:, None] * UG + tl.arange(0, UG)[None, :]                      # [G, UG] bytes
        u = tl.load(w_ptr + offs_n[:, None, None] * stride_wn + j2[None, :, :] * stride_wk,
                    mask=n_ok[:, None, None] & (j2[None, :, :] < k_end // 2), other=0)
        gk = k0 // GROUP + gg
        s = tl.load(s_ptr + offs_n[:, None] * stride_sn + gk[None, :] * stride_sk,
                    mask=n_ok[:, None] & (gk[None, :] < k_end // GROUP), other=0)
        z = u
        if ACT == 4:      # NVFP4 activations: one scale per 16 along K = per weight group (GROUP == 16)
            offs16 = k0 + gg[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
            x = tl.load(a_row + offs16, mask=offs16 < k_end, other=0.0)
            x2 = u
        else:
            x = tl.load(a_row + 2 * j2, mask=2 * j2 < k_end, other=0.0)
            x2 = tl.load(a_row + 2 * j2 + 1, mask=2 * j2 + 1 < k_end, other=0.0)
    return u, s, z, x, x2


@triton.jit
def tile_compute(acc, u, s, z, x, x2, amax, xs_ptr, wscale, gscale,
                 ELEM: tl.constexpr, GROUP: tl.constexpr, HAS_ZERO: tl.constexpr, HW_FP8: tl.constexpr,
                 DECODE: tl.constexpr, ACT: tl.constexpr, EXACT_W: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, io_t: tl.constexpr, EXACT_BF16: tl.constexpr, KN: tl.constexpr = False,
                 HX: tl.constexpr = 0):
    """acc + x * dequant(W), elementwise, for one tile from tile_load (reduced once, by tile_reduce).

    wscale: per-channel / per-tensor FP8 weight scales [BLOCK_N] (applied here only under
    EXACT_W; otherwise after the reduction). EXACT_W (W8A8 / W4A4): each weight is dequantized and
    rounded to the layer dtype first, as the reference does, so the next layer's activation
    rounding sees the reference's values. KN (E2M1 words [K/8, N], layer-dtype activations): the
    INT4 tile's structure, E2M1 decoding, one group scale per (group, n) on the word sums. HX (E2M1
    words, DECODE 3, XW): each word's 8 products summed in packed f16 (_E2M1_HX_PTX), then scaled in fp32."""
    if HX == 2 and DECODE == 3 and ELEM != 0 and ELEM != 3 and not KN:
        res = acc + _hx_group_products(u, x[None, :, :], x2[None, :, :]) * _e2m1_scales(s, gscale, ELEM)
    elif HX == 1 and DECODE == 3 and ELEM != 0 and ELEM != 3 and not KN:
        res = acc + _hx_word_products(u, x, x2) * _e2m1_scales(s, gscale, ELEM)[:, :, None]
    elif KN and DECODE == 3:
        res = acc + _fp4_kn_products(u, x) * group_scales_hw(s, gscale, ELEM)
    elif KN:
        i4 = tl.arange(0, 8)[None, None, None, :]
        w = e2m1_bits((u[:, :, :, None] >> (4 * i4)) & 15)
        res = acc + w * _e2m1_scales(s, gscale, ELEM)[:, :, :, None] * x.to(tl.float32)
    elif ELEM == 3 and DECODE == 3:
        if HAS_ZERO:
            n3 = tl.arange(0, BLOCK_N)[None, None, :]
            zpair = (((z >> ((n3 % 8) * 4)) & 15) + 0x6400) * 65537
        else:
            zpair = tl.full(s.shape, 0x64086408, tl.int32)
        res = acc + _int4_word_products(u, tl.broadcast_to(zpair, u.shape), x) * s.to(tl.float32)
    elif ELEM == 3:
        i4 = tl.arange(0, 8)[None, None, None, :]
        # nibble | 0x4B000000 is the float 2**23 + q: q exact after one subtraction (no int->float convert)
        q = (((u[:, :, :, None] >> (4 * i4)) & 15) | 0x4B000000).to(tl.float32, bitcast=True)
        if HAS_ZERO:
            n3 = tl.arange(0, BLOCK_N)[None, None, :]
            zero = ((z >> ((n3 % 8) * 4)) & 15).to(tl.float32) + 8388608.0
        else:
            zero = tl.full(s.shape, 8388616.0, tl.float32)
        res = acc + (q - zero[:, :, :, None]) * s.to(tl.float32)[:, :, :, None] * x.to(tl.float32)
    elif ELEM == 0 and DECODE == 3:
        xf = x.to(tl.float32)
        if GROUP != 1:
            xf = xf * s
        res = acc + _fp8_word_products(u, xf)
    elif ELEM == 0:
        w = _fp8_values(u, HW_FP8)
        xf = x.to(tl.float32)
        if ACT != 0:
            xf = tl.reshape(round_act(tl.reshape(xf, [1, BLOCK_K]), amax, xs_ptr, ACT, 1, BLOCK_K, io_t, EXACT_BF16),
                            [BLOCK_K])
        if GROUP == 1:
            if EXACT_W:
                w = to_dtype(w * wscale[:, None], io_t, EXACT_BF16).to(tl.float32)
            res = acc + w * xf[None, :]
        elif EXACT_W:
            res = acc + to_dtype(w * s[None, :], io_t, EXACT_BF16).to(tl.float32) * xf[None, :]
        else:
            res = acc + w * (xf * s)[None, :]
    elif DECODE == 3:
        res = acc + _fp4_word_products(u, x) * _e2m1_scales(s, gscale, ELEM)[:, :, None]
    else:
        lo, hi = _fp4_pair(u, DECODE)
        if ACT == 4:
            G4: tl.constexpr = BLOCK_K // GROUP
            xg = to_dtype(quantize_tile(x.to(tl.float32), tl.zeros([G4], tl.float32), 4, xs_ptr, G4, GROUP),
                          io_t, EXACT_BF16).to(tl.float32)
            xe, xo = tl.split(tl.reshape(xg, [G4, GROUP // 2, 2]))
        else:
            xe = x.to(tl.float32)
            xo = x2.to(tl.float32)
        sg = _e2m1_scales(s, gscale, ELEM)
        if EXACT_W:       # the reference's weights: value x scale rounded to the layer dtype
            if DECODE == 1 or DECODE == 3:
                sg = sg * 64.0
            elif DECODE == 2:
                sg = sg * 16384.0
            lo = to_dtype(lo * sg[:, :, None], io_t, EXACT_BF16).to(tl.float32)
            hi = to_dtype(hi * sg[:, :, None], io_t, EXACT_BF16).to(tl.float32)
            scale_back = 1.0
            if DECODE == 1 or DECODE == 3:
                scale_back = 1.0 / 64.0
            elif DECODE == 2:
                scale_back = 1.0 / 16384.0
            res = acc + (lo * xe[None, :, :] + hi * xo[None, :, :]) * scale_back
        else:
            res = acc + (lo * xe[None, :, :] + hi * xo[None, :, :]) * sg[:, :, None]
    return res


@triton.jit
def _bf16x4(q):
    """A 64-bit word of 4 bf16 values (little-endian) -> the 4 values as fp32 (a bf16 is the top half of
    its fp32)."""
    lo = q.to(tl.int32)
    hi = (q >> 32).to(tl.int32)
    return ((lo << 16).to(tl.float32, bitcast=True), (lo & -65536).to(tl.float32, bitcast=True),
            (hi << 16).to(tl.float32, bitcast=True), (hi & -65536).to(tl.float32, bitcast=True))


@triton.jit
def _f16x4(q):
    """64-bit words of 4 bf16 values -> the same words as 4 f16 values (_BF16X4_TO_F16X4_PTX)."""
    return tl.inline_asm_elementwise(_BF16X4_TO_F16X4_PTX, "=l,l", [q], dtype=tl.int64, is_pure=True, pack=1)


@triton.jit
def _hx_word_products(u, xa, xb):
    """u [BN, G, UW] E2M1 words, xa / xb [G, UW] their activations k 0-3 / 4-7 (64-bit words of f16) ->
    [BN, G, UW] sums of each word's 8 products, values x 2**-6 (_E2M1_HX_PTX)."""
    return tl.inline_asm_elementwise(_E2M1_HX_PTX, "=r,r,l,l", [u, tl.broadcast_to(xa[None, :, :], u.shape),
                                                              tl.broadcast_to(xb[None, :, :], u.shape)],
                                     dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _split4(t):
    """[..., 4] -> its 4 slices along the last dim (order 0, 2, 1, 3: any order serves a sum whose
    operands are split alike)."""
    a, b = tl.split(tl.reshape(t, t.shape[:-1] + [2, 2]))
    a0, a1 = tl.split(a)
    b0, b1 = tl.split(b)
    return a0, a1, b0, b1


@triton.jit
def _hx_group_products(u, xa, xb):
    """HX 2: u [..., G, 4] E2M1 words (one MX group per [..., g]), xa / xb their activations k 0-3 / 4-7
    (64-bit words of f16) in a shape that broadcasts to u's (e.g. [1, G, 4] for one row) -> [..., G]
    sums of each group's 32 products, values x 2**-6."""
    u0, u1, u2, u3 = _split4(u)
    a0, a1, a2, a3 = _split4(xa)
    b0, b1, b2, b3 = _split4(xb)
    return tl.inline_asm_elementwise(
        _E2M1_HX4_PTX, _E2M1_HX4_CONSTRAINTS,
        [u0, u1, u2, u3, tl.broadcast_to(a0, u0.shape), tl.broadcast_to(a1, u0.shape),
         tl.broadcast_to(a2, u0.shape), tl.broadcast_to(a3, u0.shape),
         tl.broadcast_to(b0, u0.shape), tl.broadcast_to(b1, u0.shape),
         tl.broadcast_to(b2, u0.shape), tl.broadcast_to(b3, u0.shape)],
        dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _e2m1_scales(s, gscale, ELEM: tl.constexpr):
    """Raw group scales -> fp32: E8M0 (MXFP4) or E4M3 times the tensor's global scale (NVFP4)."""
    if ELEM == 1:
        sg = e8m0_decode(s.to(tl.int32))
    else:
        sg = e4m3_decode(s.to(tl.int32)) * gscale
    return sg


@triton.jit
def _fp8_word_products(u, x):
    """u [BN, BK/4] words of E4M3 bytes, x [BK] fp32 -> [BN, BK/4] sums of each word's 4 products."""
    w0, w1, w2, w3 = tl.inline_asm_elementwise(_E4M3_WORD_PTX, "=r,=r,=r,=r,r", [u], dtype=(tl.float32,) * 4,
                                               is_pure=True, pack=1)
    xa, xb = tl.split(tl.reshape(x, [x.shape[0] // 4, 2, 2]))      # k = 4j + (0, 2) | (1, 3)
    x0, x2 = tl.split(xa)
    x1, x3 = tl.split(xb)
    return w0 * x0[None, :] + w1 * x1[None, :] + w2 * x2[None, :] + w3 * x3[None, :]


@triton.jit
def _int4_word_products(u, zpair, x):
    """u [G, UJ, BN] GPTQ words, zpair the fp16 pairs {1024 + z, 1024 + z} of the same shape, x
    [G, UJ, 8] (k order) -> [G, UJ, BN] sums of (q - z) x activation over each word's 8 values."""
    w0, w1, w2, w3, w4, w5, w6, w7 = tl.inline_asm_elementwise(
        _INT4_WORD_PTX, "=r,=r,=r,=r,=r,=r,=r,=r,r,r", [u, zpair], dtype=(tl.float32,) * 8, is_pure=True, pack=1)
    x0, x1, x2, x3, x4, x5, x6, x7 = split8(x.to(tl.float32))
    return (w0 * x0[:, :, None] + w1 * x1[:, :, None] + w2 * x2[:, :, None] + w3 * x3[:, :, None]
            + w4 * x4[:, :, None] + w5 * x5[:, :, None] + w6 * x6[:, :, None] + w7 * x7[:, :, None])


@triton.jit
def _fp4_kn_products(u, x):
    """u [G, UJ, BN] E2M1 words (N contiguous: weights.repack_words), x [G, UJ, 8] (k order) ->
    [G, UJ, BN] sums of each word's 8 value x activation products, values x 2**-6 (_E2M1_WORD_PTX):
    the activations broadcast along N, as in the INT4 GEMV (no reshuffle through shared memory)."""
    w0, w1, w2, w3, w4, w5, w6, w7 = tl.inline_asm_elementwise(
        _E2M1_WORD_PTX, "=r,=r,=r,=r,=r,=r,=r,=r,r", [u], dtype=(tl.float32,) * 8, is_pure=True, pack=1)
    x0, x1, x2, x3, x4, x5, x6, x7 = split8(x.to(tl.float32))
    return (w0 * x0[:, :, None] + w1 * x1[:, :, None] + w2 * x2[:, :, None] + w3 * x3[:, :, None]
            + w4 * x4[:, :, None] + w5 * x5[:, :, None] + w6 * x6[:, :, None] + w7 * x7[:, :, None])


@triton.jit
def split8(x):
    """[A, B, 8] -> its 8 slices [A, B] along the last dim, in order."""
    xa, xb = tl.split(tl.reshape(x, [x.shape[0], x.shape[1], 2, 2, 2]))      # even, odd index
    xa0, xa1 = tl.split(xa)
    xb0, xb1 = tl.split(xb)
    x0, x4 = tl.split(xa0)
    x2, x6 = tl.split(xa1)
    x1, x5 = tl.split(xb0)
    x3, x7 = tl.split(xb1)
    return x0, x1, x2, x3, x4, x5, x6, x7


@triton.jit
def _fp4_word_products(u, x):
    """sum over the 8 values of each word of value x activation: u [BN, G, UW] words, x [G, UW, 8]
    (k order) -> [BN, G, UW], values x 2**-6 (_E2M1_WORD_PTX)."""
    w0, w1, w2, w3, w4, w5, w6, w7 = tl.inline_asm_elementwise(
        _E2M1_WORD_PTX, "=r,=r,=r,=r,=r,=r,=r,=r,r", [u], dtype=(tl.float32,) * 8, is_pure=True, pack=1)
    x0, x1, x2, x3, x4, x5, x6, x7 = split8(x.to(tl.float32))
    return (w0 * x0[None, :, :] + w1 * x1[None, :, :] + w2 * x2[None, :, :] + w3 * x3[None, :, :]
            + w4 * x4[None, :, :] + w5 * x5[None, :, :] + w6 * x6[None, :, :] + w7 * x7[None, :, :])


@triton.jit
def row_products(acc, a_row, t0, t1, K, amax, xs_ptr, offs_n, w_ptr, s_ptr, z_ptr, wscale, gscale, N,
                 stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                 ELEM: tl.constexpr, GROUP: tl.constexpr, SCALE_ROWS: tl.constexpr, HAS_ZERO: tl.constexpr,
                 HW_FP8: tl.constexpr, DECODE: tl.constexpr, ACT: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, io_t: tl.constexpr, EXACT_BF16: tl.constexpr, KN: tl.constexpr = False,
                 XW: tl.constexpr = False, HX: tl.constexpr = 0, TAIL: tl.constexpr = False,
                 PAIRS: tl.constexpr = False):
    """acc + the products of K tiles t0..t1-1 of one activation row with rows offs_n of W, with the
    next tile's loads in flight while a tile is computed (two tiles ahead measured slower on an
    H200, 2026-12-02 R8: the extra registers cost more than the latency they hide). TAIL (tile_load's
    FULL applies): the whole K tiles in a loop of unmasked loads, then the last whole tile and the
    partial one, if any, masked. PAIRS: that last loop two tiles per iteration, the two buffers
    alternating: with one tile per iteration the sm_90 SASS copies the next tile's registers into the
    current tile's at the loop's end, and the copy waits for the loads just issued."""
    n0 = tl.min(offs_n, axis=0)
    k_end = tl.minimum(K, t1 * BLOCK_K)
    u, s, z, x, x2 = tile_load(a_row, t0 * BLOCK_K, k_end, offs_n, n0, w_ptr, s_ptr, z_ptr, N,
                               stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                               ELEM, GROUP, SCALE_ROWS, HAS_ZERO, ACT, DECODE, BLOCK_N, BLOCK_K, KN, XW, HX)
    if TAIL:        # whole tiles first, their loads unmasked; the partial last tile (if any) after them
        t_full = tl.maximum(t0, k_end // BLOCK_K)
        for t in range(t0, t_full - 1):
            un, sn, zn, xn, x2n = tile_load(a_row, (t + 1) * BLOCK_K, k_end, offs_n, n0, w_ptr, s_ptr, z_ptr, N,
                                            stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM, GROUP,
                                            SCALE_ROWS, HAS_ZERO, ACT, DECODE, BLOCK_N, BLOCK_K, KN, XW, HX, True)
            acc = tile_compute(acc, u, s, z, x, x2, amax, xs_ptr, wscale, gscale, ELEM, GROUP, HAS_ZERO, HW_FP8,
                               DECODE, ACT, ACT != 0, BLOCK_N, BLOCK_K, io_t, EXACT_BF16, KN, HX)
            u, s, z, x, x2 = un, sn, zn, xn, x2n
        t0 = tl.maximum(t0, t_full - 1)            # the tile in u; the loop below takes it and the tail
    if PAIRS:       # two tiles per iteration, the buffers alternating (a tile past t1 is masked off: zeros)
        for t in range(t0, t1, 2):
            ub, sb, zb, xb, x2b = tile_load(a_row, (t + 1) * BLOCK_K, k_end, offs_n, n0, w_ptr, s_ptr, z_ptr, N,
                                            stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM, GROUP,
                                            SCALE_ROWS, HAS_ZERO, ACT, DECODE, BLOCK_N, BLOCK_K, KN, XW, HX)
            acc = tile_compute(acc, u, s, z, x, x2, amax, xs_ptr, wscale, gscale, ELEM, GROUP, HAS_ZERO, HW_FP8,
                               DECODE, ACT, ACT != 0, BLOCK_N, BLOCK_K, io_t, EXACT_BF16, KN, HX)
            u, s, z, x, x2 = tile_load(a_row, (t + 2) * BLOCK_K, k_end, offs_n, n0, w_ptr, s_ptr, z_ptr, N,
                                       stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM, GROUP,
                                       SCALE_ROWS, HAS_ZERO, ACT, DECODE, BLOCK_N, BLOCK_K, KN, XW, HX)
            acc = tile_compute(acc, ub, sb, zb, xb, x2b, amax, xs_ptr, wscale, gscale, ELEM, GROUP, HAS_ZERO, HW_FP8,
                               DECODE, ACT, ACT != 0, BLOCK_N, BLOCK_K, io_t, EXACT_BF16, KN, HX)
    else:
        for t in range(t0, t1):
            un, sn, zn, xn, x2n = tile_load(a_row, (t + 1) * BLOCK_K, k_end, offs_n, n0, w_ptr, s_ptr, z_ptr, N,
                                            stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                                            ELEM, GROUP, SCALE_ROWS, HAS_ZERO, ACT, DECODE, BLOCK_N, BLOCK_K, KN, XW, HX)
            acc = tile_compute(acc, u, s, z, x, x2, amax, xs_ptr, wscale, gscale, ELEM, GROUP, HAS_ZERO, HW_FP8,
                               DECODE, ACT, ACT != 0, BLOCK_N, BLOCK_K, io_t, EXACT_BF16, KN, HX)
            u, s, z, x, x2 = un, sn, zn, xn, x2n
    return acc


@triton.jit
def channel_scales(s_ptr, offs_n, N, stride_sn, ELEM: tl.constexpr, GROUP: tl.constexpr):
    """Per-channel / per-tensor FP8 weight scales ([BLOCK_N], stride 0 for one per tensor); 1 elsewhere."""
    if ELEM == 0 and GROUP == 1:
        r = tl.load(s_ptr + offs_n * stride_sn, mask=offs_n < N, other=0.0)
    else:
        r = tl.full(offs_n.shape, 1.0, tl.float32)
    return r


@triton.jit
def finish_row(acc, wscale, ELEM: tl.constexpr, DECODE: tl.constexpr, EXACT_W: tl.constexpr,
               KN: tl.constexpr = False, HX: tl.constexpr = 0):
    """[BLOCK_N] results of a row's elementwise accumulator: reduced, then channel scales (unless
    EXACT_W applied them to each weight)."""
    r = tile_reduce(acc, ELEM, DECODE, KN, HX)
    if not EXACT_W:
        r = r * wscale
    return r


@triton.jit
def gemv_kernel(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, xs_ptr, y_ptr, part_ptr, cnt_ptr,
                N, K, stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                ELEM: tl.constexpr, GROUP: tl.constexpr, SCALE_ROWS: tl.constexpr, HAS_ZERO: tl.constexpr,
                HAS_BIAS: tl.constexpr, ACT: tl.constexpr, SPLIT_K: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, HW_FP8: tl.constexpr, DECODE: tl.constexpr,
                EXACT_BF16: tl.constexpr, OUT_F16: tl.constexpr, KN: tl.constexpr = False):
    """One activation row (M = 1). Grid (N / BLOCK_N, 1, SPLIT_K). KN: E2M1 weights in GPTQ's
    [K/8, N] word layout (weights.repack_words), read like INT4's."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(2)
    io_t = tl.float16 if OUT_F16 else tl.bfloat16
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    amax = row_amax(x_ptr + tl.zeros([1, 1], tl.int32), tl.full([1], 1, tl.int1), K, ACT, 1, BLOCK_K)
    t0, t1 = split_range(K, BLOCK_K, SPLIT_K, pid_k)
    gscale = 1.0
    if ELEM == 2:
        gscale = tl.load(g_ptr)
    wscale = channel_scales(s_ptr, offs_n, N, stride_sn, ELEM, GROUP)
    acc = row_products(tile_zeros(ELEM, GROUP, BLOCK_N, BLOCK_K, DECODE, KN), x_ptr, t0, t1, K, amax, xs_ptr, offs_n,
                       w_ptr, s_ptr, z_ptr, wscale, gscale, N, stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                       ELEM, GROUP, SCALE_ROWS, HAS_ZERO, HW_FP8, DECODE, ACT, BLOCK_N, BLOCK_K, io_t, EXACT_BF16, KN)
    y = finish_row(acc, wscale, ELEM, DECODE, ACT != 0, KN)
    finish_tile(y[None, :], part_ptr, cnt_ptr, pid_n, pid_k, b_ptr, y_ptr, tl.arange(0, 1), offs_n,
                1, N, N, SPLIT_K, HAS_BIAS, EXACT_BF16)
