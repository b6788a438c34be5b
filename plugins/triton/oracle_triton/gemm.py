"""Dense tiled GEMM y = x @ dequant(W)^T (+ b) with W packed in memory, and the
activation quantize-dequantize pass W8A8/W4A4 modes run before it.

GEMM: each program owns a BLOCK_M x BLOCK_N output tile and a slice of K (split-K when the
output has too few tiles to fill the GPU); dequant.finish_tile sums the partials in a fixed
order. One activation row is served by gemv.py instead (launch.use_gemv).

Activation pass: quantizing inside the GEMM's prologue repeats the work in every one of the
N/BLOCK_N programs (and on 16-row tiles at M = 1); measured on an H200 it cost 4x the GEMM at
M = 1, so the activations are rounded once, in their own launch, to the values the reference
gives (codes times scales, in the layer's dtype), and the GEMM reads those. Per-token FP8 codes at
a few rows are the exception (COOP, coop_token_codes): the GEMM's programs claim rows and quantize
each once, then wait until all are written, so the rows are still rounded once but inside the GEMM's
launch.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .dequant import (act_codes_tile, act_tile, code_product, e4m3_encode, round_e4m3, finish_tile, fp8_codes_product, fp8_codes_scale,
                      e2m1_bits, fp8_operand, fp8_scale, fp8_tile_scales, group_scales, group_scales_hw, int4_group_row, k_in, mma_acc, quantize_tile, quantize_tile_bytes, quantize_tile_codes, split_range,
                      tile_product, to_dtype, w4_product, w4_tile)
from .gemv import split8
from .pdl import gdc_launch_dependents, gdc_wait, prefetch_row_heads, prefetch_rows_l2, wait_until_at_least
from .token_rows import rows_codes, rows_scales, rows_tile


@triton.jit
def act_qdq_kernel(x_ptr, xs_ptr, out_ptr, M, K, stride_xm, stride_om, ACT: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, EXACT_BF16: tl.constexpr,
                   scales_ptr=None, CODES: tl.constexpr = False, ONE_TILE: tl.constexpr = False,
                   GDC: tl.constexpr = False, rid_ptr=None, RID_TILES: tl.constexpr = False,
                   FAST_DIV: tl.constexpr = False, HW_FP8: tl.constexpr = False):
    """Programs over (BLOCK_M rows, K tiles pid(1), pid(1) + grid(1), ...); per-token scales read the
    whole row's amax first (launched with one program along K and wide K tiles, so each row is read
    twice in few steps: launch.TOKEN_ROWS / TOKEN_K).

    CODES (FP8 activations for the float8 GEMM): out gets the E4M3 bytes (uint8) and scales_ptr
    the fp32 scales: [ceil(K/128), M] per 1x128 group (ACT 1), [M] per token (ACT 2); per tensor
    (ACT 3) the scale is xs_ptr's. Same codes and scales as the values written otherwise
    (values = codes x scales, rounded to out's dtype).

    ONE_TILE (per token, ACT 2, with BLOCK_K >= K and one program along K): the rows are loaded once,
    their amax, codes and scales computed from the registers (one memory round trip, not two passes).

    GDC (sm_90, programmatic dependent launch): the GEMM launched next (with launch_pdl) may start at
    once; it fetches its weights while this grid runs and waits for it before reading the codes.

    rid_ptr (int32 [M], moe_ws's block rows): only the rows whose id is >= 0 are read and written; the others
    (padding, no GEMM output reads them) keep whatever out held. RID_TILES: a program none of whose BLOCK_M rows
    holds a pair does nothing, and the others round all their rows (no per-row masks: padding sits at the end of
    each expert's block, so most tiles are all live or all padding).

    FAST_DIV (NVFP4, a GPU): x / s as x * (1 / s) corrected by two FMAs, the reciprocal once per 16-group: the
    same quotient as the IEEE division (dequant.quotient_by_reciprocal says why) in 3 instructions an element; with
    CODES (ACT 1 / 2, bf16 rows) the same for each row's or group's scale (dequant.scaled_quotients). HW_FP8 (CODES,
    >= 8.9): the bytes by the hardware conversion (dequant.e4m3_bytes), not the integer rounding and encoding."""
    if GDC:
        gdc_launch_dependents()
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs_m < M
    live = True
    if rid_ptr is not None:
        rid = tl.load(rid_ptr + offs_m, mask=row_ok, other=-1)
        if RID_TILES:
            live = tl.max(rid, axis=0) >= 0
        else:
            row_ok = row_ok & (rid >= 0)
    if live:
        _act_qdq_rows(x_ptr, xs_ptr, out_ptr, offs_m, row_ok, M, K, stride_xm, stride_om, ACT, BLOCK_M, BLOCK_K,
                      EXACT_BF16, scales_ptr, CODES, ONE_TILE, FAST_DIV, HW_FP8)


@triton.jit
def _act_qdq_rows(x_ptr, xs_ptr, out_ptr, offs_m, row_ok, M, K, stride_xm, stride_om, ACT: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, EXACT_BF16: tl.constexpr, scales_ptr,
                  CODES: tl.constexpr, ONE_TILE: tl.constexpr, FAST_DIV: tl.constexpr, HW_FP8: tl.constexpr):
    """act_qdq_kernel's rows offs_m (those with row_ok): its docstring says what is written."""
    amax_rows = tl.zeros([BLOCK_M], dtype=tl.float32)
    k_tiles = tl.cdiv(K, BLOCK_K)
    if ONE_TILE:
        offs_k = tl.arange(0, BLOCK_K)
        mask = row_ok[:, None] & (offs_k[None, :] < K)
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=mask, other=0.0).to(tl.float32)
        if ACT == 2:
            amax_rows = tl.max(tl.abs(x), axis=1)
        outp = out_ptr + offs_m[:, None] * stride_om + offs_k[None, :]
        if CODES:
            c, s = quantize_tile_bytes(x, amax_rows, ACT, xs_ptr, HW_FP8, FAST_DIV)
            tl.store(outp, c, mask=mask)
            if ACT != 3:
                tl.store(scales_ptr + offs_m, s, mask=row_ok)
        else:
            tl.store(outp, to_dtype(quantize_tile(x, amax_rows, ACT, xs_ptr, BLOCK_M, BLOCK_K, FAST_DIV),
                                    out_ptr.dtype.element_ty, EXACT_BF16), mask=mask)
    else:
        if ACT == 2:
            for t in range(0, k_tiles):
                offs_k = t * BLOCK_K + tl.arange(0, BLOCK_K)
                xa = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                             mask=row_ok[:, None] & (offs_k[None, :] < K), other=0.0).to(tl.float32)
                amax_rows = tl.maximum(amax_rows, tl.max(tl.abs(xa), axis=1))
            if CODES:
                tl.store(scales_ptr + offs_m, fp8_scale(amax_rows), mask=row_ok & (tl.program_id(1) == 0))
        for t in range(tl.program_id(1), k_tiles, tl.num_programs(1)):
            offs_k = t * BLOCK_K + tl.arange(0, BLOCK_K)
            mask = row_ok[:, None] & (offs_k[None, :] < K)
            x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=mask, other=0.0).to(tl.float32)
            outp = out_ptr + offs_m[:, None] * stride_om + offs_k[None, :]
            if CODES:
                c, s = quantize_tile_bytes(x, amax_rows, ACT, xs_ptr, HW_FP8, FAST_DIV)
                tl.store(outp, c, mask=mask)
                if ACT == 1:
                    tl.store(scales_ptr + t * M + offs_m, s, mask=row_ok)
            else:
                xq = quantize_tile(x, amax_rows, ACT, xs_ptr, BLOCK_M, BLOCK_K, FAST_DIV)
                tl.store(outp, to_dtype(xq, out_ptr.dtype.element_ty, EXACT_BF16), mask=mask)


@triton.jit
def wgemm_kernel(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, y_ptr, part_ptr, cnt_ptr, as_ptr,
                 M, N, K, stride_xm, stride_ym,
                 stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, stride_as,
                 ELEM: tl.constexpr, PACK: tl.constexpr, GROUP: tl.constexpr,
                 SCALE_ROWS: tl.constexpr, HAS_ZERO: tl.constexpr, EXACT_W: tl.constexpr, HAS_BIAS: tl.constexpr,
                 SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, HW_FP8: tl.constexpr, DOT_F32: tl.constexpr,
                 OUT_F16: tl.constexpr, A_CODES: tl.constexpr = 0, FP8_DOT: tl.constexpr = False,
                 FULL_TILE: tl.constexpr = 0, GROUP_M: tl.constexpr = 1, UNIFORM_WS: tl.constexpr = False,
                 EVEN_K: tl.constexpr = False, KN: tl.constexpr = False, xin_ptr=None, sync_ptr=None,
                 COOP: tl.constexpr = False, COOP_K: tl.constexpr = 1024,
                 COOP_SPIN: tl.constexpr = False, GDC: tl.constexpr = False, PROMO: tl.constexpr = False,
                 FASTACC: tl.constexpr = False):
    """A_CODES 1-3: x holds E4M3 codes with scales per 1x128 group (as_ptr [K/128, M], row
    stride 1, group stride stride_as), per row (as_ptr [M]) or per tensor (as_ptr [1]); the
    product runs on the codes (FP8_DOT: float8 tensor cores) and the scales multiply the fp32
    result, per K tile where a scale changes along K, else once at the end (UNIFORM_WS: the
    tile's weight rows share one 128-row scale block, read as one scalar). FULL_TILE: 4-bit
    weights decoded to whole tiles (one dot per K tile). GROUP_M > 1: programs walk the output
    tiles in column bands of GROUP_M tile rows, so concurrent programs share weight tiles in L2.
    KN: E2M1 words in GPTQ's [K/8, N] layout (PACK 8; weights.repack_words). COOP (A_CODES 2): x
    and as_ptr are empty buffers the programs fill from xin_ptr first (fp8_swap_kernel says how). GDC
    (A_CODES, launched with launch_pdl after a quantizer launched with GDC): the programs become resident
    while the quantizer runs and wait for its grid before anything else, so its launch gap is hidden. PROMO (A_CODES
    2 / 3): each K tile's float8 product promoted to the fp32 sum written out (dequant.fp8_codes_product). FASTACC
    (A_CODES 2 / 3): the float8 dot not promoted over the K loop (dequant.code_product)."""
    if GDC:
        gdc_wait()
    if COOP:
        coop_token_codes(xin_ptr, x_ptr, as_ptr, sync_ptr, M, K, stride_xm, COOP_K, COOP_SPIN)
    if GROUP_M > 1:
        grid_n = tl.num_programs(0)
        grid_m = tl.num_programs(1)
        pid = tl.program_id(1) * grid_n + tl.program_id(0)
        band = pid // (GROUP_M * grid_n)
        first_m = band * GROUP_M
        rows_in_band = tl.minimum(grid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % (GROUP_M * grid_n)) % rows_in_band
        pid_n = (pid % (GROUP_M * grid_n)) // rows_in_band
    else:
        pid_n = tl.program_id(0)
        pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    io_t = tl.float16 if OUT_F16 else tl.bfloat16
    dot_t = tl.float32 if DOT_F32 else io_t
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = offs_m < M
    a_rows = x_ptr + offs_m[:, None] * stride_xm
    k_tiles = tl.cdiv(K, BLOCK_K)
    t0, t1 = split_range(K, BLOCK_K, SPLIT_K, pid_k)
    gscale = 1.0
    if ELEM == 2:
        gscale = tl.load(g_ptr)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if A_CODES > 0:
        PER_TILE: tl.constexpr = A_CODES == 1 or GROUP > 1      # scales change along K
        n0 = pid_n * BLOCK_N
        xs, ws = fp8_tile_scales(as_ptr, offs_m, row_ok, stride_as, tl.minimum(t0, k_tiles - 1) * BLOCK_K,
                                 offs_n, n0, s_ptr, N, stride_sn, stride_sk, A_CODES, GROUP, SCALE_ROWS, UNIFORM_WS)
        for t in range(t0, t1):
            a = act_codes_tile(a_rows, row_ok, t * BLOCK_K, K, BLOCK_K, FP8_DOT, HW_FP8, dot_t, EVEN_K)
            if PER_TILE:                            # the next tile's scales, loaded one tile ahead
                xs_next, ws_next = fp8_tile_scales(as_ptr, offs_m, row_ok, stride_as,
                                                   tl.minimum(t + 1, t1 - 1) * BLOCK_K, offs_n, n0, s_ptr, N,
                                                   stride_sn, stride_sk, A_CODES, GROUP, SCALE_ROWS, UNIFORM_WS)
            acc = fp8_codes_product(acc, a, xs, ws, t * BLOCK_K, offs_n, w_ptr, K, N, stride_wn, stride_wk,
                                    PER_TILE, HW_FP8, FP8_DOT, BLOCK_K, dot_t, DOT_F32, UNIFORM_WS, EVEN_K, PROMO,
                                    FASTACC)
            if PER_TILE:
                xs, ws = xs_next, ws_next
        if not PER_TILE:                            # scales constant along K: applied once
            acc = fp8_codes_scale(acc, as_ptr, offs_m, row_ok, offs_n, s_ptr, N, stride_sn, SCALE_ROWS, A_CODES)
    elif FULL_TILE == 2:        # 4-bit whole tiles decoded by words (inline PTX), loads one tile ahead
        u, s, z = words_tile_load(tl.minimum(t0, t1 - 1) * BLOCK_K, offs_n, w_ptr, s_ptr, z_ptr, K, N, stride_wn,
                                  stride_wk, stride_sn, stride_sk, stride_zk, ELEM, HAS_ZERO, GROUP, BLOCK_N, BLOCK_K,
                                  EVEN_K, KN)
        for t in range(t0, t1):
            un, sn, zn = words_tile_load(tl.minimum(t + 1, t1 - 1) * BLOCK_K, offs_n, w_ptr, s_ptr, z_ptr, K, N,
                                         stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM, HAS_ZERO, GROUP,
                                         BLOCK_N, BLOCK_K, EVEN_K, KN)
            x = act_tile(a_rows, row_ok, t * BLOCK_K, K, BLOCK_K, EVEN_K).to(dot_t)
            w = words_tile_decode(u, s, z, gscale, ELEM, GROUP, BLOCK_N, BLOCK_K, io_t, KN)
            acc = mma_acc(x, tl.trans(w.to(dot_t)), acc, DOT_F32)
            u, s, z = un, sn, zn
    elif FULL_TILE:
        for t in range(t0, t1):
            x = act_tile(a_rows, row_ok, t * BLOCK_K, K, BLOCK_K, EVEN_K).to(dot_t)
            acc = w4_product(acc, x, t * BLOCK_K, offs_n, w_ptr, s_ptr, z_ptr, gscale, K, N,
                             stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                             ELEM, PACK, GROUP, HAS_ZERO, BLOCK_N, BLOCK_K, io_t, dot_t, DOT_F32, EVEN_K)
    else:
        for t in range(t0, t1):
            acc += tile_product(a_rows, row_ok, t * BLOCK_K, offs_n, w_ptr, s_ptr, z_ptr, gscale, K, N,
                                stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                                ELEM, PACK, GROUP, SCALE_ROWS, HAS_ZERO, HW_FP8, EXACT_W,
                                BLOCK_M, BLOCK_N, BLOCK_K // PACK, io_t, dot_t, DOT_F32)
    finish_tile(acc, part_ptr, cnt_ptr, pid_m * tl.num_programs(0) + pid_n, pid_k, b_ptr, y_ptr, offs_m, offs_n,
                M, N, stride_ym, SPLIT_K, HAS_BIAS, DOT_F32)
    if COOP:
        coop_done(sync_ptr)




#: One GPTQ word (8 nibbles, low first = k order) and its zero point as the 16-bit pair
#: {B + z, B + z} -> the 8 differences q - z in the layer dtype (outputs in k order): each nibble
#: pair (i, i + 4) is ORed into the pair {B + q_i, B + q_i+4} (B = 128 in bf16: 0x4300, 1024 in
#: fp16: 0x6400, where the integers up to B + 15 are exact) and one packed subtraction gives both
#: differences exactly; the halves are the outputs (no conversion instruction at all).
def _int4_word_halves(base: int, sub: str) -> str:
    lines = [".reg .b32 t<4>;"]
    for i in range(4):
        src = "$8" if i == 0 else f"t{i}"
        if i:
            lines.append(f"shr.b32 t{i}, $8, {4 * i};")
        lines += [f"and.b32 t{i}, {src}, 0x000F000F;", f"or.b32 t{i}, t{i}, {base * 65537:#x};",
                  f"{sub} t{i}, t{i}, $9;", f"mov.b32 {{${i}, ${i + 4}}}, t{i};"]
    return "{\n" + "\n".join(lines) + "\n}"


_INT4_BF16_PTX = tl.constexpr(_int4_word_halves(0x4300, "sub.rn.bf16x2"))
_INT4_F16_PTX = tl.constexpr(_int4_word_halves(0x6400, "sub.rn.f16x2"))


@triton.jit
def int4_word_values(u, z, DECODE: tl.constexpr, io_t: tl.constexpr):
    """GPTQ words u [A, B] (int32) and their zero points z (int32 0..15, broadcast to u) -> the 8
    tensors q_i - z [A, B] (i = nibble = k % 8), exact: in io_t by inline PTX (DECODE 3, sm_90:
    packed bf16x2/f16x2 subtraction), else fp32 by the 2**23 + q bit trick (any device, the
    interpreter)."""
    if DECODE == 3:     # 16-bit outputs declared int16 ("=h") and reinterpreted: no conversion
        if io_t == tl.bfloat16:
            zp = ((z | 0x4300) * 65537) + tl.zeros_like(u)
            h = tl.inline_asm_elementwise(_INT4_BF16_PTX, "=h,=h,=h,=h,=h,=h,=h,=h,r,r", [u, zp],
                                          dtype=(tl.int16,) * 8, is_pure=True, pack=1)
        else:
            zp = ((z | 0x6400) * 65537) + tl.zeros_like(u)
            h = tl.inline_asm_elementwise(_INT4_F16_PTX, "=h,=h,=h,=h,=h,=h,=h,=h,r,r", [u, zp],
                                          dtype=(tl.int16,) * 8, is_pure=True, pack=1)
        w0, w1, w2, w3 = h[0].to(io_t, bitcast=True), h[1].to(io_t, bitcast=True), h[2].to(io_t, bitcast=True), \
            h[3].to(io_t, bitcast=True)
        w4, w5, w6, w7 = h[4].to(io_t, bitcast=True), h[5].to(io_t, bitcast=True), h[6].to(io_t, bitcast=True), \
            h[7].to(io_t, bitcast=True)
    else:
        zf = z.to(tl.float32) + 8388608.0
        w0 = ((u & 15) | 0x4B000000).to(tl.float32, bitcast=True) - zf
        w1 = (((u >> 4) & 15) | 0x4B000000).to(tl.float32, bitcast=True) - zf
        w2 = (((u >> 8) & 15) | 0x4B000000).to(tl.float32, bitcast=True) - zf
        w3 = (((u >> 12) & 15) | 0x4B000000).to(tl.float32, bitcast=True) - zf
        w4 = (((u >> 16) & 15) | 0x4B000000).to(tl.float32, bitcast=True) - zf
        w5 = (((u >> 20) & 15) | 0x4B000000).to(tl.float32, bitcast=True) - zf
        w6 = (((u >> 24) & 15) | 0x4B000000).to(tl.float32, bitcast=True) - zf
        w7 = (((u >> 28) & 15) | 0x4B000000).to(tl.float32, bitcast=True) - zf
    return w0, w1, w2, w3, w4, w5, w6, w7


def e2m1_word_ptx(f16: bool, fused: bool = False) -> str:
    """PTX: one 32-bit word of packed E2M1 ($8; nibble i = k order i, low first) and its group scale
    $9 -> the 8 values x scale as 16-bit halves $0..$7 (k order), rounded once, as the reference
    dequantizes (value x scale in fp32, rounded to the layer dtype).

    Pair i of the word (nibbles i and i + 4) becomes one 16-bit pair by bit placement alone: the
    word shifted left by 12 - 4i puts both sign bits at bits 15 / 31 and the 3 magnitude bits at
    12-14 / 28-30; shifted right by 6 (bf16; 3 for fp16) they land on the exponent's two low bits
    and the mantissa's top bit. That pattern is the E2M1 value times 2**-126 (bf16; 2**-14 for
    fp16), the code 0.5 a subnormal, exactly. bf16 ($9 the pair {s, s} in bf16): a packed multiply
    by {2**126, 2**126} gives the values (written as an FMA with -0, which keeps signs of zero and
    handles subnormals), a second one by the scale pair the weights (exact for MXFP4's powers of
    two; the scale is not folded into the first factor: 2**126 x an E8M0 scale above 2 overflows
    bf16). fp16 ($9 the fp32 scale): fp16's range is too narrow for the scale itself (an E8M0 scale
    below 2**-24 is 0 in fp16, while value x scale may not be), so each pattern is converted to
    fp32, multiplied by 2**14 and the scale there, and the pair rounded once to fp16.

    fused (bf16 only; $9 the pair {c, c} with c = 2**126 x scale in bf16, e2m1_scale_pair): one packed
    multiply per pair instead of two. The same bits as the two steps wherever 2**126 x scale is a
    finite normal bf16 (scales in [2**-100, 2]: DenseGemm.fused_ok checks the layer's at load), because
    the first step is exact and scaling the bf16 scale by a power of two is exact there."""
    shift, mask = (3, 0x0E000E00) if f16 else (6, 0x01C001C0)
    lines = [".reg .b32 q, a, b, c, z;", ".reg .b16 l, h;", ".reg .f32 f0, f1;", "mov.b32 c, 0x7E807E80;",
             "mov.b32 z, 0x80008000;"]
    for i in range(4):
        lines.append(f"shl.b32 q, $8, {12 - 4 * i};" if i < 3 else "mov.b32 q, $8;")
        lines += [f"shr.b32 a, q, {shift};", f"and.b32 a, a, {mask:#x};", "and.b32 b, q, 0x80008000;",
                  "or.b32 a, a, b;"]
        if f16:
            lines += ["mov.b32 {l, h}, a;", "cvt.f32.f16 f0, l;", "cvt.f32.f16 f1, h;",
                      "mul.rn.f32 f0, f0, 0f46800000;", "mul.rn.f32 f1, f1, 0f46800000;",     # x 2**14
                      "mul.rn.f32 f0, f0, $9;", "mul.rn.f32 f1, f1, $9;", "cvt.rn.f16x2.f32 a, f1, f0;"]
        elif fused:
            lines.append("fma.rn.bf16x2 a, a, $9, z;")
        else:
            lines += ["fma.rn.bf16x2 a, a, c, z;", "fma.rn.bf16x2 a, a, $9, z;"]
        lines.append(f"mov.b32 {{${i}, ${i + 4}}}, a;")
    return "{\n" + "\n".join(lines) + "\n}"


def e2m1_word_ptx_table(a_fragment: bool = False) -> str:
    """PTX (bf16 layers), the one generator of the byte-table E2M1 decoders: one word of packed E2M1 ($8, nibble
    i = k order i, low first) and its group's scale word $9 = {A, B} (A in the low half; e2m1_scale_word,
    w4_rega._scale_word) -> the 8 weights as 16-bit halves. A = bf16(s x g), B = bf16((1.5 s) x g) (NVFP4: s the
    E4M3 scale, g the global one, products in fp32 as the reference's; MXFP4: s = 2**e, g = 1). Every E2M1
    magnitude is p or 1.5 p with p a power of two (0.5 is one), fp32(1.5 p x s x g) = p x fp32((1.5 s) x g), and
    a power of two commutes with rounding, so each weight is exactly the reference's bf16(value x s x g): p x A or
    p x B. (e2m1_word_ptx's single factor bf16(s x g) rounds NVFP4's scale before the product: one bf16 ulp off on
    some 1.5, 3 and 6 codes.)

    The 8 magnitudes' bf16 patterns 0, A/2, A, B, 2A, 2B, 4A, 4B (packed multiplies of {A, B} by powers of
    two, exact; the same instructions for words that share a scale word, which ptxas computes once) as byte
    tables (two registers of low bytes, two of high bytes); the word's 8 magnitude codes looked up by PRMT (4 codes
    per instruction: byte i of l0 / h0 is code i's, of l1 / h1 code 4 + i's), then the low and high bytes paired
    and the codes' signs put in, in one of two output orders:
    - a_fragment False (e2m1_word_values_table: the MoE and the swap word paths): $0..$7 in k order; each joined
      pair's signs gathered and XORed in (moe_w4a4._WORD_PTX's scheme with bf16 outputs). sm_90 SASS of the
      MoE's NVFP4 K loop: 376 / 356 instructions per FC1 / FC2 step against 414 / 385 with e2m1_word_ptx;
    - a_fragment True (w4_rega's TABLE): codes 2j and 2j + 1 as the halves $j / $(j + 4) (w4_rega.byte_pairs_ptx's
      A-fragment pair order); the signs ORed into the high bytes before the pairs are joined (byte i's bit 7 must
      be code i's bit 4i + 3: bit 7 of byte i / 2 of the word shifted left by 4, even i, or of the word, odd i; one
      PRMT per four codes gathers them): 15 instructions per word, against 25 for the bit-placement decoder.
    tests/test_triton_e2m1_ptx.py and test_triton_rega_nvfp4.py run both on a bit-level model against
    oracle-emulation."""
    signs = "se, g0, g1, p" if a_fragment else "se, so, p, q"
    lines = [f".reg .b32 z, k, wh, w2, w4, tl0, tl1, th0, th1, m, sh, l0, h0, l1, h1, {signs};",
             "mov.b32 z, 0x80008000;",
             "mov.b32 k, 0x3F003F00;", "fma.rn.bf16x2 wh, $9, k, z;",      # {A/2, B/2}
             "mov.b32 k, 0x40004000;", "fma.rn.bf16x2 w2, $9, k, z;",      # {2A, 2B}
             "mov.b32 k, 0x40804080;", "fma.rn.bf16x2 w4, $9, k, z;",      # {4A, 4B}
             "prmt.b32 tl0, wh, $9, 0x6409;", "prmt.b32 th0, wh, $9, 0x7519;",   # 0, A/2, A, B (byte 9: A/2's sign, 0)
             "prmt.b32 tl1, w2, w4, 0x6420;", "prmt.b32 th1, w2, w4, 0x7531;",   # 2A, 2B, 4A, 4B
             "and.b32 m, $8, 0x77777777;", "shr.b32 sh, m, 16;",
             "prmt.b32 l0, tl0, tl1, m;", "prmt.b32 h0, th0, th1, m;",         # codes 0-3
             "prmt.b32 l1, tl0, tl1, sh;", "prmt.b32 h1, th0, th1, sh;",       # codes 4-7
             "shl.b32 se, $8, 4;"]
    if a_fragment:
        lines += ["prmt.b32 g0, se, $8, 0x5140;", "prmt.b32 g1, se, $8, 0x7362;",   # bit 7 of byte i: code i's sign
                  "and.b32 g0, g0, 0x80808080;", "or.b32 h0, h0, g0;",
                  "and.b32 g1, g1, 0x80808080;", "or.b32 h1, h1, g1;"]
    else:
        lines += ["and.b32 se, se, 0x80808080;",            # even codes' signs: bit 7 of byte j
                  "and.b32 so, $8, 0x80808080;"]            # odd codes' signs
    for j in range(4):          # codes 2j (low half), 2j + 1 (high half)
        lo, hi = ("l0", "h0") if j < 2 else ("l1", "h1")
        lines.append(f"prmt.b32 p, {lo}, {hi}, {'0x5140' if j % 2 == 0 else '0x7362'};")
        if a_fragment:
            lines.append(f"mov.b32 {{${j}, ${j + 4}}}, p;")
        else:
            lines += [f"prmt.b32 q, se, so, 0x{4 + j:x}{j:x}{j:x}{j:x};", "and.b32 q, q, 0x80008000;",
                      "xor.b32 p, p, q;", f"mov.b32 {{${2 * j}, ${2 * j + 1}}}, p;"]
    return "{\n" + "\n".join(lines) + "\n}"


_E2M1_BF16_PTX = tl.constexpr(e2m1_word_ptx(False))
_E2M1_BF16_TABLE_PTX = tl.constexpr(e2m1_word_ptx_table())
_E2M1_F16_PTX = tl.constexpr(e2m1_word_ptx(True))
_E2M1_BF16_FUSED_PTX = tl.constexpr(e2m1_word_ptx(False, True))


@triton.jit
def e2m1_scale_pair(s, gscale, ELEM: tl.constexpr):
    """Raw word scales s (E8M0 / E4M3 bytes) -> int32 pairs {c, c}, c = 2**126 x scale in bf16, the
    fused decoder's factor (e2m1_word_ptx fused). MXFP4: c = 2**(b - 1), bits (b + 126) << 7, one
    integer multiply-add per word (byte 0, 2**-127, gives 2**-1 too); NVFP4: the hardware E4M3
    conversion times the global scale and 2**126 in fp32, rounded to bf16 (as the two-step decoder
    rounds the scale itself)."""
    if ELEM == 1:
        pair = (s.to(tl.int32) + 126) * 0x00800080
    else:
        c = group_scales_hw(s, gscale, ELEM) * 8.507059173023462e37
        pair = (c.to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF) * 65537
    return pair


@triton.jit
def _e2m1_bf16_words(u, w, PTX: tl.constexpr):
    """The 8 bf16 tensors (nibble i = k % 8) one of the E2M1 word decoders PTX makes of words u and one
    32-bit word of scale bits w per word (compiled only)."""
    h = tl.inline_asm_elementwise(PTX, "=h,=h,=h,=h,=h,=h,=h,=h,r,r", [u, w], dtype=(tl.int16,) * 8,
                                  is_pure=True, pack=1)
    return h[0].to(tl.bfloat16, bitcast=True), h[1].to(tl.bfloat16, bitcast=True), \
        h[2].to(tl.bfloat16, bitcast=True), h[3].to(tl.bfloat16, bitcast=True), \
        h[4].to(tl.bfloat16, bitcast=True), h[5].to(tl.bfloat16, bitcast=True), \
        h[6].to(tl.bfloat16, bitcast=True), h[7].to(tl.bfloat16, bitcast=True)


@triton.jit
def e2m1_word_values_fused(u, pair):
    """E2M1 words u and their e2m1_scale_pair factors -> the 8 bf16 tensors value x scale (nibble i =
    k % 8), one packed multiply per value pair (e2m1_word_ptx fused; bf16 layers, compiled only)."""
    return _e2m1_bf16_words(u, pair, _E2M1_BF16_FUSED_PTX)


@triton.jit
def e2m1_word_values(u, sg, io_t: tl.constexpr):
    """E2M1 words u [A, B] (int32) and their group scales sg (fp32, broadcast to u) -> the 8
    tensors value x scale [A, B] in io_t (nibble i = k % 8), rounded once as the reference
    dequantizes (e2m1_word_ptx: bit placement, then two packed bf16 multiplies per pair, or fp32
    multiplies for fp16 layers; inline PTX, compiled only)."""
    if io_t == tl.bfloat16:
        sp = (sg.to(io_t).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF) * 65537 + tl.zeros_like(u)
        h = tl.inline_asm_elementwise(_E2M1_BF16_PTX, "=h,=h,=h,=h,=h,=h,=h,=h,r,r", [u, sp],
                                      dtype=(tl.int16,) * 8, is_pure=True, pack=1)
    else:
        sf = sg.to(tl.float32) + tl.zeros_like(u).to(tl.float32)
        h = tl.inline_asm_elementwise(_E2M1_F16_PTX, "=h,=h,=h,=h,=h,=h,=h,=h,r,f", [u, sf],
                                      dtype=(tl.int16,) * 8, is_pure=True, pack=1)
    return h[0].to(io_t, bitcast=True), h[1].to(io_t, bitcast=True), h[2].to(io_t, bitcast=True), \
        h[3].to(io_t, bitcast=True), h[4].to(io_t, bitcast=True), h[5].to(io_t, bitcast=True), \
        h[6].to(io_t, bitcast=True), h[7].to(io_t, bitcast=True)


@triton.jit
def e2m1_scale_word(s, gscale, ELEM: tl.constexpr):
    """Raw E2M1 group scales s (NVFP4's E4M3 bytes, MXFP4's E8M0) -> e2m1_word_ptx_table's scale words {A, B}
    (int32, A low): A = bf16(s x g), B = bf16((1.5 s) x g), the products in fp32 (NVFP4's E4M3 converted by
    the hardware; compiled only)."""
    if ELEM == 1:
        sv = group_scales(s, gscale, ELEM)
    else:
        sv = s.to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
    a = (sv * gscale).to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    b = ((sv * 1.5) * gscale).to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32)
    return a | (b << 16)


@triton.jit
def e2m1_word_values_table(u, sw):
    """E2M1 words u [A, B] (int32) and their e2m1_scale_word (broadcast to u) -> the 8 bf16 tensors value x
    scale (nibble i = k % 8), exactly the reference's (e2m1_word_ptx_table; inline PTX, compiled only)."""
    return _e2m1_bf16_words(u, sw, _E2M1_BF16_TABLE_PTX)


@triton.jit
def e2m1_words_kn(u, s, gscale, ELEM: tl.constexpr, FUSED: tl.constexpr, io_t: tl.constexpr):
    """E2M1 words u [A, B] with their raw scales s (one per word: the [K/8, N] layout) -> the 8 tensors
    value x scale in io_t: FUSED (bf16 layers; fp16 ones take the two-step decoder) by
    e2m1_word_values_fused, else e2m1_word_values on the hardware-converted scales."""
    if FUSED and io_t == tl.bfloat16:
        w0, w1, w2, w3, w4, w5, w6, w7 = e2m1_word_values_fused(u, e2m1_scale_pair(s, gscale, ELEM))
    else:
        w0, w1, w2, w3, w4, w5, w6, w7 = e2m1_word_values(u, group_scales_hw(s, gscale, ELEM), io_t)
    return w0, w1, w2, w3, w4, w5, w6, w7


@triton.jit
def words_tile_load(k0, offs_n, w_ptr, s_ptr, z_ptr, K, N, stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                    ELEM: tl.constexpr, HAS_ZERO: tl.constexpr, GROUP: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, KN: tl.constexpr = False):
    """The loads of one whole-tile word decode (words_tile_decode) of W[offs_n, k0 : k0 + BLOCK_K]:
    E2M1 words [BN, BK/8] and raw group scales [BN, groups] (zeros: the scales again); GPTQ words
    [BK/8, BN] (N contiguous), each word row's group scales and zero points [BK/8, BN]. Split from
    the decode so the large-M loop can issue the next tile's loads before decoding this one (Triton
    pipelines only loads that feed tl.dot; the packed weights feed the decode). KN: E2M1 words in
    GPTQ's [K/8, N] layout (weights.repack_words), loaded as [BN, BK/8] like the byte layout's."""
    UJ: tl.constexpr = BLOCK_K // 8
    if ELEM == 3:
        jj = tl.arange(0, UJ)
        j = (k0 // 8 + jj)[:, None]
        n = offs_n[None, :]
        ok = (n < N) & k_in(j, K // 8, EVEN_K)
        u = tl.load(w_ptr + j * stride_wk + n, mask=ok, other=0)
        g = ((k0 + 8 * jj) // GROUP)[:, None]
        s = tl.load(s_ptr + g * stride_sk + n, mask=ok, other=0.0)
        if HAS_ZERO:
            zw = tl.load(z_ptr + g * stride_zk + n // 8, mask=ok, other=0)
            z = (zw >> ((n % 8) * 4)) & 15
        else:
            z = tl.full([UJ, BLOCK_N], 8, tl.int32)
    else:
        G: tl.constexpr = BLOCK_K // GROUP
        n = offs_n[:, None]
        j = (k0 // 8 + tl.arange(0, UJ))[None, :]
        if KN:      # the words and each word's scale [BN, BK/8] (one layout: no broadcast of [BN, G] later)
            ok = (n < N) & k_in(j, K // 8, EVEN_K)
            u = tl.load(w_ptr + n + j * stride_wk, mask=ok, other=0)
            s = tl.load(s_ptr + n + (j * 8 // GROUP) * stride_sk, mask=ok, other=0)
        else:
            u = tl.load(w_ptr.to(tl.pointer_type(tl.int32)) + n * (stride_wn // 4) + j,
                        mask=(n < N) & k_in(j, K // 8, EVEN_K), other=0)
            g = (k0 // GROUP + tl.arange(0, G))[None, :]
            s = tl.load(s_ptr + n * stride_sn + g * stride_sk, mask=(n < N) & k_in(g, K // GROUP, EVEN_K), other=0)
        z = s
    return u, s, z


@triton.jit
def words_tile_decode(u, s, z, gscale, ELEM: tl.constexpr, GROUP: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, io_t: tl.constexpr, KN: tl.constexpr = False,
                      TABLE: tl.constexpr = False):
    """words_tile_load's tile -> the dequantized [BLOCK_N, BLOCK_K] tile in io_t, k in order, the
    reference's values (as dequant.w4_tile gives them), decoded a 32-bit word (8 values) at a time.
    E2M1: e2m1_word_values (bit placement, value x scale rounded once). GPTQ: int4_word_values
    (q - z exact by one packed subtraction per pair), times the group scale in fp32, rounded once;
    each of the 8 nibble tiles [BK/8, BN] is transposed (a layout change) before the interleave. KN:
    E2M1 scales already one per word (words_tile_load), NVFP4's converted by the hardware. TABLE (E2M1,
    bf16, the [N, K/2] layout): e2m1_word_values_table, NVFP4's weights exactly the reference's."""
    UJ: tl.constexpr = BLOCK_K // 8
    if ELEM == 3:
        sf = s.to(tl.float32)
        w0, w1, w2, w3, w4, w5, w6, w7 = int4_word_values(u, z, 3, io_t)
        w0 = tl.trans(to_dtype(w0.to(tl.float32) * sf, io_t, False))
        w1 = tl.trans(to_dtype(w1.to(tl.float32) * sf, io_t, False))
        w2 = tl.trans(to_dtype(w2.to(tl.float32) * sf, io_t, False))
        w3 = tl.trans(to_dtype(w3.to(tl.float32) * sf, io_t, False))
        w4 = tl.trans(to_dtype(w4.to(tl.float32) * sf, io_t, False))
        w5 = tl.trans(to_dtype(w5.to(tl.float32) * sf, io_t, False))
        w6 = tl.trans(to_dtype(w6.to(tl.float32) * sf, io_t, False))
        w7 = tl.trans(to_dtype(w7.to(tl.float32) * sf, io_t, False))
    elif KN:
        w0, w1, w2, w3, w4, w5, w6, w7 = e2m1_word_values(u, group_scales_hw(s, gscale, ELEM), io_t)
    elif TABLE and io_t == tl.bfloat16:
        G: tl.constexpr = BLOCK_K // GROUP
        sw = e2m1_scale_word(s, gscale, ELEM)
        sw = tl.reshape(tl.broadcast_to(sw[:, :, None], [BLOCK_N, G, UJ // G]), [BLOCK_N, UJ])
        w0, w1, w2, w3, w4, w5, w6, w7 = e2m1_word_values_table(u, sw)
    else:
        G: tl.constexpr = BLOCK_K // GROUP
        sg = group_scales(s, gscale, ELEM)
        sfull = tl.reshape(tl.broadcast_to(sg[:, :, None], [BLOCK_N, G, UJ // G]), [BLOCK_N, UJ])
        w0, w1, w2, w3, w4, w5, w6, w7 = e2m1_word_values(u, sfull, io_t)
    return interleave8(w0, w1, w2, w3, w4, w5, w6, w7)


@triton.jit
def interleave8(w0, w1, w2, w3, w4, w5, w6, w7):
    """8 tensors [A, B] (nibble i of each word) -> [A, 8 B] with w_i at column 8 b + i (k order)."""
    even = tl.interleave(tl.interleave(w0, w4), tl.interleave(w2, w6))
    odd = tl.interleave(tl.interleave(w1, w5), tl.interleave(w3, w7))
    return tl.interleave(even, odd)


@triton.jit
def _swap_tile_load(t, offs_n, offs_m, row_ok, x_ptr, w_ptr, s_ptr, z_ptr, N, stride_xm, stride_wn, stride_wk,
                    stride_sn, stride_sk, stride_zk, ELEM: tl.constexpr, HAS_ZERO: tl.constexpr, GROUP: tl.constexpr,
                    UJ: tl.constexpr, JOIN: tl.constexpr = False, K=0, EVEN_K: tl.constexpr = True,
                    KN: tl.constexpr = False, LOAD_X: tl.constexpr = True, PERM: tl.constexpr = False):
    """The loads of K tile t (UJ 32-bit words of 8 codes along K per weight row): words [BN, UJ],
    scales (INT4: [BN], the tile is one group; E2M1: raw [BN, groups of the tile]), zero points
    [BN] (INT4; 8 without HAS_ZERO), activations [UJ, BM, 8] (k = 8 * word + i; JOIN: [8 UJ, BM];
    offs_m: the rows' indices in x). EVEN_K False (E2M1 only: K a multiple of the group, not of the
    tile, as gpt-oss's 2880): the words, scales and activations past K read as zeros. KN: E2M1 words
    in GPTQ's [K/8, N] layout (weights.repack_words). LOAD_X False: no activations (x is 0; the
    caller loads them where the dot uses them, w4_swap_tiles X_PIPE). PERM (JOIN): the activations in
    the order of interleave8(w0, w4, w1, w5, w2, w6, w3, w7) (perm_k)."""
    n_ok = offs_n < N
    jrow = t * UJ + tl.arange(0, UJ)
    if ELEM == 3:       # GPTQ [K/8, N] words
        u = tl.load(w_ptr + jrow[None, :] * stride_wk + offs_n[:, None], mask=n_ok[:, None], other=0)
        s, z = int4_group_row(s_ptr, z_ptr, t, offs_n, n_ok, stride_sk, stride_zk, HAS_ZERO)
    else:               # E2M1 [N, K/2] bytes, read as words (4 bytes = 8 codes, low nibble first)
        G: tl.constexpr = UJ * 8 // GROUP
        gk = t * G + tl.arange(0, G)
        if KN:      # the words and each word's scale [BN, UJ] (no broadcast of [BN, G] in the loop)
            ok = n_ok[:, None] & k_in(jrow, K // 8, EVEN_K)[None, :]
            u = tl.load(w_ptr + jrow[None, :] * stride_wk + offs_n[:, None], mask=ok, other=0)
            s = tl.load(s_ptr + (jrow * 8 // GROUP)[None, :] * stride_sk + offs_n[:, None], mask=ok, other=0)
        else:
            u = tl.load(w_ptr.to(tl.pointer_type(tl.int32)) + offs_n[:, None] * (stride_wn // 4) + jrow[None, :],
                        mask=n_ok[:, None] & k_in(jrow, K // 8, EVEN_K)[None, :], other=0)
            s = tl.load(s_ptr + offs_n[:, None] * stride_sn + gk[None, :] * stride_sk,
                        mask=n_ok[:, None] & k_in(gk, K // GROUP, EVEN_K)[None, :], other=0)
        z = s
    if not LOAD_X:
        x = 0.0
    elif JOIN and PERM:     # loaded 8 contiguous k at a time, then put in the pairs' order in registers
        kx = (8 * jrow)[:, None, None] + tl.arange(0, 8)[None, None, :]
        xv = tl.load(x_ptr + offs_m[None, :, None] * stride_xm + kx, mask=row_ok[None, :, None] & k_in(kx, K, EVEN_K),
                     other=0.0)
        x0, x1, x2, x3, x4, x5, x6, x7 = split8(xv)
        x = tl.trans(join_pairs(tl.trans(x0), tl.trans(x1), tl.trans(x2), tl.trans(x3), tl.trans(x4), tl.trans(x5),
                                tl.trans(x6), tl.trans(x7)))
    elif JOIN:
        x = _join_x_tile(t, offs_m, row_ok, x_ptr, stride_xm, UJ * 8, K, EVEN_K, PERM)
    else:
        kx = (8 * jrow)[:, None, None] + tl.arange(0, 8)[None, None, :]
        x = tl.load(x_ptr + offs_m[None, :, None] * stride_xm + kx, mask=row_ok[None, :, None] & k_in(kx, K, EVEN_K),
                    other=0.0)
    return u, s, z, x


@triton.jit
def perm_k(r, PERM: tl.constexpr):
    """Positions r of a joined K tile -> the k they hold: r itself, or (PERM) within each word the order
    0, 4, 1, 5, 2, 6, 3, 7, that of join_pairs. A dot sums over k in any order, so the activations are
    read in the weights' order instead of shuffling the decoded weights."""
    if PERM:
        q = r & 7
        r = (r - q) + (q >> 1) + 4 * (q & 1)
    return r


@triton.jit
def join_pairs(w0, w1, w2, w3, w4, w5, w6, w7):
    """The 8 nibble tensors [A, B] of words -> [A, 8 B] in the order 0, 4, 1, 5, 2, 6, 3, 7 per word: the
    word decoders return nibbles i and i + 4 as the halves of one 32-bit register, so each pair stays
    one register (interleave8's k order repacks every pair: a PRMT per value pair)."""
    return interleave8(w0, w4, w1, w5, w2, w6, w3, w7)


@triton.jit
def _join_x_tile(t, offs_m, row_ok, x_ptr, stride_xm, BLOCK_K: tl.constexpr, K, EVEN_K: tl.constexpr,
                 PERM: tl.constexpr = False):
    """Activations [BK, BM] of K tile t for a JOIN dot: rows offs_m of x (masked by row_ok), k in order
    (PERM: in perm_k's order)."""
    kt = t * BLOCK_K + perm_k(tl.arange(0, BLOCK_K), PERM)
    return tl.load(x_ptr + offs_m[None, :] * stride_xm + kt[:, None], mask=row_ok[None, :] & k_in(kt, K, EVEN_K)[:, None],
                   other=0.0)


@triton.jit
def _mma8(acc, w0, w1, w2, w3, w4, w5, w6, w7, x0, x1, x2, x3, x4, x5, x6, x7, dot_t: tl.constexpr,
          DOT_F32: tl.constexpr):
    """acc + sum over i of w_i @ x_i (the 8 nibble operands of a swap-AB K tile, each a 16-deep MMA step)."""
    acc = mma_acc(w0.to(dot_t), x0, acc, DOT_F32)
    acc = mma_acc(w1.to(dot_t), x1, acc, DOT_F32)
    acc = mma_acc(w2.to(dot_t), x2, acc, DOT_F32)
    acc = mma_acc(w3.to(dot_t), x3, acc, DOT_F32)
    acc = mma_acc(w4.to(dot_t), x4, acc, DOT_F32)
    acc = mma_acc(w5.to(dot_t), x5, acc, DOT_F32)
    acc = mma_acc(w6.to(dot_t), x6, acc, DOT_F32)
    return mma_acc(w7.to(dot_t), x7, acc, DOT_F32)


@triton.jit
def _e2m1_operand(u, i: tl.constexpr, sfull, io_t: tl.constexpr, dot_t: tl.constexpr, DOT_F32: tl.constexpr):
    """Nibble i of E2M1 words u [BN, UJ] times its group scale, rounded to the layer dtype as the
    reference dequantizes it, as a dot operand."""
    return to_dtype(e2m1_bits((u >> (4 * i)) & 15) * sfull, io_t, DOT_F32).to(dot_t)


@triton.jit
def w4_swap_kernel(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym,
                   stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                   ELEM: tl.constexpr, HAS_ZERO: tl.constexpr, HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr,
                   GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   DECODE: tl.constexpr, DOT_F32: tl.constexpr, OUT_F16: tl.constexpr, JOIN: tl.constexpr = False,
                   PREFETCH: tl.constexpr = 1, KN: tl.constexpr = False, PERM: tl.constexpr = False,
                   X_PIPE: tl.constexpr = False):
    """Few-row 4-bit GEMM: y^T = W x^T, the weights as the MMA's A operand (BLOCK_N rows: the
    tensor-core tile's tall side) and the few activation rows as its narrow N side (BLOCK_M = 16
    or 32), so a 16-row call is not padded to a 64-row tile and the decoded weights go from
    registers straight into the MMA. A K tile is BLOCK_K / 8 words of 8 codes per weight row; code i
    of every word forms one [BN, BK/8] operand (k = 8 * word + i), multiplied with the activations
    at stride 8 (no shuffle of the decoded weights).

    INT4 (GPTQ [K/8, N], BLOCK_K = GROUP: a tile is one group): the operands are q - z, exact, and
    the group's sum is scaled once per (n, row): closer to the exact product than the reference's
    per-weight rounding. E2M1 (MXFP4 / NVFP4 [N, K/2]): each weight is value x group scale rounded
    to the layer dtype, as the reference dequantizes it. The next tile's loads are issued before the
    current one is computed (registers double-buffer them). Grid (N/BN, M/BM, SPLIT_K).

    JOIN (word decoders, DECODE 3 / 4): the 8 nibble operands are interleaved into the whole
    [BN, BK] tile in k order and multiplied by one dot with the activations [BK, BM] read as they
    lie: one trip of the decoded tile through shared memory and one MMA wait per K tile instead of
    eight (on sm_90 each dot from registers stores its operand, fences and waits).

    PREFETCH 2: the loads of the K tile two steps ahead are in flight while a tile is decoded and
    multiplied (ptxas places the loads late in the loop body; one step ahead leaves the next step
    waiting for memory)."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    io_t = tl.float16 if OUT_F16 else tl.bfloat16
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs_m < M
    t0, t1 = split_range(K, BLOCK_K, SPLIT_K, pid_k)
    gscale = 1.0
    if ELEM == 2:
        gscale = tl.load(g_ptr)
    acc = w4_swap_tiles(tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32), t0, t1, offs_n, offs_m, row_ok, x_ptr,
                        w_ptr, s_ptr, z_ptr, gscale, K, N, stride_xm, stride_wn, stride_wk, stride_sn, stride_sk,
                        stride_zk, ELEM, HAS_ZERO, GROUP, BLOCK_N, BLOCK_K, DECODE, DOT_F32, io_t, JOIN, PREFETCH,
                        True, KN, X_PIPE, PERM)
    finish_tile(tl.trans(acc), part_ptr, cnt_ptr, pid_m * tl.num_programs(0) + pid_n, pid_k, b_ptr, y_ptr, offs_m,
                offs_n, M, N, stride_ym, SPLIT_K, HAS_BIAS, DOT_F32)


@triton.jit
def w4_swap_tiles(acc, t0, t1, offs_n, offs_m, row_ok, x_ptr, w_ptr, s_ptr, z_ptr, gscale, K, N, stride_xm,
                  stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM: tl.constexpr, HAS_ZERO: tl.constexpr,
                  GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DECODE: tl.constexpr,
                  DOT_F32: tl.constexpr, io_t: tl.constexpr, JOIN: tl.constexpr = False, PREFETCH: tl.constexpr = 1,
                  EVEN_K: tl.constexpr = True, KN: tl.constexpr = False, X_PIPE: tl.constexpr = False,
                  PERM: tl.constexpr = False, TABLE: tl.constexpr = False):
    """acc [BLOCK_N, BM] + W[offs_n, K tiles t0..t1) @ x[offs_m]^T: the swap-AB K loop of
    w4_swap_kernel (JOIN, PREFETCH as there), shared with the fused MoE's (moe_gemv.moe_swap_kernel
    WORDS: offs_n may be any weight rows, e.g. stacked gate and up rows, and offs_m any activation
    rows). X_PIPE (E2M1 with JOIN): the activation tile is loaded where the dot uses it, not a step
    ahead into registers, so Triton's pipeliner (num_stages >= 2) copies it into shared memory
    asynchronously (cp.async, multi-buffered), the MMA's B operand as it must be there anyway: no
    register staging, stores and copies of it per K tile; the packed weights stay prefetched in
    registers (they feed the decode, which Triton does not pipeline). TABLE (E2M1, bf16, the [N, K/2] layout):
    e2m1_word_values_table (words_tile_decode's, and in the per-nibble dots)."""
    dot_t = tl.float32 if DOT_F32 else io_t
    UJ: tl.constexpr = BLOCK_K // 8
    XP: tl.constexpr = X_PIPE and JOIN and ELEM != 3
    u, s, z, x = _swap_tile_load(tl.minimum(t0, t1 - 1), offs_n, offs_m, row_ok, x_ptr, w_ptr, s_ptr, z_ptr, N,
                                 stride_xm, stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                                 ELEM, HAS_ZERO, GROUP, UJ, JOIN, K, EVEN_K, KN, not XP, PERM)
    if PREFETCH == 2:
        u1, s1, z1, x1_ = _swap_tile_load(tl.minimum(t0 + 1, t1 - 1), offs_n, offs_m, row_ok, x_ptr, w_ptr, s_ptr,
                                          z_ptr, N, stride_xm, stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                                          ELEM, HAS_ZERO, GROUP, UJ, JOIN, K, EVEN_K, KN, not XP, PERM)
    for t in range(t0, t1):
        un, sn, zn, xn = _swap_tile_load(tl.minimum(t + PREFETCH, t1 - 1), offs_n, offs_m, row_ok, x_ptr, w_ptr,
                                         s_ptr, z_ptr, N, stride_xm, stride_wn, stride_wk, stride_sn, stride_sk,
                                         stride_zk, ELEM, HAS_ZERO, GROUP, UJ, JOIN, K, EVEN_K, KN, not XP, PERM)
        if JOIN and PERM:       # one dot per tile, the decoded pairs kept whole (join_pairs / perm_k)
            if ELEM == 3:
                w0, w1, w2, w3, w4, w5, w6, w7 = int4_word_values(u, z[:, None], DECODE, io_t)
                p = mma_acc(join_pairs(w0, w1, w2, w3, w4, w5, w6, w7).to(dot_t), x.to(dot_t),
                            tl.zeros_like(acc), DOT_F32)
                acc += p * s.to(tl.float32)[:, None]
            else:
                w0, w1, w2, w3, w4, w5, w6, w7 = e2m1_words_kn(u, s, gscale, ELEM, DECODE == 5, io_t)
                if XP:      # the activations loaded here, in the pairs' order (pipelined by Triton)
                    x = _join_x_tile(t, offs_m, row_ok, x_ptr, stride_xm, BLOCK_K, K, EVEN_K, PERM)
                acc = mma_acc(join_pairs(w0, w1, w2, w3, w4, w5, w6, w7).to(dot_t), x.to(dot_t), acc, DOT_F32)
        elif JOIN and ELEM == 3:
            w0, w1, w2, w3, w4, w5, w6, w7 = int4_word_values(u, z[:, None], DECODE, io_t)
            p = mma_acc(interleave8(w0, w1, w2, w3, w4, w5, w6, w7).to(dot_t), x.to(dot_t),
                        tl.zeros_like(acc), DOT_F32)
            acc += p * s.to(tl.float32)[:, None]
        elif XP:
            wt = words_tile_decode(u, s, z, gscale, ELEM, GROUP, BLOCK_N, BLOCK_K, io_t, KN, TABLE)
            acc = mma_acc(wt.to(dot_t), _join_x_tile(t, offs_m, row_ok, x_ptr, stride_xm, BLOCK_K, K, EVEN_K).to(dot_t),
                          acc, DOT_F32)
        elif JOIN:
            wt = words_tile_decode(u, s, z, gscale, ELEM, GROUP, BLOCK_N, BLOCK_K, io_t, KN, TABLE)
            acc = mma_acc(wt.to(dot_t), x.to(dot_t), acc, DOT_F32)
        elif ELEM == 3:
            x0, x1, x2, x3, x4, x5, x6, x7 = split8(x.to(dot_t))
            w0, w1, w2, w3, w4, w5, w6, w7 = int4_word_values(u, z[:, None], DECODE, io_t)
            p = _mma8(tl.zeros_like(acc), w0, w1, w2, w3, w4, w5, w6, w7,
                      x0, x1, x2, x3, x4, x5, x6, x7, dot_t, DOT_F32)
            acc += p * s.to(tl.float32)[:, None]
        else:
            x0, x1, x2, x3, x4, x5, x6, x7 = split8(x.to(dot_t))
            G: tl.constexpr = BLOCK_K // GROUP
            if KN and DECODE == 4:      # a scale per word already; FP8 converted by the hardware
                sfull = group_scales_hw(s, gscale, ELEM)
            elif KN:
                sfull = group_scales(s, gscale, ELEM)
            else:
                sg = group_scales(s, gscale, ELEM)
                sfull = tl.reshape(tl.broadcast_to(sg[:, :, None], [BLOCK_N, G, UJ // G]), [BLOCK_N, UJ])
            if TABLE and DECODE >= 4 and io_t == tl.bfloat16 and not KN:       # byte tables: NVFP4 exact
                sw = e2m1_scale_word(s, gscale, ELEM)
                sw = tl.reshape(tl.broadcast_to(sw[:, :, None], [BLOCK_N, G, UJ // G]), [BLOCK_N, UJ])
                w0, w1, w2, w3, w4, w5, w6, w7 = e2m1_word_values_table(u, sw)
                acc = _mma8(acc, w0, w1, w2, w3, w4, w5, w6, w7, x0, x1, x2, x3, x4, x5, x6, x7, dot_t, DOT_F32)
            elif DECODE == 5:     # bit placement, one packed multiply per pair (scales checked at load)
                w0, w1, w2, w3, w4, w5, w6, w7 = e2m1_words_kn(u, s, gscale, ELEM, True, io_t)
                acc = _mma8(acc, w0, w1, w2, w3, w4, w5, w6, w7, x0, x1, x2, x3, x4, x5, x6, x7, dot_t, DOT_F32)
            elif DECODE == 4:     # whole words by bit placement (inline PTX)
                w0, w1, w2, w3, w4, w5, w6, w7 = e2m1_word_values(u, sfull, io_t)
                acc = _mma8(acc, w0, w1, w2, w3, w4, w5, w6, w7, x0, x1, x2, x3, x4, x5, x6, x7, dot_t, DOT_F32)
            else:
                acc = mma_acc(_e2m1_operand(u, 0, sfull, io_t, dot_t, DOT_F32), x0, acc, DOT_F32)
                acc = mma_acc(_e2m1_operand(u, 1, sfull, io_t, dot_t, DOT_F32), x1, acc, DOT_F32)
                acc = mma_acc(_e2m1_operand(u, 2, sfull, io_t, dot_t, DOT_F32), x2, acc, DOT_F32)
                acc = mma_acc(_e2m1_operand(u, 3, sfull, io_t, dot_t, DOT_F32), x3, acc, DOT_F32)
                acc = mma_acc(_e2m1_operand(u, 4, sfull, io_t, dot_t, DOT_F32), x4, acc, DOT_F32)
                acc = mma_acc(_e2m1_operand(u, 5, sfull, io_t, dot_t, DOT_F32), x5, acc, DOT_F32)
                acc = mma_acc(_e2m1_operand(u, 6, sfull, io_t, dot_t, DOT_F32), x6, acc, DOT_F32)
                acc = mma_acc(_e2m1_operand(u, 7, sfull, io_t, dot_t, DOT_F32), x7, acc, DOT_F32)
        if PREFETCH == 2:
            u, s, z, x = u1, s1, z1, x1_
            u1, s1, z1, x1_ = un, sn, zn, xn
        else:
            u, s, z, x = un, sn, zn, xn
    return acc


@triton.jit
def fp8_swap_kernel(x_ptr, as_ptr, w_ptr, s_ptr, b_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym,
                    stride_wn, stride_sn, A_CODES: tl.constexpr, HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, HW_FP8: tl.constexpr,
                    FP8_DOT: tl.constexpr, DOT_F32: tl.constexpr, EVEN_K: tl.constexpr, QUANT_IN: tl.constexpr = 0,
                    AMAX_K: tl.constexpr = 1024, GDC: tl.constexpr = False, PF_L2: tl.constexpr = False,
                    xin_ptr=None, sync_ptr=None, COOP: tl.constexpr = False,
                    COOP_K: tl.constexpr = 1024, COOP_SPIN: tl.constexpr = False, EVICT: tl.constexpr = False,
                    PF_HEAD: tl.constexpr = 0):
    """Few-row W8A8 with scales constant along K (per-channel / per-tensor weights, per-token /
    per-tensor activation codes): y^T = codes(W) codes(x)^T on float8 tensor cores, the weights
    as the MMA's tall A operand (BLOCK_N rows) and the few activation rows as its narrow side, both
    read K-major straight from memory into the pipelined dot (Triton stages the loads: num_stages);
    the unscaled sum is multiplied by both scales once. Grid (N/BN, M/BM, SPLIT_K).

    QUANT_IN (one activation row, M = 1): x holds the activations in the layer dtype, and each
    program rounds them itself (the row's amax in AMAX_K-wide steps, or the per-tensor scale at
    as_ptr; then the codes of each K tile, as act_qdq_kernel computes them) instead of reading the
    codes of a quantizer launch: one launch instead of two, and only one row of the 16-row MMA
    operand is rounded (the others are zeros).

    QUANT_IN 2 (any rows, per-token or per-tensor codes): x holds the activations in the layer dtype
    and each program rounds its own BLOCK_M rows (token_rows: their amax over K in AMAX_K-wide chunks
    first, then each K tile's codes in registers before the MMA); no quantizer launch, no waiting.
    Measured slower than the two launches on an H200 (launch.SWAP_QUANT_IN says by how much), so off.

    PF_L2 (sm_90; K a multiple of 16: bulk prefetches take 16-byte multiples): before anything else
    the program asks L2 for its column tile's weight rows (a tile's split-K programs share the rows'
    contiguous bytes: each prefetches one SPLIT_K-th), so the HBM reads start at once. GDC (launched
    with launch_pdl after act_qdq_kernel with GDC): the programs start while the quantizer runs and
    wait for its grid (griddepcontrol.wait) only after the prefetch, so the weights' HBM reads overlap
    the quantizer and the launch gap. PF_L2 alone (one launch) overlaps QUANT_IN's row amax and the
    pipeline's ramp. Both measured slower than neither on an H200 (R11: M=1 PF_L2 2048x4096 8.1 us
    against 7.5, 8192x8192 26.8 against 21.8; M=16 PDL 10.3 against 9.8 and 28.4 against 24.2; why was
    not profiled), so they are off
    unless a tuned entry turns them on (launch.FP8_PDL, cfg PDL / PF_L2).

    COOP (per-token codes, 2-32 rows: one launch instead of the quantizer's and this one's): x_ptr
    and as_ptr are empty code and scale buffers, xin_ptr the activations in the layer dtype; the
    programs quantize the rows among themselves first (coop_token_codes: each claims rows until none
    is left), wait for all rows, then run as usual. With PF_L2 the weight prefetch is asked
    for before the rows, so the HBM reads overlap them.

    The float8 MMA's sums are promoted to the fp32 accumulator every K tile (dequant.code_product's
    max_num_imprecise_acc = BLOCK_K). An option that promoted them less often (never, or every n tiles)
    was removed: never timed no faster on an H200 (ninth pass R23) and left same-sign sums over K = 4096
    per program 6.6e-2 from oracle-emulation (the tests' tolerance is 1e-2); every 2 tiles was slower."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    if PF_L2:
        tile_bytes = tl.minimum(BLOCK_N, N - pid_n * BLOCK_N).to(tl.int64) * stride_wn
        share = tl.cdiv(tl.cdiv(tile_bytes, SPLIT_K), 16384) * 16384
        first_byte = tl.minimum(pid_k * share, tile_bytes)
        prefetch_rows_l2(w_ptr + (pid_n * BLOCK_N).to(tl.int64) * stride_wn + first_byte,
                         tl.minimum(share, tile_bytes - first_byte))
    if PF_HEAD > 0:     # the head of each weight row's K range asked of L2 (bytes; K >= PF_HEAD, both % 16 == 0)
        h0, _ = split_range(K, BLOCK_K, SPLIT_K, pid_k)
        rows_h = tl.minimum(pid_n * BLOCK_N + tl.arange(0, BLOCK_N), N - 1).to(tl.int64)
        prefetch_row_heads(w_ptr + rows_h * stride_wn + tl.minimum(h0 * BLOCK_K, K - PF_HEAD), PF_HEAD)
    if GDC:
        gdc_wait()
    if COOP:
        coop_token_codes(xin_ptr, x_ptr, as_ptr, sync_ptr, M, K, stride_xm, COOP_K, COOP_SPIN)
    dot_t = tl.float32 if DOT_F32 else tl.bfloat16
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs_m < M
    a_rows = x_ptr + offs_m[:, None] * stride_xm
    t0, t1 = split_range(K, BLOCK_K, SPLIT_K, pid_k)
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    if QUANT_IN == 2:
        xs = rows_scales(a_rows, row_ok, as_ptr, K, A_CODES, AMAX_K)
        xr = rows_tile(a_rows, row_ok, t0, t1, K, BLOCK_K, EVEN_K)
    elif QUANT_IN:
        if A_CODES == 2:
            amax = tl.zeros([1], dtype=tl.float32)
            for t in range(0, tl.cdiv(K, AMAX_K)):
                offs_a = t * AMAX_K + tl.arange(0, AMAX_K)
                xa = tl.load(x_ptr + offs_a, mask=offs_a < K, other=0.0).to(tl.float32)
                amax = tl.maximum(amax, tl.max(tl.abs(xa[None, :]), axis=1))
            xs = fp8_scale(amax)
        else:
            xs = tl.load(as_ptr + tl.zeros([1], tl.int32))
        first = (tl.arange(0, BLOCK_M) == 0)[:, None]
        xr = _row_tile(x_ptr, tl.minimum(t0, t1 - 1), K, BLOCK_K, EVEN_K)
    for t in range(t0, t1):
        offs_k = t * BLOCK_K + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :],
                    mask=(offs_n < N)[:, None] & k_in(offs_k, K, EVEN_K)[None, :], other=0.0,
                    eviction_policy="evict_first" if EVICT else "")
        if QUANT_IN == 2:       # the next tile's rows loaded one tile ahead (registers double-buffer them)
            xr_next = rows_tile(a_rows, row_ok, t + 1, t1, K, BLOCK_K, EVEN_K)
            a = rows_codes(xr, xs, FP8_DOT, dot_t)
            xr = xr_next
        elif QUANT_IN:   # the next tile's row loaded one tile ahead (registers double-buffer it)
            xr_next = _row_tile(x_ptr, tl.minimum(t + 1, t1 - 1), K, BLOCK_K, EVEN_K)
            q = tl.where(first, round_e4m3(tl.math.div_rn(xr, xs[:, None])), 0.0)   # (rounding [1, BK], not
            xr = xr_next                                                             # [16, BK]: R19, 8.0 vs 7.4 us)
            a = q.to(tl.float8e4nv) if FP8_DOT else q.to(dot_t)
        else:
            a = act_codes_tile(a_rows, row_ok, t * BLOCK_K, K, BLOCK_K, FP8_DOT, HW_FP8, dot_t, EVEN_K)
        acc = code_product(fp8_operand(w, FP8_DOT, HW_FP8, dot_t), tl.trans(a), acc, FP8_DOT, DOT_F32, BLOCK_K)
    if QUANT_IN:
        ws = tl.load(s_ptr + offs_n * stride_sn, mask=offs_n < N, other=0.0)
        y = tl.trans(acc) * xs[:, None] * ws[None, :]
    else:
        y = fp8_codes_scale(tl.trans(acc), as_ptr, offs_m, row_ok, offs_n, s_ptr, N, stride_sn, 1, A_CODES)
    finish_tile(y, part_ptr, cnt_ptr, pid_m * tl.num_programs(0) + pid_n, pid_k, b_ptr, y_ptr, offs_m, offs_n,
                M, N, stride_ym, SPLIT_K, HAS_BIAS, DOT_F32)
    if COOP:
        coop_done(sync_ptr)


@triton.jit
def coop_token_codes(xin_ptr, codes_ptr, scales_ptr, sync_ptr, M, K, stride_m, CHUNK: tl.constexpr,
                     SPIN: tl.constexpr = False):
    """Per-token FP8 codes of x [M, K] (layer dtype, row stride stride_m) computed by the programs of the
    grid calling it, into codes [M, K] (uint8, the same row stride) and scales [M] (fp32): the codes and
    scales act_qdq_kernel writes (CODES, ACT 2). Then every program waits until all rows are written.

    sync_ptr: three int32 counters, zero between launches (coop_done resets them). Each program claims
    rows from [0] (an atomic add: the next row) and quantizes them until no row is left, adding one to
    [1] per row written; then it waits for [1] to reach M. A program waits only once every row has been
    claimed, and a row is claimed only by a running program that finishes it without waiting, so no
    program ever waits on one that has not started: no deadlock whatever the hardware runs at once
    (other kernels on the GPU, a small grid, Triton's CPU interpreter running programs one by one).
    A row's amax and codes come from chunks of CHUNK (one load per chunk; a row that fits one chunk is
    loaded once). SPIN: the waiters poll with sleeping acquire loads (pdl.wait_until_at_least) instead
    of atomics."""
    row = tl.atomic_add(sync_ptr, 1)
    while row < M:
        xr = xin_ptr + row * stride_m       # (M <= a few hundred rows: int32 offsets)
        cr = codes_ptr + row * stride_m
        offs = tl.arange(0, CHUNK)
        x = tl.load(xr + offs[None, :], mask=(offs < K)[None, :], other=0.0).to(tl.float32)
        amax = tl.max(tl.abs(x), axis=1)
        for c in range(CHUNK, K, CHUNK):
            xc = tl.load(xr + c + offs[None, :], mask=(c + offs < K)[None, :], other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.max(tl.abs(xc), axis=1))
        q, s = quantize_tile_codes(x, amax, 2, scales_ptr)
        tl.store(cr + offs[None, :], _code_bytes(e4m3_encode(q, x), cr), mask=(offs < K)[None, :])
        for c in range(CHUNK, K, CHUNK):
            xc = tl.load(xr + c + offs[None, :], mask=(c + offs < K)[None, :], other=0.0).to(tl.float32)
            qc, sc = quantize_tile_codes(xc, amax, 2, scales_ptr)
            tl.store(cr + c + offs[None, :], _code_bytes(e4m3_encode(qc, xc), cr), mask=(c + offs < K)[None, :])
        tl.store(scales_ptr + row + tl.zeros([1], tl.int32), s)
        tl.debug_barrier()                       # every thread's codes written before the release
        tl.atomic_add(sync_ptr + 1, 1, sem="release")
        row = tl.atomic_add(sync_ptr, 1)
    if SPIN:                                     # acquire loads with a sleep between them (inline PTX)
        wait_until_at_least(sync_ptr + 1, M)
    else:                                        # atomic reads (what Triton's CPU interpreter runs)
        done = tl.atomic_add(sync_ptr + 1, 0, sem="acquire")
        while done < M:
            done = tl.atomic_add(sync_ptr + 1, 0, sem="acquire")
    tl.debug_barrier()                           # no thread reads codes before the acquire


@triton.jit
def _code_bytes(codes, ptr):
    """int32 code bytes as the element type of ptr (uint8, or float8e4nv where the GEMM multiplies float8)."""
    return codes.to(tl.uint8).to(ptr.dtype.element_ty, bitcast=True)


@triton.jit
def coop_done(sync_ptr):
    """The last program of a coop_token_codes grid to finish zeroes its counters for the next launch
    (a CUDA-graph replay finds them at zero, as finish_tile's split-K counters)."""
    total = tl.num_programs(0) * tl.num_programs(1) * tl.num_programs(2)
    gone = tl.atomic_add(sync_ptr + 2, 1)
    if gone == total - 1:
        tl.atomic_xchg(sync_ptr, 0)
        tl.atomic_xchg(sync_ptr + 1, 0)
        tl.atomic_xchg(sync_ptr + 2, 0)


@triton.jit
def _row_tile(x_ptr, t, K, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """K tile t of one activation row as fp32 [1, BLOCK_K] (zeros past K)."""
    offs_k = t * BLOCK_K + tl.arange(0, BLOCK_K)
    return tl.load(x_ptr + offs_k[None, :], mask=k_in(offs_k, K, EVEN_K)[None, :], other=0.0).to(tl.float32)


@triton.jit
def dequant_kernel(w_ptr, s_ptr, z_ptr, g_ptr, out_ptr, N, K, stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                   ELEM: tl.constexpr, PACK: tl.constexpr, GROUP: tl.constexpr, SCALE_ROWS: tl.constexpr,
                   HAS_ZERO: tl.constexpr, HW_FP8: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   EXACT_BF16: tl.constexpr, OUT_F16: tl.constexpr, WORDS: tl.constexpr = False,
                   KN: tl.constexpr = False):
    """The whole weight W [N, K] in the layer dtype, each value x its scale rounded as the reference
    dequantizes it (the large-M path multiplies it with cuBLAS: launch.DenseGemm.dequant_mm).
    Grid (N / BLOCK_N, K / BLOCK_K)."""
    io_t = tl.float16 if OUT_F16 else tl.bfloat16
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    k0 = tl.program_id(1) * BLOCK_K
    offs_k = k0 + tl.arange(0, BLOCK_K)
    mask = (offs_n < N)[:, None] & (offs_k < K)[None, :]
    if ELEM == 0:
        codes = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :] * stride_wk, mask=mask, other=0)
        s = tl.load(s_ptr + (offs_n // SCALE_ROWS)[:, None] * stride_sn + (offs_k // GROUP)[None, :] * stride_sk,
                    mask=mask, other=0.0)
        w = to_dtype(fp8_operand(codes, False, HW_FP8, tl.float32).to(tl.float32) * s, io_t, EXACT_BF16)
    elif WORDS:
        gscale = 1.0
        if ELEM == 2:
            gscale = tl.load(g_ptr)
        u, s, z = words_tile_load(k0, offs_n, w_ptr, s_ptr, z_ptr, K, N, stride_wn, stride_wk, stride_sn, stride_sk,
                                  stride_zk, ELEM, HAS_ZERO, GROUP, BLOCK_N, BLOCK_K, False, KN)
        w = words_tile_decode(u, s, z, gscale, ELEM, GROUP, BLOCK_N, BLOCK_K, io_t, KN)
    else:
        gscale = 1.0
        if ELEM == 2:
            gscale = tl.load(g_ptr)
        w = w4_tile(k0, offs_n, w_ptr, s_ptr, z_ptr, gscale, K, N, stride_wn, stride_wk, stride_sn, stride_sk,
                    stride_zk, ELEM, PACK, GROUP, HAS_ZERO, BLOCK_N, BLOCK_K, io_t, EXACT_BF16)
    tl.store(out_ptr + offs_n[:, None] * K + offs_k[None, :], w, mask=mask)


@triton.jit
def tensor_scale_kernel(x_ptr, s_ptr, numel, DIV: tl.constexpr, BLOCK: tl.constexpr):
    """The dynamic per-tensor scale of x (numel contiguous values) in one program: amax / DIV (IEEE
    division), 1 where the amax is 0: linear.dynamic_tensor_scale's value (a NaN is not propagated:
    its activations poison the product anyway). For small activations only (launch.tensor_scale)."""
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, numel, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        amax = tl.maximum(amax, tl.abs(tl.load(x_ptr + offs, mask=offs < numel, other=0.0).to(tl.float32)))
    s = tl.math.div_rn(tl.max(amax, axis=0), DIV)
    tl.store(s_ptr, tl.where(s > 0, s, 1.0))


@triton.jit
def tensor_scale_wide_kernel(x_ptr, s_ptr, state_ptr, numel, DIV: tl.constexpr, BLOCK: tl.constexpr):
    """tensor_scale_kernel's value for large activations, over many programs: each takes the amax of its
    strided share of x and merges it into state_ptr[0] (the fp32 bits as int32: non-negative floats order as
    their bits) by an atomic max; the last program to arrive (the counter state_ptr[1]) turns the amax into
    the scale and sets both back to zero, so the next call (or a graph replay) starts clean."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(pid * BLOCK, numel, programs * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        amax = tl.maximum(amax, tl.abs(tl.load(x_ptr + offs, mask=offs < numel, other=0.0).to(tl.float32)))
    tl.atomic_max(state_ptr, tl.max(amax, axis=0).to(tl.int32, bitcast=True))
    arrived = tl.atomic_add(state_ptr + 1, 1)          # after this program's max (acq_rel)
    if arrived == programs - 1:
        a = tl.atomic_xchg(state_ptr, 0).to(tl.float32, bitcast=True)
        s = tl.math.div_rn(a, DIV)
        tl.store(s_ptr, tl.where(s > 0, s, 1.0))
        tl.atomic_xchg(state_ptr + 1, 0)
