"""One-row NVFP4 W4A4 MoE (decode, config key XQ): exact BF16 weights looked up in a byte table per scale group.

The W4A4 reference (oracle-emulation) multiplies BF16 weights (E2M1 value x E4M3 block scale x global scale,
rounded to the layer dtype) with activations rounded through NVFP4 (an E4M3 scale per 16 values and a
per-tensor scale). moe_gemv's one-row path does it in every program and K tile: the activation tile
re-quantized, each weight decoded, scaled and rounded in fp32: ~21 sm_90 instructions per weight in FC2's
loop, bound by instruction issue (0.6-0.8 TB/s on an H200). Here:
- the activations are rounded once per call (nvfp4_round_kernel: the per-tensor scale and the rounded
  values in one program), so the K loops read BF16 values;
- a weight's BF16 value depends only on its 3-bit magnitude code and its group's scale S = s x g: each
  magnitude is p or 1.5 p with p a power of two (0.5, 1, 2, 4 and 1.5, 3, 6), and bf16(p x X) = p x bf16(X),
  so a group's 8 BF16 patterns are bf16(p x S) and bf16(p x 1.5 s x g) (the reference's own products:
  E2M1 x E4M3 is exact, then x g in fp32). They are built once per (row, group) as byte tables, two
  registers of low bytes and two of high bytes (_TABLE_PTX), and each 32-bit word of 8 codes is looked up
  with PRMT, 4 codes per instruction, its sign bits XORed in (_WORD_PTX): ~30 instructions for 8 exact
  weights. The interpreter (no PTX) computes the same values with Triton arithmetic (PTX False).
"""
from __future__ import annotations

import triton
import triton.language as tl

from .dequant import e4m3_decode, expert_operands, finish_tile, quantize_tile, to_dtype
from .gemv import _bf16x4
from .moe_gemv import _up_epilogue
from .moe_kernels import _activate, gate_up_rows

#: fp32 S_A = s x g and S_B = (1.5 s) x g (bits, $4 $5) -> the byte tables of the 8 magnitudes' BF16 patterns
#: E0..E7 = 0, bf16(0.5 S_A), bf16(S_A), bf16(S_B), bf16(2 S_A), bf16(2 S_B), bf16(4 S_A), bf16(4 S_B): $0 / $1
#: the low bytes of E0-E3 / E4-E7, $2 / $3 their high bytes (cvt.rn.bf16x2.f32 puts its first operand high).
_TABLE_PTX = tl.constexpr("""{
.reg .f32 a, b, z;
.reg .b32 p01, p23, p45, p67;
mov.f32 z, 0f00000000;
mul.rn.f32 a, $4, 0f3F000000;
cvt.rn.bf16x2.f32 p01, a, z;
cvt.rn.bf16x2.f32 p23, $5, $4;
mul.rn.f32 a, $4, 0f40000000;
mul.rn.f32 b, $5, 0f40000000;
cvt.rn.bf16x2.f32 p45, b, a;
mul.rn.f32 a, $4, 0f40800000;
mul.rn.f32 b, $5, 0f40800000;
cvt.rn.bf16x2.f32 p67, b, a;
prmt.b32 $0, p01, p23, 0x6420;
prmt.b32 $1, p45, p67, 0x6420;
prmt.b32 $2, p01, p23, 0x7531;
prmt.b32 $3, p45, p67, 0x7531;
}""")


def _word_ptx() -> str:
    """PTX: one word of 8 E2M1 codes ($8, k order, low nibble first) and its group's tables ($9 $10 low bytes,
    $11 $12 high bytes) -> the 8 weights as fp32 ($0..$7). PRMT selects bytes by the 4 nibbles of its selector
    (bit 3 of a nibble is a mode bit, so the sign is masked off first); the looked-up low and high bytes are
    interleaved into BF16 pairs, the codes' signs (bit 3 of each nibble) moved to bits 15 and 31 of each pair
    and XORed in, and each half widened to fp32 (a BF16 is the top half of its fp32)."""
    lines = [".reg .b32 m, sh, l0, h0, l1, h1, se, so, p, q;",
             "and.b32 m, $8, 0x77777777;", "prmt.b32 l0, $9, $10, m;", "prmt.b32 h0, $11, $12, m;",
             "shr.b32 sh, m, 16;", "prmt.b32 l1, $9, $10, sh;", "prmt.b32 h1, $11, $12, sh;",
             "shl.b32 se, $8, 4;", "and.b32 se, se, 0x80808080;",     # even codes' signs: bit 7 of byte j
             "and.b32 so, $8, 0x80808080;"]                           # odd codes' signs
    for j in range(4):          # pair j: codes 2j (low half), 2j + 1 (high half)
        lo, hi = ("l0", "h0") if j < 2 else ("l1", "h1")
        lines += [f"prmt.b32 p, {lo}, {hi}, {'0x5140' if j % 2 == 0 else '0x7362'};",
                  f"prmt.b32 q, se, so, 0x{4 + j:x}{j:x}{j:x}{j:x};", "and.b32 q, q, 0x80008000;", "xor.b32 p, p, q;",
                  f"shl.b32 ${2 * j}, p, 16;", f"and.b32 ${2 * j + 1}, p, 0xFFFF0000;"]
    return "{\n" + "\n".join(lines) + "\n}"


_WORD_PTX = tl.constexpr(_word_ptx())


@triton.jit
def _value(u, j: tl.constexpr, sa, sb, EXACT_BF16: tl.constexpr):
    """Code j of words u as its BF16 weight in fp32 (the interpreter's form of _WORD_PTX)."""
    c = (u >> (4 * j)) & 15
    mag = c & 7
    p = tl.where(mag >= 6, 4.0, tl.where(mag >= 4, 2.0, tl.where(mag >= 2, 1.0, tl.where(mag == 1, 0.5, 0.0))))
    w = to_dtype(p * tl.where((mag > 2) & ((mag & 1) == 1), sb, sa), tl.bfloat16, EXACT_BF16).to(tl.float32)
    return tl.where((c & 8) != 0, -w, w)


@triton.jit
def _tile(acc, u, s, xa, xb, gscale, PTX: tl.constexpr, EXACT_BF16: tl.constexpr):
    """acc [BN, G, 2] + each word's 8 products: u [BN, G, 2] words, s [BN, G] E4M3 group scales, xa / xb [G, 2]
    the words' activations k 0-3 / 4-7 (64-bit words of 4 BF16)."""
    if PTX:
        sv = s.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    else:
        sv = e4m3_decode(s.to(tl.int32))
    sa = sv * gscale
    sb = (sv * 1.5) * gscale
    x0, x1, x2, x3 = _bf16x4(xa)
    x4, x5, x6, x7 = _bf16x4(xb)
    if PTX:
        t0, t1, t2, t3 = tl.inline_asm_elementwise(_TABLE_PTX, "=r,=r,=r,=r,r,r",
                                                   [sa.to(tl.int32, bitcast=True), sb.to(tl.int32, bitcast=True)],
                                                   dtype=(tl.int32,) * 4, is_pure=True, pack=1)
        w0, w1, w2, w3, w4, w5, w6, w7 = tl.inline_asm_elementwise(
            _WORD_PTX, "=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r",
            [u, tl.broadcast_to(t0[:, :, None], u.shape), tl.broadcast_to(t1[:, :, None], u.shape),
             tl.broadcast_to(t2[:, :, None], u.shape), tl.broadcast_to(t3[:, :, None], u.shape)],
            dtype=(tl.float32,) * 8, is_pure=True, pack=1)
    else:
        sa3 = sa[:, :, None]
        sb3 = sb[:, :, None]
        w0 = _value(u, 0, sa3, sb3, EXACT_BF16)
        w1 = _value(u, 1, sa3, sb3, EXACT_BF16)
        w2 = _value(u, 2, sa3, sb3, EXACT_BF16)
        w3 = _value(u, 3, sa3, sb3, EXACT_BF16)
        w4 = _value(u, 4, sa3, sb3, EXACT_BF16)
        w5 = _value(u, 5, sa3, sb3, EXACT_BF16)
        w6 = _value(u, 6, sa3, sb3, EXACT_BF16)
        w7 = _value(u, 7, sa3, sb3, EXACT_BF16)
    return acc + (w0 * x0[None, :, :] + w1 * x1[None, :, :] + w2 * x2[None, :, :] + w3 * x3[None, :, :]
                  + w4 * x4[None, :, :] + w5 * x5[None, :, :] + w6 * x6[None, :, :] + w7 * x7[None, :, :])


@triton.jit
def _load(a64, k0, k_end, n, w_ptr, s_ptr, N, stride_wn, stride_sn, BLOCK_K: tl.constexpr):
    """The K tile at k0 (masked at k_end): words [BN, G, 2], E4M3 scales [BN, G], activation words [G, 2] x 2."""
    G: tl.constexpr = BLOCK_K // 16
    gg = tl.arange(0, G)
    jw = k0 // 8 + gg[:, None] * 2 + tl.arange(0, 2)[None, :]
    gk = k0 // 16 + gg
    n_ok = n < N
    kw = jw < k_end // 8
    u = tl.load(w_ptr.to(tl.pointer_type(tl.int32)) + n[:, None, None] * (stride_wn // 4) + jw[None, :, :],
                mask=n_ok[:, None, None] & kw[None, :, :], other=0)
    s = tl.load(s_ptr + n[:, None] * stride_sn + gk[None, :], mask=n_ok[:, None] & (gk < k_end // 16)[None, :],
                other=0)
    xa = tl.load(a64 + jw * 2, mask=kw, other=0)
    xb = tl.load(a64 + jw * 2 + 1, mask=kw, other=0)
    return u, s, xa, xb


@triton.jit
def _rows(acc_g, acc_u, a64, K, n_g, n_u, w_e, s_e, gscale, N_W, stride_wn, stride_sn, GATED: tl.constexpr,
          BLOCK_K: tl.constexpr, PTX: tl.constexpr, EXACT_BF16: tl.constexpr, PAIRS: tl.constexpr):
    """The products of the whole K of one activation row with rows n_g (and n_u, GATED: the activations
    shared), the next tile's loads in flight while a tile is multiplied; PAIRS: two tiles per iteration, the
    buffers alternating (no register copy at the loop's end that waits for the loads just issued)."""
    ku = K
    if not GATED:
        ku = 0                  # the up loads all masked off
    ug, sg, xa, xb = _load(a64, 0, K, n_g, w_e, s_e, N_W, stride_wn, stride_sn, BLOCK_K)
    uu, su, _, _ = _load(a64, 0, ku, n_u, w_e, s_e, N_W, stride_wn, stride_sn, BLOCK_K)
    if PAIRS:
        for k0 in range(0, K, 2 * BLOCK_K):
            ugb, sgb, xab, xbb = _load(a64, k0 + BLOCK_K, K, n_g, w_e, s_e, N_W, stride_wn, stride_sn, BLOCK_K)
            uub, sub, _, _ = _load(a64, k0 + BLOCK_K, ku, n_u, w_e, s_e, N_W, stride_wn, stride_sn, BLOCK_K)
            acc_g = _tile(acc_g, ug, sg, xa, xb, gscale, PTX, EXACT_BF16)
            if GATED:
                acc_u = _tile(acc_u, uu, su, xa, xb, gscale, PTX, EXACT_BF16)
            ug, sg, xa, xb = _load(a64, k0 + 2 * BLOCK_K, K, n_g, w_e, s_e, N_W, stride_wn, stride_sn, BLOCK_K)
            uu, su, _, _ = _load(a64, k0 + 2 * BLOCK_K, ku, n_u, w_e, s_e, N_W, stride_wn, stride_sn, BLOCK_K)
            acc_g = _tile(acc_g, ugb, sgb, xab, xbb, gscale, PTX, EXACT_BF16)
            if GATED:
                acc_u = _tile(acc_u, uub, sub, xab, xbb, gscale, PTX, EXACT_BF16)
    else:
        for k0 in range(0, K, BLOCK_K):
            ugn, sgn, xan, xbn = _load(a64, k0 + BLOCK_K, K, n_g, w_e, s_e, N_W, stride_wn, stride_sn, BLOCK_K)
            uun, sun, _, _ = _load(a64, k0 + BLOCK_K, ku, n_u, w_e, s_e, N_W, stride_wn, stride_sn, BLOCK_K)
            acc_g = _tile(acc_g, ug, sg, xa, xb, gscale, PTX, EXACT_BF16)
            if GATED:
                acc_u = _tile(acc_u, uu, su, xa, xb, gscale, PTX, EXACT_BF16)
            ug, sg, xa, xb = ugn, sgn, xan, xbn
            uu, su = uun, sun
    return acc_g, acc_u


@triton.jit
def moe_w4a4_up_kernel(a_ptr, ids_ptr, w_ptr, s_ptr, g_ptr, b_ptr, out_ptr, E, TOPK, N_OUT, N_W, K, stride_am,
                       stride_om, stride_we, stride_se, stride_be, stride_wn, stride_sn, limit, alpha, beta, lbeta,
                       ACTFN: tl.constexpr, GATED: tl.constexpr, INTERLEAVED: tl.constexpr, HAS_LIMIT: tl.constexpr,
                       A_BY_PAIR: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr, PTX: tl.constexpr, EXACT_BF16: tl.constexpr, OUT_F16: tl.constexpr,
                       PAIRS: tl.constexpr = False):
    """FC1, grid (pairs, I / BLOCK_N): a_ptr the rounded activations (nvfp4_round_kernel; rows 8-byte
    aligned), out [pairs, I] = act(gate, up) in the layer dtype (moe_gemv._up_epilogue)."""
    pair = tl.program_id(0)
    j = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    io_t = tl.float16 if OUT_F16 else tl.bfloat16
    e = tl.load(ids_ptr + pair).to(tl.int32)
    valid = (e >= 0) & (e < E)
    e = tl.where(valid, e, 0)
    if A_BY_PAIR:
        arow = pair
    else:
        arow = pair // TOPK
    a64 = (a_ptr + arow.to(tl.int64) * stride_am).to(tl.pointer_type(tl.int64))
    n_g, n_u = gate_up_rows(j, N_OUT, GATED, INTERLEAVED)
    acc_g = tl.zeros([BLOCK_N, BLOCK_K // 16, 2], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_N, BLOCK_K // 16, 2], dtype=tl.float32)
    if valid:
        w_e, s_e, _, gscale = expert_operands(e, w_ptr, s_ptr, s_ptr, g_ptr, stride_we, stride_se, 0, 2)
        acc_g, acc_u = _rows(acc_g, acc_u, a64, K, n_g, n_u, w_e, s_e, gscale, N_W, stride_wn, stride_sn, GATED,
                             BLOCK_K, PTX, EXACT_BF16, PAIRS)
    g = tl.sum(tl.sum(acc_g, axis=2), axis=1)
    u = tl.sum(tl.sum(acc_u, axis=2), axis=1)
    if not GATED:
        u = g
    _up_epilogue(g, u, valid, e.to(tl.int64), b_ptr, stride_be, n_g, n_u, j < N_OUT, out_ptr,
                 out_ptr + pair.to(tl.int64) * stride_om + j, limit, alpha, beta, lbeta, ACTFN, GATED, HAS_LIMIT,
                 HAS_BIAS, io_t, EXACT_BF16)


@triton.jit
def moe_w4a4_down_kernel(a_ptr, ids_ptr, topw_ptr, w_ptr, s_ptr, g_ptr, b_ptr, out_ptr, part_ptr, cnt_ptr, M, E, TOPK,
                         N, K, stride_am, stride_om, stride_we, stride_se, stride_be, stride_wn, stride_sn,
                         WEIGHT_OUT: tl.constexpr, HAS_BIAS: tl.constexpr, SPLIT: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PTX: tl.constexpr, EXACT_BF16: tl.constexpr,
                         OUT_F16: tl.constexpr, PAIRS: tl.constexpr = False):
    """FC2, grid (M, H / BLOCK_N, top_k) as moe_gemv.moe_down_kernel: a_ptr the rounded FC1 outputs (one row
    per pair), the slots summed in slot order by the last to arrive (dequant.finish_tile; SPLIT = top_k)."""
    m = tl.program_id(0)
    pid_n = tl.program_id(1)
    slot = tl.program_id(2)
    io_t = tl.float16 if OUT_F16 else tl.bfloat16
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    pair = m * TOPK + slot
    e = tl.load(ids_ptr + pair).to(tl.int32)
    acc = tl.zeros([1, BLOCK_N], dtype=tl.float32)
    if (e >= 0) & (e < E):
        a64 = (a_ptr + pair.to(tl.int64) * stride_am).to(tl.pointer_type(tl.int64))
        w_e, s_e, _, gscale = expert_operands(e, w_ptr, s_ptr, s_ptr, g_ptr, stride_we, stride_se, 0, 2)
        zero = tl.zeros([BLOCK_N, BLOCK_K // 16, 2], dtype=tl.float32)
        r, _ = _rows(zero, zero, a64, K, offs_n, offs_n, w_e, s_e, gscale, N, stride_wn, stride_sn, False, BLOCK_K,
                     PTX, EXACT_BF16, PAIRS)
        acc = tl.sum(tl.sum(r, axis=2), axis=1)[None, :]
        if HAS_BIAS:
            acc += tl.load(b_ptr + e.to(tl.int64) * stride_be + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
        acc = to_dtype(acc, io_t, EXACT_BF16).to(tl.float32)        # the reference rounds FC2's output
        if WEIGHT_OUT:
            acc = acc * tl.load(topw_ptr + pair)
    finish_tile(acc, part_ptr, cnt_ptr, m * tl.num_programs(1) + pid_n, slot, b_ptr, out_ptr, m + tl.arange(0, 1),
                offs_n, M, N, stride_om, SPLIT, False, EXACT_BF16)


@triton.jit
def nvfp4_round_kernel(x_ptr, out_ptr, xs_ptr, numel, BLOCK: tl.constexpr, EXACT_BF16: tl.constexpr):
    """x (numel contiguous values) rounded through NVFP4 with its dynamic per-tensor scale, in one program:
    the scale (amax / (6 x 448), 1 where the amax is 0: gemm.tensor_scale_kernel's) to xs_ptr, then the
    values (dequant.quantize_tile's, ACT 4, which reads the scale back) to out in its dtype."""
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, numel, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        amax = tl.maximum(amax, tl.abs(tl.load(x_ptr + offs, mask=offs < numel, other=0.0).to(tl.float32)))
    gs = tl.math.div_rn(tl.max(amax, axis=0), 2688.0)
    tl.store(xs_ptr, tl.where(gs > 0, gs, 1.0))
    tl.debug_barrier()              # (the store is visible to the whole program after the barrier)
    for start in range(0, numel, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < numel, other=0.0).to(tl.float32)
        q = quantize_tile(tl.reshape(x, [1, BLOCK]), tl.zeros([1], tl.float32), 4, xs_ptr, 1, BLOCK)
        tl.store(out_ptr + offs, to_dtype(tl.reshape(q, [BLOCK]), out_ptr.dtype.element_ty, EXACT_BF16),
                 mask=offs < numel)


@triton.jit
def _act_values(y_ptr, ids_ptr, offs, ok, E, I, stride_y, limit, alpha, beta, lbeta, ACTFN: tl.constexpr,
                GATED: tl.constexpr, INTERLEAVED: tl.constexpr, HAS_LIMIT: tl.constexpr, io_t: tl.constexpr,
                EXACT_BF16: tl.constexpr, IDS_FIRST: tl.constexpr = False):
    """FC2's inputs at flat indices offs of [pairs, I]: the activation of FC1's rounded gate / up outputs (y_ptr
    [pairs, N_W], in the layer dtype, bias added), rounded to the layer dtype (moe_gemv._up_epilogue's values;
    zeros for a pair whose expert id is outside [0, E)). IDS_FIRST (moe_ws's block rows, a third of them padding
    or unused blocks): the ids first and only valid rows read."""
    pair = offs // I
    j = offs % I
    n_g, n_u = gate_up_rows(j, I, GATED, INTERLEAVED)
    row = y_ptr + pair.to(tl.int64) * stride_y
    if IDS_FIRST:
        e = tl.load(ids_ptr + pair, mask=ok, other=-1).to(tl.int32)
        valid = ok & (e >= 0) & (e < E)
        hg = tl.load(row + n_g, mask=valid, other=0.0).to(tl.float32)
        hu = tl.load(row + n_u, mask=valid, other=0.0).to(tl.float32)
    else:
        hg = tl.load(row + n_g, mask=ok, other=0.0).to(tl.float32)       # issued beside the ids' load, not after it
        hu = tl.load(row + n_u, mask=ok, other=0.0).to(tl.float32)
        e = tl.load(ids_ptr + pair, mask=ok, other=-1).to(tl.int32)
        valid = ok & (e >= 0) & (e < E)
    y = tl.where(valid, _activate(hg, hu, ACTFN, HAS_LIMIT, limit, alpha, beta, lbeta), 0.0)
    return to_dtype(y, io_t, EXACT_BF16).to(tl.float32)


@triton.jit
def w4a4_act_kernel(y_ptr, ids_ptr, out_ptr, numel, E, I, stride_y, limit, alpha, beta, lbeta, ACTFN: tl.constexpr,
                    GATED: tl.constexpr, INTERLEAVED: tl.constexpr, HAS_LIMIT: tl.constexpr, BLOCK: tl.constexpr,
                    EXACT_BF16: tl.constexpr, IDS_FIRST: tl.constexpr = False):
    """XQ 2: the activation alone (_act_values) over numel values of [pairs, I], BLOCK a program, in the layer
    dtype: FC2's input before nvfp4_round_kernel rounds it. (R84: one program doing both, the activation computed
    in both of the rounding's passes, took 10 us a call against 1.2 + 5.2 for the two launches.)"""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < numel
    v = _act_values(y_ptr, ids_ptr, offs, ok, E, I, stride_y, limit, alpha, beta, lbeta, ACTFN, GATED, INTERLEAVED,
                    HAS_LIMIT, out_ptr.dtype.element_ty, EXACT_BF16, IDS_FIRST)
    tl.store(out_ptr + offs, v.to(out_ptr.dtype.element_ty), mask=ok)


#: nvfp4_round_kernel's tile: 8 warps, 8 values per thread
ROUND_BLOCK, ROUND_WARPS = 2048, 8
