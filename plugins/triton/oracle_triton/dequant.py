"""Triton device functions shared by the dense GEMM and the fused MoE.

Decoding is done with integer arithmetic and bit casts (no lookup tables), so the same
code runs compiled on any capability >= 8.0 and in the Triton interpreter on CPU:
  E2M1 code c: magnitude 0, 0.5 (exponent field 0) or 2**(e-1) * (1 + m/2)
  E4M3 byte:   2**(e-7) * (1 + m/8), subnormal 2**-6 * m/8 (NaN bytes are rejected on load)
  E8M0 byte:   2**(b-127) (byte 0 is 2**-127, as oracle-emulation decodes it)
Activation rounding to E4M3 is round-to-nearest-even with saturation at 448, computed by
scaling to the element's quantum and the 1.5*2**23 trick: what torch's saturating cast
(oracle-emulation's fp8.to_e4m3) gives, bit for bit.
"""
from __future__ import annotations

import triton
import triton.language as tl

from oracle.formats import E4M3_MAX

_E4M3_MAX = tl.constexpr(E4M3_MAX)   # the format's limit, as a compile-time constant for the kernels


@triton.jit
def e2m1_decode(c):
    """int32 codes 0..15 -> float32 values."""
    mag = c & 7
    e = mag >> 1
    m = mag & 1
    normal = (((e + 126) << 23) | (m << 22)).to(tl.float32, bitcast=True)
    v = tl.where(e == 0, m.to(tl.float32) * 0.5, normal)
    return tl.where((c & 8) != 0, -v, v)


@triton.jit
def e4m3_decode(b):
    """int32 bytes 0..255 -> float32 values."""
    e = (b >> 3) & 15
    m = b & 7
    normal = (((e + 120) << 23) | (m << 20)).to(tl.float32, bitcast=True)
    v = tl.where(e == 0, m.to(tl.float32) * 0.001953125, normal)
    return tl.where((b & 128) != 0, -v, v)


@triton.jit
def e8m0_decode(b):
    """int32 bytes -> float32 powers of two."""
    return tl.where(b == 0, 0x00400000, b << 23).to(tl.float32, bitcast=True)


@triton.jit
def round_e4m3(v):
    """float32 -> float32 on the E4M3 grid (round half to even, saturating at +-448)."""
    a = tl.minimum(tl.abs(v), _E4M3_MAX)
    e = ((a.to(tl.int32, bitcast=True) >> 23) & 255) - 127
    e = tl.maximum(e, -6)
    quantum = ((e - 3 + 127) << 23).to(tl.float32, bitcast=True)
    inv = ((3 - e + 127) << 23).to(tl.float32, bitcast=True)
    r = ((a * inv + 12582912.0) - 12582912.0) * quantum
    return tl.where(v < 0, -r, r)


@triton.jit
def e4m3_values(codes, HW_FP8: tl.constexpr):
    """uint8 E4M3 codes -> their fp32 values: the hardware conversion (>= 8.9) or e4m3_decode's integer steps
    (the interpreter, older GPUs)."""
    if HW_FP8:
        out = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    else:
        out = e4m3_decode(codes.to(tl.int32))
    return out


@triton.jit
def e4m3_rounded(v, HW_FP8: tl.constexpr):
    """fp32 -> the value of its E4M3 code (round half to even, saturating): cvt.rn.satfinite on >= 8.9, or
    round_e4m3's integer steps."""
    if HW_FP8:
        out = v.to(tl.float8e4nv).to(tl.float32)
    else:
        out = round_e4m3(v)
    return out


@triton.jit
def fp8_scale(amax):
    """amax / 448 (IEEE division, as oracle-emulation), 1 where the amax is 0."""
    s = tl.math.div_rn(amax, _E4M3_MAX)
    return tl.where(s > 0, s, 1.0)


@triton.jit
def tile_product(a_rows, row_ok, k0, offs_n, w_ptr, s_ptr, z_ptr, gscale, K, N,
                 stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                 ELEM: tl.constexpr, PACK: tl.constexpr, GROUP: tl.constexpr, SCALE_ROWS: tl.constexpr,
                 HAS_ZERO: tl.constexpr, HW_FP8: tl.constexpr, EXACT_W: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_KU: tl.constexpr,
                 io_t: tl.constexpr, dot_t: tl.constexpr, DOT_F32: tl.constexpr):
    """A[rows, k0 : k0 + PACK*BLOCK_KU] @ dequant(W[offs_n, same k])^T, fp32 [BLOCK_M, BLOCK_N].

    The packed weight tile [BLOCK_KU units, BLOCK_N] is loaded once (vectorized along the
    storage's contiguous dim); each of the PACK nibbles of a unit is decoded to its own
    sub-tile (k = PACK*j + i) and multiplied with the matching strided columns of A, so
    nothing is shuffled in registers. 4-bit values are scaled per group as the reference
    does (value * scale, rounded to the operand dtype); FP8's scale is constant over the
    tile and multiplies the product, or (EXACT_W: W8A8, the reference rounds dequantized
    weights) each weight first.
    """
    offs_j = k0 // PACK + tl.arange(0, BLOCK_KU)
    j = offs_j[:, None]
    n = offs_n[None, :]
    mask = (j < K // PACK) & (n < N)
    units = tl.load(w_ptr + n * stride_wn + j * stride_wk, mask=mask, other=0)
    if ELEM == 0:
        ts = tl.load(s_ptr + (offs_n // SCALE_ROWS) * stride_sn + (k0 // GROUP) * stride_sk,
                     mask=offs_n < N, other=0.0)
    else:
        # one scale (and zero point) per GROUP along K: load the [G, BN] group tile once and
        # broadcast it over its rows (a per-element gather of the scales is not vectorizable)
        G: tl.constexpr = BLOCK_KU * PACK // GROUP
        g = (k0 // GROUP + tl.arange(0, G))[:, None]
        gmask = (g < K // GROUP) & (n < N)
        sg = group_scales(tl.load(s_ptr + n * stride_sn + g * stride_sk, mask=gmask, other=0), gscale, ELEM)
        sf = tl.reshape(tl.broadcast_to(sg[:, None, :], [G, BLOCK_KU // G, BLOCK_N]), [BLOCK_KU, BLOCK_N])
        if ELEM == 3:
            if HAS_ZERO:
                zw = tl.load(z_ptr + g * stride_zk + n // 8, mask=gmask, other=0)
                zg = ((zw >> ((n % 8) * 4)) & 15).to(tl.float32)
                zero = tl.reshape(tl.broadcast_to(zg[:, None, :], [G, BLOCK_KU // G, BLOCK_N]), [BLOCK_KU, BLOCK_N])
            else:
                zero = 8.0
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for i in tl.static_range(PACK):
        kk = offs_j * PACK + i
        x = tl.load(a_rows + kk[None, :], mask=row_ok[:, None] & (kk[None, :] < K), other=0.0)
        if ELEM == 0:
            if HW_FP8:
                w = units.to(tl.float8e4nv, bitcast=True).to(tl.float32)
            else:
                w = e4m3_decode(units.to(tl.int32))
            if EXACT_W:
                w = w * ts[None, :]
        elif ELEM == 3:
            w = (((units >> (4 * i)) & 15).to(tl.float32) - zero) * sf
        else:
            w = e2m1_decode((units.to(tl.int32) >> (4 * i)) & 15) * sf
        acc += mma(x.to(dot_t), to_dtype(w, io_t, DOT_F32).to(dot_t), DOT_F32)
    if ELEM == 0 and not EXACT_W:
        acc = acc * ts[None, :]
    return acc


@triton.jit
def e4m3_encode(q, sign_of):
    """float32 values already on the E4M3 grid (round_e4m3's output) -> int32 bytes 0..255, with
    the sign bit of sign_of (the value before rounding: what a float8 cast keeps, -0 included,
    where round_e4m3 returns +0).

    Integer arithmetic on the bits (no float8 cast, so the interpreter runs it too):
    normal 2**(e-7) * (1 + m/8) -> (e << 3) | m; subnormal m * 2**-9 -> m; sign in bit 7."""
    a = tl.abs(q)
    ab = a.to(tl.int32, bitcast=True)
    e = (ab >> 23) - 120
    normal = (e << 3) | ((ab >> 20) & 7)
    sub = (a * 512.0).to(tl.int32)
    code = tl.where(e >= 1, normal, sub)
    return tl.where(sign_of.to(tl.int32, bitcast=True) < 0, code | 128, code)


@triton.jit
def fp8_operand(codes, FP8_DOT: tl.constexpr, HW_FP8: tl.constexpr, dot_t: tl.constexpr):
    """A tile of E4M3 codes as a dot operand: the float8 tile itself (FP8_DOT: loaded through a
    float8 pointer), else its values in dot_t (exact: every E4M3 value is a bf16/fp16 value)."""
    if FP8_DOT:
        op = codes
    elif HW_FP8:
        op = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32).to(dot_t)
    else:
        op = e4m3_decode(codes.to(tl.int32)).to(dot_t)
    return op


@triton.jit
def code_product(a, w, acc, FP8_DOT: tl.constexpr, DOT_F32: tl.constexpr, BLOCK_K: tl.constexpr,
                 FASTACC: tl.constexpr = False):
    """acc + codes(A) @ codes(W) of one K tile, fp32. The products of two E4M3 values are exact in
    fp32; the float8 tensor-core dot is told to promote its partial sums to fp32 every BLOCK_K
    (Hopper otherwise keeps them in a narrower accumulator over the whole loop). FASTACC: it is not
    (Triton's own sm_90 default, what gemlite and vLLM's CUTLASS FP8FastAccum kernels run): no second
    accumulator and no wait for it, at the narrower accumulator's precision over the whole K loop."""
    if FP8_DOT and FASTACC:
        out = tl.dot(a, w, acc)
    elif FP8_DOT:
        out = tl.dot(a, w, acc, max_num_imprecise_acc=BLOCK_K)
    else:
        out = mma_acc(a, w, acc, DOT_F32)
    return out


@triton.jit
def k_in(offs, limit, EVEN_K: tl.constexpr):
    """offs < limit along K; EVEN_K (K a multiple of BLOCK_K, checked on the host): all true, a
    constant the compiler folds out of the load masks."""
    if EVEN_K:
        ok = tl.full(offs.shape, 1, tl.int1)
    else:
        ok = offs < limit
    return ok


@triton.jit
def act_tile(a_rows, row_ok, k0, K, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr = False):
    """A[rows, k0 : k0 + BLOCK_K] as stored (zeros past K and in rows not ok)."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    return tl.load(a_rows + offs_k[None, :], mask=row_ok[:, None] & k_in(offs_k, K, EVEN_K)[None, :], other=0.0)


@triton.jit
def act_codes_tile(a_rows, row_ok, k0, K, BLOCK_K: tl.constexpr, FP8_DOT: tl.constexpr, HW_FP8: tl.constexpr,
                   dot_t: tl.constexpr, EVEN_K: tl.constexpr = False):
    """The activation codes A[rows, k0 : k0 + BLOCK_K] as a dot operand (W8A8)."""
    return fp8_operand(act_tile(a_rows, row_ok, k0, K, BLOCK_K, EVEN_K), FP8_DOT, HW_FP8, dot_t)


@triton.jit
def act_row_scale(as_ptr, a_idx, row_ok, k0, stride_as, A_CODES: tl.constexpr):
    """Activation scales [BM] of the rows a_idx at K offset k0: per 1x128 group ([K/128, M],
    group stride stride_as), per token ([M]) or per tensor ([1])."""
    if A_CODES == 1:
        return tl.load(as_ptr + (k0 // 128) * stride_as + a_idx, mask=row_ok, other=0.0)
    if A_CODES == 2:
        return tl.load(as_ptr + a_idx, mask=row_ok, other=0.0)
    return tl.load(as_ptr + tl.zeros_like(a_idx))


@triton.jit
def fp8_tile_scales(as_ptr, a_idx, row_ok, stride_as, k0, offs_n, n0, s_ptr, N, stride_sn, stride_sk,
                    A_CODES: tl.constexpr, GROUP: tl.constexpr, SCALE_ROWS: tl.constexpr, UNIFORM_WS: tl.constexpr):
    """The activation scales [BM] and weight scales [BN] of the K tile at k0 (W8A8 with scales
    that change along K); the kernels load them one tile ahead, so their latency hides behind
    the current tile's MMA. UNIFORM_WS: all the tile's weight rows lie in one 128-row scale block
    (the host checks it), that of row n0: one scalar instead of a per-column gather."""
    if UNIFORM_WS:
        ws = tl.load(s_ptr + (n0 // SCALE_ROWS) * stride_sn + (k0 // GROUP) * stride_sk)
    else:
        ws = tl.load(s_ptr + (offs_n // SCALE_ROWS) * stride_sn + (k0 // GROUP) * stride_sk, mask=offs_n < N,
                     other=0.0)
    return act_row_scale(as_ptr, a_idx, row_ok, k0, stride_as, A_CODES), ws


@triton.jit
def fp8_codes_product(acc, a, xs, ws, k0, offs_n, w_ptr, K, N, stride_wn, stride_wk, PER_TILE: tl.constexpr,
                      HW_FP8: tl.constexpr, FP8_DOT: tl.constexpr, BLOCK_K: tl.constexpr, dot_t: tl.constexpr,
                      DOT_F32: tl.constexpr, UNIFORM_WS: tl.constexpr = False, EVEN_K: tl.constexpr = False,
                      PROMO: tl.constexpr = False, FASTACC: tl.constexpr = False):
    """W8A8, one K tile: acc + codes(A) [BM, BK] @ codes(W[offs_n, k0:k0+BK])^T, fp32.

    PER_TILE (scales that change along K: 1x128 activation groups or 128x128 weight blocks;
    BLOCK_K divides 128): the tile's product times its activation scales xs [BM] and weight
    scales ws [BN] (fp8_tile_scales; UNIFORM_WS: one scalar, folded into xs: one FMA per
    element). Else the product accumulates inside the dot, unscaled (both scales are constant
    along K: fp8_codes_scale applies them once to the sum). PROMO (scales constant along K): the tile's product
    into a zero accumulator, then added to acc, which is how the float8 dot promotes every BLOCK_K anyway; written
    out, Triton waits on the tile's MMAs once (sm_90: one WARPGROUP.DEPBAR a K tile) where the dot's own promotion
    waits on each 64-row MMA of a 128-row tile on one warpgroup (8 a K tile; sm90_compile.py's dense). FASTACC
    (scales constant along K): no promotion at all (code_product), a measurement option the tuned table refuses.

    Differs from the reference (which rounds dequantized weights and activations to the layer
    dtype before its product) only by those two 2**-9-relative roundings: the code products
    are exact in fp32 and summed in fp32."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    w = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :] * stride_wk,
                mask=(offs_n < N)[:, None] & k_in(offs_k, K, EVEN_K)[None, :], other=0.0)
    wt = tl.trans(fp8_operand(w, FP8_DOT, HW_FP8, dot_t))
    if PER_TILE:
        p = code_product(a, wt, tl.zeros_like(acc), FP8_DOT, DOT_F32, BLOCK_K)
        if UNIFORM_WS:
            out = acc + p * (xs * ws)[:, None]
        else:
            out = acc + p * xs[:, None] * ws[None, :]
    elif PROMO:
        out = acc + code_product(a, wt, tl.zeros_like(acc), FP8_DOT, DOT_F32, BLOCK_K)
    else:
        out = code_product(a, wt, acc, FP8_DOT, DOT_F32, BLOCK_K, FASTACC)
    return out


@triton.jit
def fp8_codes_scale(acc, as_ptr, a_idx, row_ok, offs_n, s_ptr, N, stride_sn, SCALE_ROWS: tl.constexpr,
                    A_CODES: tl.constexpr):
    """The sum of unscaled code products times the per-row activation and per-column weight scales."""
    ws = tl.load(s_ptr + (offs_n // SCALE_ROWS) * stride_sn, mask=offs_n < N, other=0.0)
    return acc * act_row_scale(as_ptr, a_idx, row_ok, 0, 0, A_CODES)[:, None] * ws[None, :]


@triton.jit
def w4_product(acc, x, k0, offs_n, w_ptr, s_ptr, z_ptr, gscale, K, N,
               stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
               ELEM: tl.constexpr, PACK: tl.constexpr, GROUP: tl.constexpr, HAS_ZERO: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, io_t: tl.constexpr, dot_t: tl.constexpr,
               DOT_F32: tl.constexpr, EVEN_K: tl.constexpr = False):
    """acc + x [BM, BK] (dot_t, contiguous K tile at k0) @ the dequantized 4-bit tile (w4_tile)^T,
    accumulated inside the dot (fp32)."""
    w = w4_tile(k0, offs_n, w_ptr, s_ptr, z_ptr, gscale, K, N, stride_wn, stride_wk, stride_sn, stride_sk,
                stride_zk, ELEM, PACK, GROUP, HAS_ZERO, BLOCK_N, BLOCK_K, io_t, DOT_F32, EVEN_K)
    return mma_acc(x, tl.trans(w.to(dot_t)), acc, DOT_F32)


@triton.jit
def nibble_tile(units, PACK: tl.constexpr):
    """int32 storage units [R, U] (PACK 4-bit codes each, low nibble first) -> codes [R, U*PACK]
    in element order (k = PACK*j + i), by interleaving along the last dim (register-local)."""
    if PACK == 2:
        codes = tl.interleave(units & 15, (units >> 4) & 15)
    else:
        n0, n1, n2, n3 = units & 15, (units >> 4) & 15, (units >> 8) & 15, (units >> 12) & 15
        n4, n5, n6, n7 = (units >> 16) & 15, (units >> 20) & 15, (units >> 24) & 15, (units >> 28) & 15
        even = tl.interleave(tl.interleave(n0, n4), tl.interleave(n2, n6))
        odd = tl.interleave(tl.interleave(n1, n5), tl.interleave(n3, n7))
        codes = tl.interleave(even, odd)
    return codes


@triton.jit
def w4_tile(k0, offs_n, w_ptr, s_ptr, z_ptr, gscale, K, N,
            stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
            ELEM: tl.constexpr, PACK: tl.constexpr, GROUP: tl.constexpr, HAS_ZERO: tl.constexpr,
            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, io_t: tl.constexpr, DOT_F32: tl.constexpr,
            EVEN_K: tl.constexpr = False):
    """The whole dequantized 4-bit weight tile W[offs_n, k0 : k0 + BLOCK_K] as [BLOCK_N, BLOCK_K]
    in io_t, k in order, so one dot with a contiguous activation tile covers the K tile (large M;
    tile_product's per-nibble dots read the activations at stride PACK instead).

    Values as the reference dequantizes them: code value times its group scale in fp32, rounded
    to the layer dtype (MXFP4's power-of-two scales are exact; NVFP4/INT4 round like the reference)."""
    BLOCK_KU: tl.constexpr = BLOCK_K // PACK
    G: tl.constexpr = BLOCK_K // GROUP
    n = offs_n[:, None]
    j = (k0 // PACK + tl.arange(0, BLOCK_KU))[None, :]
    units = tl.load(w_ptr + n * stride_wn + j * stride_wk, mask=(n < N) & k_in(j, K // PACK, EVEN_K), other=0)
    codes = nibble_tile(units.to(tl.int32), PACK)
    g = (k0 // GROUP + tl.arange(0, G))[None, :]
    gmask = (n < N) & k_in(g, K // GROUP, EVEN_K)
    sg = group_scales(tl.load(s_ptr + n * stride_sn + g * stride_sk, mask=gmask, other=0), gscale, ELEM)
    sf = tl.reshape(tl.broadcast_to(sg[:, :, None], [BLOCK_N, G, GROUP]), [BLOCK_N, BLOCK_K])
    if ELEM == 3:
        if HAS_ZERO:
            zw = tl.load(z_ptr + g * stride_zk + n // 8, mask=gmask, other=0)
            zg = ((zw >> ((n % 8) * 4)) & 15).to(tl.float32)
            zero = tl.reshape(tl.broadcast_to(zg[:, :, None], [BLOCK_N, G, GROUP]), [BLOCK_N, BLOCK_K])
        else:
            zero = 8.0
        w = (codes.to(tl.float32) - zero) * sf
    else:
        w = e2m1_bits(codes) * sf
    return to_dtype(w, io_t, DOT_F32)


@triton.jit
def e2m1_bits(c):
    """int32 codes 0..15 -> float32 values, as e2m1_decode but from the bits alone (no int->float
    conversion, no negation; fewer instructions for the large-M whole-tile decode): magnitude
    code 2e+m >= 2 is 2**(e-1) * (1 + m/2), i.e. bits (code << 22) + (126 << 23); codes 0 and 1
    are 0 and 0.5 (bits code * 0x3F000000); the sign bit is code bit 3 (code 8 is -0)."""
    mag = c & 7
    bits = tl.where(mag >= 2, (mag << 22) + 0x3F000000, mag * 0x3F000000)
    return (bits | ((c & 8) << 28)).to(tl.float32, bitcast=True)


@triton.jit
def int4_group_row(s_ptr, z_ptr, g, offs_n, n_ok, stride_sk, stride_zk, HAS_ZERO: tl.constexpr):
    """GPTQ group row g's scales [BN] (as stored) and zero points [BN] (int32 0..15; 8 without
    HAS_ZERO) for the weight rows offs_n: the scales [K/group, N], the zero points packed 8 rows
    per int32 word [K/group, N/8]."""
    s = tl.load(s_ptr + g * stride_sk + offs_n, mask=n_ok, other=0.0)
    if HAS_ZERO:
        zw = tl.load(z_ptr + g * stride_zk + offs_n // 8, mask=n_ok, other=0)
        z = (zw >> ((offs_n % 8) * 4)) & 15
    else:
        z = tl.full(offs_n.shape, 8, tl.int32)
    return s, z


@triton.jit
def group_scales(sraw, gscale, ELEM: tl.constexpr):
    """Stored 4-bit group scales -> float32: E8M0 (MXFP4), E4M3 times the global scale (NVFP4),
    fp16/bf16/fp32 as stored (INT4)."""
    if ELEM == 1:
        sg = e8m0_decode(sraw.to(tl.int32))
    elif ELEM == 2:
        sg = e4m3_decode(sraw.to(tl.int32)) * gscale
    else:
        sg = sraw.to(tl.float32)
    return sg


@triton.jit
def group_scales_hw(sraw, gscale, ELEM: tl.constexpr):
    """group_scales for E2M1 weights where the hardware converts FP8 (capability >= 8.9, compiled
    only): NVFP4's E4M3 bytes by cvt instead of integer decoding (the word-layout kernels decode a
    scale per word or per group, where the integer decode is a tenth of the instructions)."""
    if ELEM == 2:
        sg = sraw.to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32) * gscale
    else:
        sg = group_scales(sraw, gscale, ELEM)
    return sg


@triton.jit
def round_e2m1(v):
    """float32 -> float32 on the E2M1 grid (0, 0.5, ..., 6; half to even; saturating)."""
    a = tl.minimum(tl.abs(v), 6.0)
    r = tl.where(a < 2.0, ((a * 2.0 + 12582912.0) - 12582912.0) * 0.5,
                 tl.where(a < 4.0, (a + 12582912.0) - 12582912.0, ((a * 0.5 + 12582912.0) - 12582912.0) * 2.0))
    return tl.where(v < 0, -r, r)


@triton.jit
def quotient_by_reciprocal(a, b, y):
    """a / b rounded to nearest, from y = 1 / b rounded to nearest: q0 = a * y is within two ulps of a / b, one
    FMA gives its residual a - b * q0 and a second q0 + residual * y, the correctly rounded quotient (Markstein's
    correction). tests/test_triton_quotient.py checks the two FMAs' arithmetic against the IEEE division on NVFP4's
    quotients (|a / b| <= 6.5, E2M1's ties and their neighbours, divisors with extreme mantissas); the GPU test
    checks the kernel's bits. Three instructions against the division's sequence and its slow-path check; y is
    shared by a 16-group. Needs a fused FMA: the interpreter's rounds twice, so it runs on GPUs only. A zero a gives
    +0 (the residual's +0 added to q0's -0), where the division keeps -0's sign."""
    q0 = a * y
    return tl.math.fma(tl.math.fma(-b, q0, a), y, q0)


#: Scales s for which scaled_quotients takes x / s from 1 / s: the reciprocal, and every residual of a quotient an
#: E4M3 code can tell from zero (|x / s| >= 2**-11), stay normal floats, so the steps are those of the scaled-down
#: case tests/test_triton_quotient.py checks for every bf16 dividend and every per-token scale.
FAST_SCALE_MIN = tl.constexpr(2.0 ** -60)
FAST_SCALE_MAX = tl.constexpr(2.0 ** 60)


@triton.jit
def scaled_quotients(x, s, s_lo, s_hi, FAST_DIV: tl.constexpr):
    """x / s rounded to nearest, s > 0 broadcast to x (a row's scale, or a column [BM, 1] of a tile's rows' scales,
    each amax / 448 of bf16 values) and s_lo / s_hi its smallest and largest value (scalars): with FAST_DIV (a GPU's
    fused FMA) by quotient_by_reciprocal from one reciprocal per scale, where every scale lies in [2**-60, 2**60];
    the IEEE division otherwise and in the interpreter. About 4 instructions an element against the division's ~25."""
    if FAST_DIV:
        if (s_lo >= FAST_SCALE_MIN) & (s_hi <= FAST_SCALE_MAX):
            q = quotient_by_reciprocal(x, s, tl.math.div_rn(1.0, s))
            # s > 0: the quotient has x's sign; or-ing x's sign bit in gives -0 for x = -0 (as the division does)
            q = (q.to(tl.int32, bitcast=True) | (x.to(tl.int32, bitcast=True) & -2147483648)).to(tl.float32,
                                                                                                bitcast=True)
        else:
            q = tl.math.div_rn(x, s)
    else:
        q = tl.math.div_rn(x, s)
    return q


@triton.jit
def e4m3_bytes(v, HW_FP8: tl.constexpr):
    """fp32 -> the E4M3 byte (uint8) of its rounding (half to even, saturating at +-448, the sign of -0 kept):
    cvt.rn.satfinite on >= 8.9, round_e4m3 + e4m3_encode's integer steps otherwise (the interpreter, older GPUs)."""
    if HW_FP8:
        c = v.to(tl.float8e4nv).to(tl.uint8, bitcast=True)
    else:
        c = e4m3_encode(round_e4m3(v), v).to(tl.uint8)
    return c


@triton.jit
def quantize_tile(x, amax_rows, ACT: tl.constexpr, xs_ptr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
                  FAST_DIV: tl.constexpr = False):
    """Prologue activation quantize-dequantize of an fp32 tile x [BM, BK] (oracle-emulation's rounding).

    ACT 1: FP8, one 1x128 group = this tile (BK == 128); 2: FP8 per token, amax_rows
    precomputed over the whole row; 3: FP8 per tensor, scale at xs_ptr; 4: NVFP4, E4M3 scale
    per 16 along K times the global scale at xs_ptr. Returns fp32 values (codes x scales).
    FAST_DIV (ACT 4, a GPU's fused FMA): the elements' quotients by quotient_by_reciprocal.
    """
    if ACT == 4:
        gs = tl.load(xs_ptr)
        blocks = tl.reshape(x, [BLOCK_M, BLOCK_K // 16, 16])
        amax = tl.max(tl.abs(blocks), axis=2)
        s = round_e4m3(tl.math.div_rn(tl.math.div_rn(amax, 6.0), gs)) * gs
        safe = tl.where(s > 0, s, 1.0)
        if FAST_DIV:
            ratio = quotient_by_reciprocal(blocks, safe[:, :, None], tl.math.div_rn(1.0, safe)[:, :, None])
        else:
            ratio = tl.math.div_rn(blocks, safe[:, :, None])
        q = round_e2m1(ratio)
        return tl.reshape(q * s[:, :, None], [BLOCK_M, BLOCK_K])
    q, s = quantize_tile_codes(x, amax_rows, ACT, xs_ptr)
    return q * s[:, None]


@triton.jit
def tile_fp8_scales(x, amax_rows, ACT: tl.constexpr, xs_ptr):
    """The row scales [BM] of an fp32 tile x [BM, BK] (ACT 1-3 as quantize_tile): its rows' amax / 448 (ACT 1, a
    1x128 group), amax_rows / 448 (ACT 2, per token), the per-tensor scale at xs_ptr (ACT 3)."""
    if ACT == 1:
        s = fp8_scale(tl.max(tl.abs(x), axis=1))
    elif ACT == 2:
        s = fp8_scale(amax_rows)
    else:
        s = tl.load(xs_ptr + tl.zeros_like(amax_rows).to(tl.int32))
    return s


@triton.jit
def quantize_tile_codes(x, amax_rows, ACT: tl.constexpr, xs_ptr):
    """FP8 rounding of an fp32 tile x [BM, BK] (ACT 1-3 as quantize_tile): the E4M3 values
    q [BM, BK] (float32 on the grid, before scaling) and the row scales s [BM]."""
    s = tile_fp8_scales(x, amax_rows, ACT, xs_ptr)
    return round_e4m3(tl.math.div_rn(x, s[:, None])), s


@triton.jit
def quantize_tile_bytes(x, amax_rows, ACT: tl.constexpr, xs_ptr, HW_FP8: tl.constexpr, FAST_DIV: tl.constexpr):
    """quantize_tile_codes' rounding as E4M3 bytes (uint8 [BM, BK]) and the row scales s [BM], in fewer
    instructions: e4m3_bytes' conversion and, with FAST_DIV (ACT 1 / 2 only: scales amax / 448 of bf16 values;
    a per-tensor scale may be any float), scaled_quotients' quotients. The same bytes as e4m3_encode of
    quantize_tile_codes' values."""
    s = tile_fp8_scales(x, amax_rows, ACT, xs_ptr)
    v = scaled_quotients(x, s[:, None], tl.min(s, axis=0), tl.max(s, axis=0), FAST_DIV and ACT != 3)
    return e4m3_bytes(v, HW_FP8), s


@triton.jit
def mma(a, b, DOT_F32: tl.constexpr):
    """a @ b with fp32 accumulation; float32 operands (the interpreter) multiply in IEEE fp32, not TF32."""
    if DOT_F32:
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def mma_acc(a, b, acc, DOT_F32: tl.constexpr):
    """acc + a @ b accumulated by the dot itself (so the MMA keeps its accumulator and runs
    asynchronously); IEEE fp32 for float32 operands, as mma."""
    if DOT_F32:
        out = tl.dot(a, b, acc, input_precision="ieee")
    else:
        out = tl.dot(a, b, acc)
    return out


@triton.jit
def to_dtype(v, dtype: tl.constexpr, EXACT_BF16: tl.constexpr):
    """Cast float32 -> dtype. Triton's interpreter truncates fp32 -> bf16; EXACT_BF16 rounds
    to nearest even by hand first (what the GPU's cvt.rn does), so CPU tests see GPU rounding."""
    if EXACT_BF16 and dtype == tl.bfloat16:
        bits = v.to(tl.int32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
        v = bits.to(tl.float32, bitcast=True)
    return v.to(dtype)


@triton.jit
def finish_tile(acc, part_ptr, cnt_ptr, tile, pid_k, b_ptr, y_ptr, offs_m, offs_n, M, N, stride_ym,
                SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr, EXACT_BF16: tl.constexpr):
    """Write an fp32 [BM, BN] result (+ bias) in y's dtype; with SPLIT_K > 1 `acc` is one K slice:
    it goes to the workspace and the last program of the tile to arrive (atomic counter) sums the
    slices in a fixed order and resets the counter (so a CUDA-graph replay finds it at zero)."""
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if SPLIT_K > 1:
        base = part_ptr + offs_m[:, None] * N + offs_n[None, :]
        tl.store(base + pid_k * M * N, acc, mask=mask)
        tl.debug_barrier()
        arrived = tl.atomic_add(cnt_ptr + tile, 1)
        if arrived == SPLIT_K - 1:
            acc = tl.zeros(acc.shape, dtype=tl.float32)
            for s in range(0, SPLIT_K):
                acc += tl.load(base + s * M * N, mask=mask, other=0.0, cache_modifier=".cg")
            _store(acc, b_ptr, y_ptr, offs_m, offs_n, stride_ym, N, mask, HAS_BIAS, EXACT_BF16)
            tl.atomic_xchg(cnt_ptr + tile, 0)
    else:
        _store(acc, b_ptr, y_ptr, offs_m, offs_n, stride_ym, N, mask, HAS_BIAS, EXACT_BF16)


@triton.jit
def _store(acc, b_ptr, y_ptr, offs_m, offs_n, stride_ym, N, mask, HAS_BIAS: tl.constexpr, EXACT_BF16: tl.constexpr):
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :],
             to_dtype(acc, y_ptr.dtype.element_ty, EXACT_BF16), mask=mask)


@triton.jit
def split_range(K, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr, pid_k):
    """The K tiles [t0, t1) of split pid_k: the tiles are dealt in equal runs, the last possibly short
    or empty."""
    k_tiles = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(k_tiles, SPLIT_K)
    t0 = pid_k * per_split
    return t0, tl.minimum(t0 + per_split, k_tiles)


@triton.jit
def expert_operands(e, w_ptr, s_ptr, z_ptr, g_ptr, stride_we, stride_se, stride_ze, ELEM: tl.constexpr):
    """Expert e's weight, scale and zero-point bases (int64 offsets) and its NVFP4 global scale (1 otherwise)."""
    e64 = e.to(tl.int64)
    gscale = 1.0
    if ELEM == 2:
        gscale = tl.load(g_ptr + e)
    return w_ptr + e64 * stride_we, s_ptr + e64 * stride_se, z_ptr + e64 * stride_ze, gscale
