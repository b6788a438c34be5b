"""Many-row 4-bit W4A16 GEMM written in Triton's Gluon dialect (issue 26, M >= 128; an experiment).

Why Gluon: w4_wgmma (tl.dot with the decoded tile as wgmma's register A operand) takes 86.5 us on
8192x8192 MXFP4 at M=256 against BF16's 49: decode and MMA do not overlap, because the compiled loop
passes the decoded tile through shared memory with barriers and waits for each MMA before decoding
the next tile. Gluon states the schedule itself: per K tile the warps

  1. load the next tile's packed words (registers, one tile ahead),
  2. decode this tile's words to bf16 (bit placement, gemm.e2m1_word_ptx's fused form, in k order)
     and store them to a shared-memory ring of two weight tiles,
  3. issue the asynchronous wgmma of this tile (weights [BN, BK] as A, activations [BK, BM] as B,
     both from shared memory), then wait only for the PREVIOUS tile's MMA (num_outstanding=1),
  4. after a CTA barrier (each warpgroup waits for its own MMAs only, and both read the shared
     activation tile), refill the activation slot that MMA freed (cp.async, STAGES deep),

so the tensor cores run tile t while the same warps decode tile t + 1.

Weights: GPTQ's [K/8, N] word layout: INT4 (zero points or not, scales as stored), MXFP4 / NVFP4
repacked at load (weights.repack_words) with scales at most 2 (formats.fused_scales_ok: the fused
decoder's range); bf16 layers. The decoded values are the reference's (value x scale rounded once
to bf16), summed in fp32. No bias, no split-K: the launcher
(launch.DenseGemm.gluon) takes it only where its checks hold; any other call keeps its usual path.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait


def e2m1_pairs_ptx() -> str:
    """PTX: one E2M1 word ($4, nibble i = k order i) and its pair {c, c} ($5, c = 2**126 x scale in
    bf16: gemm.e2m1_scale_pair) -> 4 registers $0..$3 of bf16 pairs in k order (k 2j, 2j + 1).

    Pair j: prmt puts byte j of the word (codes 2j, 2j + 1) in the low half and byte j of the word
    shifted right by 4 (code 2j + 1 at its bottom) in the high half, so both codes sit at bits 0-3 of
    their half; the magnitude bits go to bf16 bits 6-8 (shift 6), the sign to bit 15 (shift 12): the
    value times 2**-126, exactly; one packed multiply by c gives value x scale rounded once (with -0
    added, which keeps the signs of zeros), as gemm.e2m1_word_ptx's fused form."""
    lines = [".reg .b32 v, t, a, b, z;", "mov.b32 z, 0x80008000;", "shr.b32 v, $4, 4;"]
    for j in range(4):
        sel = j | (j << 4) | ((4 + j) << 8) | ((4 + j) << 12)
        lines += [f"prmt.b32 t, $4, v, {sel:#x};", "shl.b32 a, t, 6;", "and.b32 a, a, 0x01C001C0;",
                  "shl.b32 b, t, 12;", "and.b32 b, b, 0x80008000;", "or.b32 a, a, b;",
                  f"fma.rn.bf16x2 ${j}, a, $5, z;"]
    return "{\n" + "\n".join(lines) + "\n}"


_E2M1_PAIRS_PTX = gl.constexpr(e2m1_pairs_ptx())
#: The CTA-wide barrier (bar.sync): Gluon's `thread_barrier` in Triton 3.6 (the H200's), `barrier` in 3.7.
_cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier


def int4_pairs_ptx() -> str:
    """PTX: one GPTQ word ($4, nibble i = k order i), its zero-point pair {B + z, B + z} ($5, B = 1024 in fp16:
    0x6400) and its group scale ($6, fp32) -> 4 registers $0..$3 of bf16 pairs (q - z) x s in k order.
    Pair j: codes 2j and 2j + 1 to bits 0-3 of the two halves (prmt, as e2m1_pairs_ptx), ORed into B (fp16
    holds B + q exactly), one packed subtraction gives q - z exactly; each is then multiplied by the scale in
    fp32 and the pair rounded once to bf16: the reference's value (its fp16 scales are not bf16 values, so the
    product is formed in fp32, as dequant.to_dtype would)."""
    lines = [".reg .b32 v, t;", ".reg .b16 l, h;", ".reg .f32 f0, f1;", "shr.b32 v, $4, 4;"]
    for j in range(4):
        sel = j | (j << 4) | ((4 + j) << 8) | ((4 + j) << 12)
        lines += [f"prmt.b32 t, $4, v, {sel:#x};", "and.b32 t, t, 0x000F000F;", "or.b32 t, t, 0x64006400;",
                  "sub.rn.f16x2 t, t, $5;", "mov.b32 {l, h}, t;", "cvt.f32.f16 f0, l;", "cvt.f32.f16 f1, h;",
                  "mul.rn.f32 f0, f0, $6;", "mul.rn.f32 f1, f1, $6;", f"cvt.rn.bf16x2.f32 ${j}, f1, f0;"]
    return "{\n" + "\n".join(lines) + "\n}"


_INT4_PAIRS_PTX = gl.constexpr(int4_pairs_ptx())


@gluon.jit
def _scale_pairs(s, gscale, ELEM: gl.constexpr):
    """Raw word scales -> int32 {c, c}, c = 2**126 x scale in bf16 (as gemm.e2m1_scale_pair)."""
    if ELEM == 1:
        pair = (s.to(gl.int32) + 126) * 0x00800080
    else:
        c = (s.to(gl.float8e4nv, bitcast=True).to(gl.float32) * gscale) * 8.507059173023462e37
        pair = (c.to(gl.bfloat16).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF) * 65537
    return pair


@gluon.jit
def _load_words(t, offs_kw, offs_n, n_ok, w_ptr, s_ptr, z_ptr, stride_wk, stride_sk, stride_zk, KW: gl.constexpr,
                GROUP: gl.constexpr, HAS_ZERO: gl.constexpr):
    """K tile t's words [KW, BN] (N contiguous), each word's raw scale [KW, BN] (E2M1: the byte; INT4: the
    scale as stored) and INT4 zero point (0..15; 8 without HAS_ZERO)."""
    kw = t * KW + offs_kw
    g = (kw * 8 // GROUP)[:, None]
    u = gl.load(w_ptr + kw[:, None] * stride_wk + offs_n[None, :], mask=n_ok[None, :], other=0)
    s = gl.load(s_ptr + g * stride_sk + offs_n[None, :], mask=n_ok[None, :], other=0)
    if HAS_ZERO:
        zw = gl.load(z_ptr + g * stride_zk + (offs_n // 8)[None, :], mask=n_ok[None, :], other=0)
        z = (zw >> ((offs_n % 8) * 4)[None, :]) & 15
    else:
        z = gl.full(u.shape, 8, gl.int32, u.type.layout)
    return u, s, z


@gluon.jit
def _decode_pairs(u, s, z, gscale, ELEM: gl.constexpr):
    """Words -> 4 int32 tensors of bf16 pairs in k order (e2m1_pairs_ptx / int4_pairs_ptx)."""
    if ELEM == 3:
        zp = (z | 0x6400) * 65537
        p0, p1, p2, p3 = gl.inline_asm_elementwise(_INT4_PAIRS_PTX, "=r,=r,=r,=r,r,r,f", [u, zp, s.to(gl.float32)],
                                                   dtype=(gl.int32,) * 4, is_pure=True, pack=1)
    else:
        p0, p1, p2, p3 = gl.inline_asm_elementwise(_E2M1_PAIRS_PTX, "=r,=r,=r,=r,r,r", [u, _scale_pairs(s, gscale, ELEM)],
                                                   dtype=(gl.int32,) * 4, is_pure=True, pack=1)
    return p0, p1, p2, p3


@gluon.jit
def _copy_x(t, t1, slot, x_smem, x_ptr, offs_m, offs_k, m_ok, stride_xm, BK: gl.constexpr):
    """cp.async of activation tile t [BM, BK] into ring slot `slot` (nothing from tile t1 on: the end of
    this program's K range), then one commit group (empty past the end, so there is one group per tile)."""
    ok = m_ok[:, None] & (t < t1)
    ptrs = x_ptr + offs_m[:, None] * stride_xm + (t * BK + offs_k)[None, :]
    async_copy.async_copy_global_to_shared(x_smem.index(slot), ptrs, mask=ok)
    async_copy.commit_group()


@gluon.jit
def _step(t, i, t1, acc, u, s, z, gscale, w32, w16, x_smem, w_ptr, s_ptr, z_ptr, x_ptr, offs_kw, offs_n, n_ok, offs_m,
          offs_k, m_ok, stride_wk, stride_sk, stride_zk, stride_xm, ELEM: gl.constexpr, GROUP: gl.constexpr,
          HAS_ZERO: gl.constexpr, KW: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr):
    """K tile t, the i-th of this program (its range ends at t1): the next tile's words loaded, this tile's
    decoded into weight slot i % 2, its MMA issued asynchronously, the previous tile's MMA waited for, the
    activation slot it freed refilled."""
    un, sn, zn = _load_words(gl.minimum(t + 1, t1 - 1), offs_kw, offs_n, n_ok, w_ptr, s_ptr, z_ptr, stride_wk,
                             stride_sk, stride_zk, KW, GROUP, HAS_ZERO)
    p0, p1, p2, p3 = _decode_pairs(u, s, z, gscale, ELEM)
    tile = gl.reshape(gl.join(gl.join(p0, p1), gl.join(p2, p3)), [KW, BN, 4])     # [kw, n, pair]
    tile = gl.reshape(gl.permute(tile, (1, 0, 2)), [BN, BK // 2])                 # [n, 4 kw + pair]
    w32.index(i % 2).store(tile)
    async_copy.wait_group(STAGES - 2)           # this thread's copies of activation tile t have landed
    fence_async_shared()                        # the stores and copies, seen by the async proxy (wgmma)
    _cta_barrier()                         # ... of every thread
    acc = warpgroup_mma(w16.index(i % 2), x_smem.index(i % STAGES).permute((1, 0)), acc, use_acc=i > 0,
                        is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))     # tile t - 1's MMA is done
    _cta_barrier()     # ... in every warpgroup, before its activation slot is refilled and its weight slot rewritten
    _copy_x(t + STAGES - 1, t1, (i + STAGES - 1) % STAGES, x_smem, x_ptr, offs_m, offs_k, m_ok, stride_xm, BK)
    return acc, un, sn, zn


@gluon.jit
def w4_gluon_kernel(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym,
                    stride_wk, stride_sk, stride_zk, ELEM: gl.constexpr, GROUP: gl.constexpr, HAS_ZERO: gl.constexpr,
                    BN: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, SPLIT_K: gl.constexpr,
                    num_warps: gl.constexpr):
    """y[m, n] = sum_k x[m, k] W[n, k]; grid (N / BN, M / BM, SPLIT_K); BK = 64 (one 128-byte swizzled row
    of bf16), BN = 16 x num_warps (one 16-row MMA slab per warp), BM >= 4 x num_warps, K a multiple of
    SPLIT_K x BK (every program gets the same number of K tiles). SPLIT_K > 1: each program's fp32 sum goes
    to part_ptr [SPLIT_K, M, N]; the last of a tile's programs to arrive (cnt_ptr, one counter per output
    tile) adds them in a fixed order and resets its counter (dequant.finish_tile's scheme)."""
    gl.static_assert(BK == 64)
    gl.static_assert(BN == 16 * num_warps)
    KW: gl.constexpr = BK // 8
    pid_n = gl.program_id(0)
    pid_m = gl.program_id(1)
    # words [KW, BN]: 4 words of one K row per thread, N contiguous (128-bit loads)
    w_l: gl.constexpr = gl.BlockedLayout([1, 4], [2, 16], [4, num_warps // 4], [1, 0])
    # activations [BM, BK]: 16-byte cp.async chunks along K
    x_l: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                    instr_shape=[16, BM, 16])
    out_l: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, num_warps], [0, 1])
    w16_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    w32_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2)
    x_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)

    w32 = gl.allocate_shared_memory(gl.int32, [2, BN, BK // 2], w32_sl)      # decoded pairs, two tiles
    w16 = w32._reinterpret(gl.bfloat16, [2, BN, BK], w16_sl)               # the same bytes as bf16
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BM, BK], x_sl)

    offs_kw = gl.arange(0, KW, layout=gl.SliceLayout(1, w_l))
    offs_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, w_l))
    n_ok = offs_n < N
    offs_m = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, x_l))
    offs_k = gl.arange(0, BK, layout=gl.SliceLayout(0, x_l))
    m_ok = offs_m < M
    gscale = 1.0
    if ELEM == 2:
        gscale = gl.load(g_ptr)
    per = K // BK // SPLIT_K
    t0 = gl.program_id(2) * per
    t1 = t0 + per

    for i in gl.static_range(STAGES - 1):
        _copy_x(t0 + i, t1, i, x_smem, x_ptr, offs_m, offs_k, m_ok, stride_xm, BK)
    u, s, z = _load_words(t0, offs_kw, offs_n, n_ok, w_ptr, s_ptr, z_ptr, stride_wk, stride_sk, stride_zk, KW, GROUP,
                          HAS_ZERO)
    # tile 0 outside the loop (use_acc False): every path to the MMA waits finds the accumulator defined by a
    # wgmma, so ptxas keeps the MMAs asynchronous (a zero-initialized accumulator reaching the loop's exit made
    # it serialize them: C7515)
    acc = gl.zeros([BN, BM], gl.float32, acc_l)
    acc, u, s, z = _step(t0, 0, t1, acc, u, s, z, gscale, w32, w16, x_smem, w_ptr, s_ptr, z_ptr, x_ptr, offs_kw,
                         offs_n, n_ok, offs_m, offs_k, m_ok, stride_wk, stride_sk, stride_zk, stride_xm, ELEM, GROUP,
                         HAS_ZERO, KW, BN, BK, STAGES)
    for i in range(1, per):
        acc, u, s, z = _step(t0 + i, i, t1, acc, u, s, z, gscale, w32, w16, x_smem, w_ptr, s_ptr, z_ptr, x_ptr, offs_kw,
                             offs_n, n_ok, offs_m, offs_k, m_ok, stride_wk, stride_sk, stride_zk, stride_xm, ELEM,
                             GROUP, HAS_ZERO, KW, BN, BK, STAGES)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    async_copy.wait_group(0)
    _cta_barrier()     # every warpgroup's MMAs done before the layout change reuses shared memory
    out = gl.convert_layout(acc, out_l)                                   # [n, m], n fastest: coalesced
    on = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, out_l))
    om = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(0, out_l))
    mask = (on < N)[:, None] & (om < M)[None, :]
    if SPLIT_K == 1:
        gl.store(y_ptr + om[None, :] * stride_ym + on[:, None], out.to(gl.bfloat16), mask=mask)
    else:
        part = part_ptr + om[None, :] * N + on[:, None]
        gl.store(part + gl.program_id(2) * M * N, out, mask=mask)
        _cta_barrier()                         # every thread's partial written before the arrival
        tile = pid_m * gl.num_programs(0) + pid_n
        arrived = gl.atomic_add(cnt_ptr + tile, 1)
        if arrived == SPLIT_K - 1:
            tot = gl.zeros([BN, BM], gl.float32, out_l)
            for k in range(SPLIT_K):
                tot += gl.load(part + k * M * N, mask=mask, other=0.0, cache_modifier=".cg")
            gl.store(y_ptr + om[None, :] * stride_ym + on[:, None], tot.to(gl.bfloat16), mask=mask)
            gl.atomic_xchg(cnt_ptr + tile, 0)
