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

E4M3_MAX = 448.0


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
    a = tl.minimum(tl.abs(v), 448.0)
    e = ((a.to(tl.int32, bitcast=True) >> 23) & 255) - 127
    e = tl.maximum(e, -6)
    quantum = ((e - 3 + 127) << 23).to(tl.float32, bitcast=True)
    inv = ((3 - e + 127) << 23).to(tl.float32, bitcast=True)
    r = ((a * inv + 12582912.0) - 12582912.0) * quantum
    return tl.where(v < 0, -r, r)


@triton.jit
def fp8_scale(amax):
    """amax / 448 (IEEE division, as oracle-emulation), 1 where the amax is 0."""
    s = tl.math.div_rn(amax, 448.0)
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
        sraw = tl.load(s_ptr + n * stride_sn + g * stride_sk, mask=gmask, other=0)
        if ELEM == 1:
            sg = e8m0_decode(sraw.to(tl.int32))
        elif ELEM == 2:
            sg = e4m3_decode(sraw.to(tl.int32)) * gscale
        else:
            sg = sraw.to(tl.float32)
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
def round_e2m1(v):
    """float32 -> float32 on the E2M1 grid (0, 0.5, ..., 6; half to even; saturating)."""
    a = tl.minimum(tl.abs(v), 6.0)
    r = tl.where(a < 2.0, ((a * 2.0 + 12582912.0) - 12582912.0) * 0.5,
                 tl.where(a < 4.0, (a + 12582912.0) - 12582912.0, ((a * 0.5 + 12582912.0) - 12582912.0) * 2.0))
    return tl.where(v < 0, -r, r)


@triton.jit
def quantize_tile(x, amax_rows, ACT: tl.constexpr, xs_ptr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """Prologue activation quantize-dequantize of an fp32 tile x [BM, BK] (oracle-emulation's rounding).

    ACT 1: FP8, one 1x128 group = this tile (BK == 128); 2: FP8 per token, amax_rows
    precomputed over the whole row; 3: FP8 per tensor, scale at xs_ptr; 4: NVFP4, E4M3 scale
    per 16 along K times the global scale at xs_ptr. Returns fp32 values (codes x scales).
    """
    if ACT == 4:
        gs = tl.load(xs_ptr)
        blocks = tl.reshape(x, [BLOCK_M, BLOCK_K // 16, 16])
        amax = tl.max(tl.abs(blocks), axis=2)
        s = round_e4m3(tl.math.div_rn(tl.math.div_rn(amax, 6.0), gs)) * gs
        safe = tl.where(s > 0, s, 1.0)
        q = round_e2m1(tl.math.div_rn(blocks, safe[:, :, None]))
        return tl.reshape(q * s[:, :, None], [BLOCK_M, BLOCK_K])
    if ACT == 1:
        s = fp8_scale(tl.max(tl.abs(x), axis=1))
    elif ACT == 2:
        s = fp8_scale(amax_rows)
    else:
        s = tl.load(xs_ptr + tl.zeros_like(amax_rows).to(tl.int32))
    q = round_e4m3(tl.math.div_rn(x, s[:, None]))
    return q * s[:, None]


@triton.jit
def mma(a, b, DOT_F32: tl.constexpr):
    """a @ b with fp32 accumulation; float32 operands (the interpreter) multiply in IEEE fp32, not TF32."""
    if DOT_F32:
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def to_dtype(v, dtype: tl.constexpr, EXACT_BF16: tl.constexpr):
    """Cast float32 -> dtype. Triton's interpreter truncates fp32 -> bf16; EXACT_BF16 rounds
    to nearest even by hand first (what the GPU's cvt.rn does), so CPU tests see GPU rounding."""
    if EXACT_BF16 and dtype == tl.bfloat16:
        bits = v.to(tl.int32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
        v = bits.to(tl.float32, bitcast=True)
    return v.to(dtype)
