"""Many-row 4-bit W4A16 GEMM with the decode in its own warps (issue 26, M >= 64; Gluon, sm_90).

Why: at 256 rows a 4-bit GEMM must decode its weights while the tensor cores multiply (decode alone and the
MMA alone take about the same time on 8192x8192; in series they cannot reach 0.8x BF16). tl.dot's pipeline
does not overlap a decode with the MMA, and w4_rega with many rows per program (R51) left the tensor cores
idle while the same warps decoded. Here the program's warps are split (gl.warp_specialize): DW decode warps
load each K tile's packed words (WPF tiles ahead, 2-4) and scales, decode the words to the reference's bf16
weights and store them in a ring of STAGES shared-memory slots, with the activations copied into the same slot (by
cp.async XCP tiles ahead, or through registers with XCP 0); the default num_warps warps (one or two
warpgroups) wait for a slot, issue the wgmma on it (weights as A, activations as B, both from shared memory)
and hand the slot back when that MMA is done. The ring's mbarriers are the only contact.

Weights in GPTQ's word layout [K/8, N] (int32 words of 8 codes along K, N contiguous: INT4 as stored,
MXFP4 / NVFP4 repacked at load, weights.repack_words). A decoded word is 8 consecutive k of one weight row:
one 16-byte chunk of the slot's [BN, BK] K-major tile, written as four bf16 pairs. Values: INT4 bf16((q - z)
x s) rounded once (the fp16 scale split into two bf16 terms, pairs_ptx); E2M1 value x scale in one packed FMA
(w4_rega.byte_pairs_ptx's decoder; NVFP4's factor bf16(s x g) rounded first, as w4_rega's default).
bf16 activations and output, K a multiple of BK (64 or 128), INT4 groups a multiple of BK; grid (N / BN,
M / BM, 1). Measured (H200, 256 rows, graph replay): 8192x8192 INT4 71.5 µs with the words three tiles ahead and
each slot handed back after its own MMA (R62; 81-84 before, R56; the tl.dot wgmma kernel 85-88), MXFP4 / NVFP4
73.6 / 76.0 with one MMA warpgroup and all 256 rows a program (R62), BF16 cuBLAS 49; Nsight Compute (R63): the
MMA warps wait for full slots, the decode warps no longer for empty ones: the decode sets the pace. Ablations
(R69-R71): in the one-warpgroup form the MMA side alone takes 45 µs, the decode side alone 67.7, its trips spent
waiting; with the decode warps as 2 or 4 partitions on alternate K tiles (DP) and the activations by TMA (XTMA)
INT4 / MXFP4 / NVFP4 take 56.5 / 56.8 / 58.2 µs (R71, 0.87-0.90x BF16).
"""
from __future__ import annotations

import inspect

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, \
    warpgroup_mma_wait

from .dequant import round_e2m1, round_e4m3
from .w4_rega import expert_operands, pair_lines

#: Triton 3.7's warp_specialize takes [(function, args), ...]; 3.6's (the H200's) the default partition's args
#: and function, then the workers' args and functions.
_WS_LIST = gl.constexpr("functions_and_args" in inspect.signature(gl.warp_specialize).parameters)


def pairs_ptx(int4: bool) -> str:
    """PTX: word $4 (8 codes, code i at bits 4i..4i+3) -> $0..$3, register j the weights of codes 2j (low half) and
    2j + 1 (high half) in bf16: the order they take in memory, so four registers are the word's 16-byte chunk.
    The pairs are w4_rega.pair_lines' (the same decoder as w4_rega's). INT4 ($5 = {0x4300 | z} x 2, $6 / $7 = the
    scale's bf16 terms {hi, hi} / {lo, lo}): q - z exactly, then (q - z) x lo is exact (at most 4 + 3 significant
    bits) and the second FMA rounds (q - z) x hi + that once: the fp32 product (q - z) x s rounded to bf16, for
    fp16 or bf16 scales. E2M1 ($5 = {c, c}, c = bf16(2**126 x scale)): value x scale rounded once."""
    prelude, pairs = pair_lines(not int4, "$4", "$5")
    lines = list(prelude)
    for j in range(4):
        scaled = ["fma.rn.bf16x2 b, a, $7, z;", f"fma.rn.bf16x2 ${j}, a, $6, b;"] if int4 else [f"mov.b32 ${j}, a;"]
        lines += pairs[j] + scaled
    return "{\n" + "\n".join(lines) + "\n}"


#: A TMA box's row limit: XTMA's activation boxes are at most this many rows (_x_tile brings 512 as two)
X_BOX_ROWS = gl.constexpr(256)


def x_tma_desc(x, bm: int):
    """XTMA 1's descriptor of the activations x [M, K] (bf16, rows contiguous): [BM, 64] boxes (64 bf16, the
    128-byte swizzle's span; at most X_BOX_ROWS rows) in the slots' layout; rows past M read as zeros."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    return TensorDescriptor.from_tensor(x, [min(bm, X_BOX_ROWS.value), 64],
                                        gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2))


def tma_ok(t) -> bool:
    """Can a TMA descriptor cover t: a 16-byte base, the last dim contiguous, the other strides whole 16 bytes."""
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(s * t.element_size() % 16 == 0 for s in t.stride()[:-1])


def w_tma_desc(owner, words, box: list[int]):
    """WT's descriptor of the words (int32, 2-D: GPTQ's [K/8, N], or the MoE's [E, N, K/8] as [E N, K/8]) in
    box-sized blocks, unswizzled like the kernel's words ring; kept on owner (the layer or weight that holds the
    words, and so outlives the descriptor), one per box shape."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    cache = owner.__dict__.setdefault("_ws_words_descs", {})
    if tuple(box) not in cache:
        cache[tuple(box)] = TensorDescriptor.from_tensor(
            words, box, gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2))
    return cache[tuple(box)]


_INT4_PTX = gl.constexpr(pairs_ptx(True))
_E2M1_PTX = gl.constexpr(pairs_ptx(False))


@gluon.constexpr_function
def words_layout(dw: int, bk8: int, bn: int, kn: bool = False) -> gl.BlockedLayout:
    """[BK / 8, BN] words of a K tile: n across lanes and warps (each word row a coalesced load), the warps that
    n does not need across the word rows; each word a whole 16-byte chunk of its decoded row. kn (the MoE's
    [E, N, K/8] words, a row's K tile contiguous): up to 4 words (16 bytes) a thread along K, the lanes across the
    tile's K then its rows, so each load reads whole 32-byte sectors; a thread's words are the same consecutive
    k of one row as above."""
    if kn:
        tk = max(1, bk8 // 4)
        tn = 32 // tk
        wn = max(1, min(dw, bn // tn))
        wk = dw // wn
        return gl.BlockedLayout([max(1, bk8 // (tk * wk)), 1], [tk, tn], [wk, wn], [0, 1])
    wn = min(dw, bn // 32)
    wk = dw // wn
    return gl.BlockedLayout([bk8 // wk, 1], [1, 32], [wk, wn], [0, 1])


@gluon.constexpr_function
def transposed(layout: gl.BlockedLayout) -> gl.BlockedLayout:
    """A 2-D blocked layout with its two dims swapped: the same threads hold the same elements of the transpose."""
    return gl.BlockedLayout(list(layout.size_per_thread)[::-1], list(layout.threads_per_warp)[::-1],
                            list(layout.warps_per_cta)[::-1], [1 - o for o in layout.order])


@gluon.constexpr_function
def x_layout(dw: int) -> gl.BlockedLayout:
    """[BM, 64] activations: 8 consecutive k (16 bytes) a thread, 8 lanes a row."""
    return gl.BlockedLayout([1, 8], [4, 8], [dw, 1], [1, 0])


@gluon.jit
def _word_values(u, f, s_hi, s_lo, ELEM: gl.constexpr):
    """Words [BK/8, BN] -> their weights as bf16 pairs [BK/8, BN, 4] (int32 j: codes 2j, 2j + 1 of the word)."""
    if ELEM == 3:
        h = gl.inline_asm_elementwise(_INT4_PTX, "=r,=r,=r,=r,r,r,r,r", [u, f, s_hi, s_lo], dtype=(gl.int32,) * 4,
                                      is_pure=True, pack=1)
    else:
        h = gl.inline_asm_elementwise(_E2M1_PTX, "=r,=r,=r,=r,r,r", [u, f], dtype=(gl.int32,) * 4, is_pure=True,
                                      pack=1)
    w = gl.join(gl.join(h[0], h[1]), gl.join(h[2], h[3]))        # [.., a, b] = pair a + 2b (join: new last axis)
    w = gl.permute(w, (0, 1, 3, 2))                               # [.., b, a]: row-major index = the pair
    return gl.reshape(w, [u.shape[0], u.shape[1], 4])


@gluon.jit
def _pair(v):
    """fp32 [..] -> its bf16 rounding's bits in both halves of an int32."""
    return (v.to(gl.bfloat16).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF) * 65537


@gluon.jit
def _load_words(i, n_tiles, w_ptr, s_ptr, z_ptr, w_off, w_ok, r8, n1, n_ok, stride_wk, stride_sk, stride_zk,
                stride_sn, ELEM: gl.constexpr, GROUP: gl.constexpr, HAS_ZERO: gl.constexpr, BK: gl.constexpr,
                WT: gl.constexpr = 0):
    """K tile i's words [BK/8, BN] and raw scales (INT4: the group's [BN] scales and packed zero points; E2M1:
    each word's scale byte [BK/8, BN]), not used here: the loads stay in flight until the decode (tiles past
    the last one re-read it). w_off holds the words' N stride (1 in GPTQ's [K/8, N], K / 8 in the MoE's
    [E, N, K/8]); stride_sn is the scales' (1 in [K/group, N], K / group in [E, N, K/group]). WT: the words come
    by TMA (w_ring), only the scales here (u a stand-in)."""
    i = gl.minimum(i, n_tiles - 1)
    if WT:
        u = n1
    else:
        u = gl.load(w_ptr + i * (BK // 8) * stride_wk + w_off, mask=w_ok, other=0)
    if ELEM == 3:
        g = (i * BK) // GROUP
        s = gl.load(s_ptr + g * stride_sk + n1 * stride_sn, mask=n_ok, other=0.0)
        if HAS_ZERO:
            zw = gl.load(z_ptr + g * stride_zk + n1 // 8, mask=n_ok, other=0)
        else:
            zw = gl.full(n1.shape, -0x77777778, gl.int32, n1.type.layout)       # 0x88888888: every zero 8
    else:
        s = gl.load(s_ptr + ((i * BK + 8 * r8) // GROUP)[:, None] * stride_sk + (n1 * stride_sn)[None, :], mask=w_ok,
                    other=0)
        zw = n1
    return u, s, zw


@gluon.jit
def _tile_values(u, s, zw, n1, gscale, ELEM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr):
    """A K tile's words and raw scales -> its decoded weights [BN, BK] as bf16 pairs [BN, BK / 2] (int32; k = 8 x
    word row + code)."""
    if ELEM == 3:
        sf = s.to(gl.float32)
        hi = sf.to(gl.bfloat16).to(gl.float32)
        z = (zw >> ((n1 % 8) * 4)) & 15
        f = ((z | 0x4300) * 65537)[None, :] + gl.zeros_like(u)
        s_hi = _pair(hi)[None, :] + gl.zeros_like(u)
        s_lo = _pair(sf - hi)[None, :] + gl.zeros_like(u)
    else:
        if ELEM == 1:
            f = (s.to(gl.int32) + 126) * 0x00800080
        else:
            f = _pair((s.to(gl.float8e4nv, bitcast=True).to(gl.float32) * gscale) * 8.507059173023462e37)
        s_hi = f
        s_lo = f
    vals = _word_values(u, f, s_hi, s_lo, ELEM)                          # [BK/8, BN, 4] bf16 pairs
    return gl.reshape(gl.permute(vals, (1, 0, 2)), [BN, BK // 2])


@gluon.jit
def _put_tile(tile, a_ring, full, empty, c, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
              ACT: gl.constexpr):
    """WU: a decoded tile (its rows paired for ACT_SWIGLUOAI) stored into the ring's tile c's slot once the MMA
    warps hand it back, and the slot handed over (XTMA 1: the activations are the MMA warps' TMA)."""
    a32_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2)
    if ACT is not None:
        if ACT[0] == ACT_SWIGLUOAI:
            tile = _pair_rows(tile, BN, BK // 2)
    slot = c % STAGES
    mbarrier.wait(empty.index(slot), ((c // STAGES) & 1) ^ 1)
    a_ring.index(slot)._reinterpret(gl.int32, [BN, BK // 2], a32_sl).store(tile)
    mbarrier.arrive(full.index(slot), count=1)


@gluon.jit
def _decode_loop_xcp(x_ptr, w_ptr, s_ptr, z_ptr, a_ring, x_ring, full, empty, xfull, x_desc, off_m, x_off, x_ok, w_off,
                     w_ok, r8, n1, n_ok, gscale, n_tiles, stride_wk, stride_sk, stride_zk, stride_sn,
                     ELEM: gl.constexpr,
                     GROUP: gl.constexpr, HAS_ZERO: gl.constexpr, BN: gl.constexpr, BM: gl.constexpr,
                     BK: gl.constexpr, STAGES: gl.constexpr, PFENCE: gl.constexpr, XCP: gl.constexpr,
                     WPF: gl.constexpr, XTMA: gl.constexpr, PART: gl.constexpr = 0, DP: gl.constexpr = 1,
                     w_ring=None, wfull=None, WT: gl.constexpr = 0, WKN: gl.constexpr = 0, ACT: gl.constexpr = None,
                     C0=0, WU: gl.constexpr = 0):
    """_decode_partition's loop with the activations copied by cp.async XCP tiles ahead of the decode: tile j's
    slot awaited (empty) and its copy issued at trip j - XCP; at trip i this thread's copies of tile i are waited
    for (wait_group XCP), and the partition barrier before the arrive covers every thread's. The words (and
    scales) are loaded WPF tiles ahead (2-4) into registers: R60's profile of a 64-deep K tile a trip had the
    decode waiting on words loaded two tiles earlier. XTMA 1: the MMA warps bring the activations by TMA, so a
    trip here is the words, their decode and the slot's weights only (its slot awaited just before the store);
    XTMA 2: these warps start the slot's activations TMA (one elected thread) once the slot is theirs.
    DP > 1 (with XTMA): this is decode partition PART of DP, on K tiles PART, PART + DP, ... only (its words
    loaded WPF of its own tiles ahead), so DP tiles are decoded at once and each has DP trips' time. WT > 0 (with
    XTMA 1): the words reach shared memory by TMA (w_ring, WT slots, the MMA warps' copies), and a trip reads its
    tile's from its slot once wfull says they landed; only the scales are loaded WPF tiles ahead here.
    C0 (PT, with XTMA 1): the ring's count of K tiles before this output tile's (the persistent program's earlier
    tiles): tile i is the ring's tile C0 + i (its slot and phase), and partition PART takes the ring's tiles
    PART, PART + DP, ..., so each slot keeps one partition (DP divides STAGES) whatever n_tiles is. WU 1 (PT 2:
    XTMA 1, WPF 2, no WT): the loop unrolled by two trips, each of the two register sets of words reloaded in place
    once its decode has read it, instead of the sets rotated each trip: a rotation's register moves wait for the
    loads just issued (R101c: the words' and scales' moves were 5-7% of the 4096-token launches' stall samples),
    so the words had one trip to arrive instead of two. An odd trip count decodes one tile more, not stored."""
    a32_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2)
    for p in gl.static_range(0 if XTMA else XCP):
        mbarrier.wait(empty.index(p % STAGES), ((p // STAGES) & 1) ^ 1, pred=p < n_tiles)
        async_copy.async_copy_global_to_shared(x_ring.index(p % STAGES), x_ptr + p * BK + x_off,
                                               mask=x_ok & (p < n_tiles))
        async_copy.commit_group()
    first = (PART + DP - C0 % DP) % DP      # PART where C0 is 0
    u, s, zw = _load_words(first, n_tiles, w_ptr, s_ptr, z_ptr, w_off, w_ok, r8, n1, n_ok, stride_wk, stride_sk,
                           stride_zk, stride_sn, ELEM, GROUP, HAS_ZERO, BK, WT)
    u1, s1, zw1 = _load_words(first + DP, n_tiles, w_ptr, s_ptr, z_ptr, w_off, w_ok, r8, n1, n_ok, stride_wk,
                              stride_sk, stride_zk, stride_sn, ELEM, GROUP, HAS_ZERO, BK, WT)
    if WPF >= 3:
        u2, s2, zw2 = _load_words(first + 2 * DP, n_tiles, w_ptr, s_ptr, z_ptr, w_off, w_ok, r8, n1, n_ok, stride_wk,
                                  stride_sk, stride_zk, stride_sn, ELEM, GROUP, HAS_ZERO, BK, WT)
    if WPF >= 4:
        u3, s3, zw3 = _load_words(first + 3 * DP, n_tiles, w_ptr, s_ptr, z_ptr, w_off, w_ok, r8, n1, n_ok, stride_wk,
                                  stride_sk, stride_zk, stride_sn, ELEM, GROUP, HAS_ZERO, BK, WT)
    if WU:
        for i in range(first, n_tiles, 2 * DP):
            tile = _tile_values(u, s, zw, n1, gscale, ELEM, BN, BK)
            u, s, zw = _load_words(i + 2 * DP, n_tiles, w_ptr, s_ptr, z_ptr, w_off, w_ok, r8, n1, n_ok, stride_wk,
                                   stride_sk, stride_zk, stride_sn, ELEM, GROUP, HAS_ZERO, BK)
            _put_tile(tile, a_ring, full, empty, C0 + i, BN, BK, STAGES, ACT)
            tile = _tile_values(u1, s1, zw1, n1, gscale, ELEM, BN, BK)
            u1, s1, zw1 = _load_words(i + 3 * DP, n_tiles, w_ptr, s_ptr, z_ptr, w_off, w_ok, r8, n1, n_ok, stride_wk,
                                      stride_sk, stride_zk, stride_sn, ELEM, GROUP, HAS_ZERO, BK)
            if i + DP < n_tiles:
                _put_tile(tile, a_ring, full, empty, C0 + i + DP, BN, BK, STAGES, ACT)
        return
    for i in range(first, n_tiles, DP):
        if not XTMA:
            j = i + XCP
            jslot = j % STAGES
            mbarrier.wait(empty.index(jslot), ((j // STAGES) & 1) ^ 1, pred=j < n_tiles)
            async_copy.async_copy_global_to_shared(x_ring.index(jslot),
                                                   x_ptr + gl.minimum(j, n_tiles - 1) * BK + x_off,
                                                   mask=x_ok & (j < n_tiles))
            async_copy.commit_group()
        un, sn, zwn = _load_words(i + WPF * DP, n_tiles, w_ptr, s_ptr, z_ptr, w_off, w_ok, r8, n1, n_ok, stride_wk,
                                  stride_sk, stride_zk, stride_sn, ELEM, GROUP, HAS_ZERO, BK, WT)
        if WT:      # this tile's words from their slot (the MMA warps' TMA, WT tiles ahead)
            wslot = i % WT
            mbarrier.wait(wfull.index(wslot), (i // WT) & 1)
            if WKN:     # read as the slot's [BN, BK/8] (a permuted view of the unswizzled ring reads it n-major)
                uw = gl.convert_layout(gl.permute(w_ring.index(wslot).load(transposed(n1.type.layout.parent)),
                                                  (1, 0)), n1.type.layout.parent)
            else:
                uw = w_ring.index(wslot).load(n1.type.layout.parent)
            tile = _tile_values(uw, s, zw, n1, gscale, ELEM, BN, BK)
        else:
            tile = _tile_values(u, s, zw, n1, gscale, ELEM, BN, BK)
        if ACT is not None:
            if ACT[0] == ACT_SWIGLUOAI:     # interleaved rows, paired here; ACT_SILU's arrive paired (_act_rows)
                tile = _pair_rows(tile, BN, BK // 2)
        slot = (C0 + i) % STAGES
        if XTMA:
            mbarrier.wait(empty.index(slot), (((C0 + i) // STAGES) & 1) ^ 1)
            if XTMA == 2:
                _x_tile(x_desc, x_ring, xfull, i, n_tiles, off_m, BM, BK, STAGES)
        a_ring.index(slot)._reinterpret(gl.int32, [BN, BK // 2], a32_sl).store(tile)
        if not XTMA:
            async_copy.wait_group(XCP)          # tile i's activations (this thread's copies)
        if PFENCE:
            fence_async_shared()
        mbarrier.arrive(full.index(slot), count=1)
        u, s, zw = u1, s1, zw1
        if WPF == 2:
            u1, s1, zw1 = un, sn, zwn
        elif WPF == 3:
            u1, s1, zw1 = u2, s2, zw2
            u2, s2, zw2 = un, sn, zwn
        else:
            u1, s1, zw1 = u2, s2, zw2
            u2, s2, zw2 = u3, s3, zw3
            u3, s3, zw3 = un, sn, zwn
    if not XTMA:
        async_copy.wait_group(0)


@gluon.jit
def _decode_partition(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K,
                      stride_xm, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN: gl.constexpr,
                      ELEM: gl.constexpr, GROUP: gl.constexpr,
                      HAS_ZERO: gl.constexpr, NW: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr,
                      STAGES: gl.constexpr, DW: gl.constexpr, PFENCE: gl.constexpr, XCP: gl.constexpr,
                      WPF: gl.constexpr, XTMA: gl.constexpr = 0, PART: gl.constexpr = 0, DP: gl.constexpr = 1,
                      xfull=None, x_desc=None, w_ring=None, wfull=None, WT: gl.constexpr = 0,
                      ACT: gl.constexpr = None, C0=0, WU: gl.constexpr = 0):
    """The producer (DW warps; DP > 1: one of DP such partitions, _decode_loop_xcp): per K tile, the slot awaited
    (empty), the words decoded, both tiles stored, the slot handed over (full). Loads run ahead of the decode, the
    activations one tile and the words (from HBM) two, so that a tile's decode never waits for its own loads (each
    loop trip would otherwise sit out a memory latency). XCP D > 0: the activations copied by cp.async straight into
    their slot D tiles ahead instead (no registers, no shared stores of them here), and the words WPF tiles ahead;
    XTMA 1: the activations are not this partition's work at all (the MMA warps' TMA); XTMA 2: only a TMA started
    per K tile here."""
    BN: gl.constexpr = 16 * NW
    BK8: gl.constexpr = BK // 8
    a32_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2)    # same bytes
    u_l: gl.constexpr = words_layout(DW, BK8, BN, WKN)
    x_l: gl.constexpr = x_layout(DW)
    r8 = gl.arange(0, BK8, layout=gl.SliceLayout(1, u_l))
    n1 = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, u_l))
    if ACT is not None:
        if ACT[0] == ACT_SILU:
            n1 = _act_rows(n1 - off_n, off_n, N)
    n_ok = n1 < N
    if WKN:     # rows of whole 32-byte pieces (K a multiple of 64): said so, the loads are 16 bytes wide
        w_off = r8[:, None] * stride_wk + ((n1 * (stride_wn // 8)) * 8)[None, :]
    else:
        w_off = r8[:, None] * stride_wk + (n1 * stride_wn)[None, :]
    w_ok = (r8 >= 0)[:, None] & n_ok[None, :]
    xm = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, x_l))
    xk = gl.arange(0, BK, layout=gl.SliceLayout(0, x_l))
    x_off = xm[:, None] * stride_xm + xk[None, :]
    x_ok = (xm < M)[:, None] & (xk >= 0)[None, :]
    gscale = 1.0
    if ELEM == 2:
        gscale = gl.load(g_ptr)
    n_tiles = K // BK
    if XCP or XTMA:
        _decode_loop_xcp(x_ptr, w_ptr, s_ptr, z_ptr, a_ring, x_ring, full, empty, xfull, x_desc, off_m, x_off, x_ok,
                         w_off, w_ok, r8, n1, n_ok, gscale, n_tiles, stride_wk, stride_sk, stride_zk, stride_sn,
                         ELEM, GROUP,
                         HAS_ZERO, BN, BM, BK, STAGES, PFENCE, XCP, WPF, XTMA, PART, DP, w_ring, wfull, WT, WKN,
                         ACT, C0, WU)
        return
    xv = gl.load(x_ptr + x_off, mask=x_ok, other=0.0)
    u, s, zw = _load_words(0, n_tiles, w_ptr, s_ptr, z_ptr, w_off, w_ok, r8, n1, n_ok, stride_wk, stride_sk,
                           stride_zk, stride_sn, ELEM, GROUP, HAS_ZERO, BK)
    u1, s1, zw1 = _load_words(1, n_tiles, w_ptr, s_ptr, z_ptr, w_off, w_ok, r8, n1, n_ok, stride_wk, stride_sk,
                              stride_zk, stride_sn, ELEM, GROUP, HAS_ZERO, BK)
    for i in range(n_tiles):
        xn = gl.load(x_ptr + gl.minimum(i + 1, n_tiles - 1) * BK + x_off, mask=x_ok, other=0.0)
        un, sn, zwn = _load_words(i + 2, n_tiles, w_ptr, s_ptr, z_ptr, w_off, w_ok, r8, n1, n_ok, stride_wk,
                                  stride_sk, stride_zk, stride_sn, ELEM, GROUP, HAS_ZERO, BK)
        tile = _tile_values(u, s, zw, n1, gscale, ELEM, BN, BK)
        slot = i % STAGES
        mbarrier.wait(empty.index(slot), ((i // STAGES) & 1) ^ 1)
        a_ring.index(slot)._reinterpret(gl.int32, [BN, BK // 2], a32_sl).store(tile)
        x_ring.index(slot).store(xv)
        if PFENCE:
            fence_async_shared()
        mbarrier.arrive(full.index(slot), count=1)
        xv = xn
        u, s, zw = u1, s1, zw1
        u1, s1, zw1 = un, sn, zwn


#: ACT's first field: swigluoai on FC1's interleaved gate / up rows (gpt-oss), or silu on its halves (gate rows
#: 0..I-1, up rows I..2I-1: Qwen3's)
ACT_SWIGLUOAI = gl.constexpr(0)
ACT_SILU = gl.constexpr(1)


@gluon.jit
def _act_rows(r, off_n, N):
    """ACT_SILU: the weight row a program's local row r decodes, 16a + 8h + q -> h x N / 2 + off_n / 2 + 8a + q
    (gate rows for h = 0, up rows for h = 1, of FC1's outputs off_n / 2 .. + BN / 2): the tile arrives in the order
    _pair_rows gives interleaved rows, so the accumulator holds a pair's gate and up in one thread. Runs of 8
    contiguous rows from multiples of 8 (N / 2 and off_n / 2 are), said so: their loads stay vectorized."""
    n = ((r % 16) // 8) * (N // 2) + off_n // 2 + (r // 16) * 8 + r % 8
    return gl.max_contiguous(gl.multiple_of(n, 8), 8)


@gluon.jit
def _pair_rows(tile, BN: gl.constexpr, C: gl.constexpr):
    """ACT: a decoded [BN, C] tile with local row 16a + 2q + h (interleaved FC1: pair 8a + q's gate, h = 0, and
    up, h = 1) moved to row 16a + 8h + q, by relabelling the registers (no data moves): the wgmma accumulator then
    holds a pair's gate and up in one thread (its rows r and r + 8 of each 16)."""
    t = gl.permute(gl.reshape(tile, [BN // 16, 8, 2, C]), (0, 2, 1, 3))
    return gl.reshape(t, [BN, C])


@gluon.jit
def _store_act(acc, y_ptr, off_n, off_m, M, N, stride_ym, BN: gl.constexpr, BM: gl.constexpr, NW: gl.constexpr,
               ACT: gl.constexpr, qs_ptr=None, QACT: gl.constexpr = 0, live_ptr=None, T=0):
    """ACT = (kind, limit, alpha, beta): swigluoai (ACT_SWIGLUOAI) or silu (ACT_SILU, no limit) on the gate / up
    pairs _pair_rows or _act_rows placed in one thread, stored as FC2's input columns off_n / 2 .. + BN / 2 of the
    block rows: FC1's outputs rounded to bf16 (+ bias) as the separate activation launch reads them, then its
    steps in its order (moe_kernels._activate), rounded once. QACT (NVFP4 W4A4 with a static FC2 input scale at
    qs_ptr): those values then rounded through NVFP4 as launch.quantize_activations rounds them (dequant.quantize_tile
    ACT 4: an E4M3 scale per 16 columns times the global scale), so no rounding launch follows; a program's BN / 2
    columns are whole groups of 16 (off_n / 2 a multiple of 32). QACT 2 (the FC2 input scale dynamic): the largest
    |value| written to the rows that hold a pair (live_ptr: the sorted ids, below T) merged into qs_ptr[0] by an
    atomic max of its fp32 bits (non-negative floats order as their bits), so the amax launch over FC2's whole
    input need not run (its padding rows hold whatever garbage rows gave; they are left out here). QACT 3: the
    same, each warp's max merged by its own atomic (no CTA-wide reduction through shared memory)."""
    LIMIT: gl.constexpr = ACT[1]
    ALPHA: gl.constexpr = ACT[2]
    BETA: gl.constexpr = ACT[3]
    v = acc.to(gl.bfloat16).to(gl.float32)
    g, u = gl.split(gl.permute(gl.reshape(v, [BN // 16, 2, 8, BM]), (0, 2, 3, 1)))
    if ACT[0] == ACT_SWIGLUOAI:
        g = gl.minimum(g, LIMIT)
        u = gl.minimum(gl.maximum(u, -LIMIT), LIMIT)
        a = g * (1.0 / (1.0 + gl.exp(-(ALPHA * g)))) * (u + BETA)
    else:
        a = g * (1.0 / (1.0 + gl.exp(-g))) * u
    st_l: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, NW], [0, 1])
    a = gl.convert_layout(gl.reshape(a.to(gl.bfloat16), [BN // 2, BM]), st_l)
    if QACT >= 2:
        live = (gl.load(live_ptr + off_m + gl.arange(0, BM, layout=gl.SliceLayout(0, st_l))) < T)
        v = gl.where(live[None, :], gl.abs(a.to(gl.float32)), 0.0)
        if QACT == 3:   # each warp's max (st_l: column c in warp c % NW), one atomic a warp: no CTA-wide reduction
            wmax = gl.max(gl.max(gl.reshape(v, [BN // 2, BM // NW, NW]), axis=1), axis=0)
            gl.atomic_max(qs_ptr + gl.zeros_like(wmax.to(gl.int32, bitcast=True)), wmax.to(gl.int32, bitcast=True))
        else:
            gl.atomic_max(qs_ptr, gl.max(gl.max(v, axis=1), axis=0).to(gl.int32, bitcast=True))
    elif QACT:
        gs = gl.load(qs_ptr)
        blocks = gl.reshape(a.to(gl.float32), [BN // 32, 16, BM])
        sc = round_e4m3(gl.div_rn(gl.div_rn(gl.max(gl.abs(blocks), axis=1), 6.0), gs)) * gs
        q = round_e2m1(gl.div_rn(blocks, gl.where(sc > 0, sc, 1.0)[:, None, :]))
        a = gl.convert_layout(gl.reshape(q * sc[:, None, :], [BN // 2, BM]).to(gl.bfloat16), st_l)
    j = off_n // 2 + gl.arange(0, BN // 2, layout=gl.SliceLayout(1, st_l))
    m = off_m + gl.arange(0, BM, layout=gl.SliceLayout(0, st_l))
    gl.store(y_ptr + m[None, :] * stride_ym + j[:, None], a, mask=(j < N // 2)[:, None] & (m < M)[None, :])


@gluon.jit
def _x_tile(x_desc, x_ring, xfull, t, n_tiles, off_m, BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
            t_ring=None, t_desc=None, TAIL: gl.constexpr = 0, tail_ok=False):
    """XTMA 1: TMA of K tile t's activations [BM, BK] into its slot (t % STAGES), as 64-wide boxes (the 128-byte
    swizzle's span; a 128-deep slot is two such column blocks) of at most 256 rows (BM 512: two row blocks),
    completing on xfull; none past the last tile. TAIL: the block's TAIL rows after BM too, where tail_ok."""
    _x_tile_at(x_desc, x_ring, xfull, t % STAGES, t, off_m, t < n_tiles, BM, BK, t_ring, t_desc, TAIL, tail_ok)


@gluon.jit
def _x_tile_pt(x_desc, x_ring, xfull, j, n_tiles, C0, off_m, noff_m, nlive, BM: gl.constexpr, BK: gl.constexpr,
               STAGES: gl.constexpr, t_ring=None, t_desc=None, TAIL: gl.constexpr = 0, tail_ok=False, ntail=False):
    """PT: the activations of the ring's tile C0 + j: this output tile's K tile j (off_m's rows), or past its last
    K tile the next output tile's K tile j - n_tiles (noff_m's rows; none where nlive says there is no next).
    TAIL: each tile's tail rows where its own flag (tail_ok, ntail) says they hold a pair."""
    if j < n_tiles:
        _x_tile_at(x_desc, x_ring, xfull, (C0 + j) % STAGES, j, off_m, j < n_tiles, BM, BK, t_ring, t_desc, TAIL,
                   tail_ok)
    else:
        _x_tile_at(x_desc, x_ring, xfull, (C0 + j) % STAGES, j - n_tiles, noff_m, nlive, BM, BK, t_ring, t_desc, TAIL,
                   ntail)


@gluon.jit
def _x_tile_at(x_desc, x_ring, xfull, slot, t, off_m, ok, BM: gl.constexpr, BK: gl.constexpr, t_ring=None,
               t_desc=None, TAIL: gl.constexpr = 0, tail_ok=False):
    """The TMA of K tile t's activations, rows off_m .. + BM, into slot where ok (_x_tile). TAIL (the MoE's blocks
    of BM + TAIL rows): rows off_m + BM .. + TAIL into the slot of t_ring (t_desc's [TAIL, 64] boxes) as well where
    tail_ok; the slot's barrier expects the bytes of the copies made (one expect of the two, as its count is 1)."""
    if TAIL:
        mbarrier.expect(xfull.index(slot), (BM + TAIL) * BK * 2, pred=ok & tail_ok)
        mbarrier.expect(xfull.index(slot), BM * BK * 2, pred=ok & (tail_ok == 0))
        for h in gl.static_range(BK // 64):
            tma.async_copy_global_to_shared(t_desc, [off_m + BM, t * BK + 64 * h], xfull.index(slot),
                                            t_ring.index(slot).slice(64 * h, 64, dim=1), pred=ok & tail_ok)
    else:
        mbarrier.expect(xfull.index(slot), BM * BK * 2, pred=ok)
    XB: gl.constexpr = X_BOX_ROWS if BM > X_BOX_ROWS else BM
    for r in gl.static_range(BM // XB):
        for h in gl.static_range(BK // 64):
            dst = x_ring.index(slot)
            if BM > XB:
                dst = dst.slice(r * XB, XB, dim=0)
            tma.async_copy_global_to_shared(x_desc, [off_m + r * XB, t * BK + 64 * h], xfull.index(slot),
                                            dst.slice(64 * h, 64, dim=1), pred=ok)


@gluon.jit
def _w_tile(w_desc, w_ring, wfull, t, n_tiles, w_row, w_k0, BN: gl.constexpr, BK: gl.constexpr, WT: gl.constexpr,
            WKN: gl.constexpr):
    """WT: TMA of K tile t's words into their slot (t % WT), completing on wfull; none past the last tile. GPTQ's
    words: a [BK/8, BN] box of [K/8, N] (dense) or [E K/8, N] (the MoE's INT4 experts) at (w_k0 + t BK/8, w_row =
    off_n), w_k0 the expert's first word row (e K/8; 0 dense); the MoE's K-major words (WKN): a [BN, BK/8] box of
    [E N, K/8] at (w_row = e N + off_n, t BK/8)."""
    slot = t % WT
    ok = t < n_tiles
    mbarrier.expect(wfull.index(slot), BN * BK // 2, pred=ok)      # BN x BK/8 words of 4 bytes
    if WKN:
        tma.async_copy_global_to_shared(w_desc, [w_row, t * (BK // 8)], wfull.index(slot), w_ring.index(slot),
                                        pred=ok)
    else:
        tma.async_copy_global_to_shared(w_desc, [w_k0 + t * (BK // 8), w_row], wfull.index(slot), w_ring.index(slot),
                                        pred=ok)


@gluon.jit
def _mma_partition(a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr, T,
                   HAS_BIAS: gl.constexpr,
                   BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, NW: gl.constexpr, PFENCE: gl.constexpr,
                   MW: gl.constexpr, XTMA: gl.constexpr = 0, PP: gl.constexpr = 0, ROW0: gl.constexpr = 0, xfull=None,
                   x_desc=None, w_desc=None, w_ring=None, wfull=None, WT: gl.constexpr = 0, w_row=0, w_k0=0,
                   WKN: gl.constexpr = 0, ACT: gl.constexpr = None, half_ptr=None, HALF: gl.constexpr = 0,
                   WGN: gl.constexpr = 1, PT: gl.constexpr = 0, C0=0, noff_m=0, nlive=False, t_ring=None,
                   t_desc=None, TAIL: gl.constexpr = 0, ntail=False, qs_ptr=None, QACT: gl.constexpr = 0):
    """The consumer: per K tile, wait for its slot, one wgmma (A: the decoded weights [BN, BK], B: the
    activations [BM, BK] read K-major), then (MW 1) the previous tile's MMA waited for and its slot handed back,
    or (MW 0) this tile's, so a slot returns to the decode warps a tile sooner (R60's profile: the decode warps
    waited for slots that only the next tile's arrival would free); then the output tile (+ bias) in bf16.
    XTMA 1: these warps (idle while a slot is decoded) also fill the slots' activations by TMA, STAGES tiles
    ahead: a slot's next tile is loaded as soon as the MMA that read the slot is done. PP 1: one of two such
    partitions (a warpgroup each), this one on the slot's weight rows ROW0..ROW0 + 64: each waits, multiplies
    and hands slots back (empty counts both) on its own, so one's waits leave the tensor cores to the other.
    WT > 0 (with XTMA 1): these warps also bring the words by TMA into their WT-slot ring, tile t's once tile
    t - WT's slot is full (its decode, and so every read of t - WT's words, done). ACT: the output is FC2's input,
    swigluoai of the pairs the decode warps' _pair_rows put in one thread (_store_act). HALF (the MoE, with
    XTMA): a block whose second half holds no pair (half_ptr: the sorted ids, a block's pairs first, then the
    sentinel T) is multiplied and written as its first BM / 2 rows only (wgmma's N halved: an expert's last
    block is on average half padding); HALF 2 (BM >= 128): also a block whose pairs fit in its first quarter on
    that quarter (wgmma's N a quarter; the TMA still brings all BM rows, the decode is the same). WGN 2: the NW
    warps are two warpgroups side by side on the activation rows (each multiplies the whole decoded weight tile, BN = 16 x NW / 2 rows, by its half of the BM rows), so a
    decoded tile serves twice as many pairs. PT (_pt_mma): one output tile of a persistent program, the ring's
    tiles from C0 (_mma_tiles). TAIL (with HALF): the block is BM + TAIL rows; where its row BM holds a pair, the
    TAIL rows after BM are multiplied too, by a second wgmma (N = TAIL) on the same decoded tile into their own
    accumulator (t_ring: their slots, t_desc: their TMA boxes; ntail: the next PT tile's flag). QACT (with ACT):
    FC2's input rounded through NVFP4 in the epilogue, its static global scale at qs_ptr; QACT 2 / 3: its amax over
    the rows holding a pair (half_ptr) merged into qs_ptr instead (_store_act)."""
    if HALF:
        if gl.load(half_ptr + off_m + BM // 2) < T:
            if TAIL:
                if gl.load(half_ptr + off_m + BM) < T:
                    _mma_tiles(a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr, T,
                               HAS_BIAS, BM, BM, BK, STAGES, NW, PFENCE, MW, XTMA, PP, ROW0, xfull, x_desc, w_desc,
                               w_ring, wfull, WT, w_row, w_k0, WKN, ACT, WGN, PT, C0, noff_m, nlive, t_ring, t_desc,
                               TAIL, TAIL, ntail, qs_ptr=qs_ptr, QACT=QACT, live_ptr=half_ptr)
                else:
                    _mma_tiles(a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr, T,
                               HAS_BIAS, BM, BM, BK, STAGES, NW, PFENCE, MW, XTMA, PP, ROW0, xfull, x_desc, w_desc,
                               w_ring, wfull, WT, w_row, w_k0, WKN, ACT, WGN, PT, C0, noff_m, nlive, t_ring, t_desc,
                               TAIL, 0, ntail, qs_ptr=qs_ptr, QACT=QACT, live_ptr=half_ptr)
            else:
                _mma_tiles(a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr, T,
                           HAS_BIAS, BM, BM, BK, STAGES, NW, PFENCE, MW, XTMA, PP, ROW0, xfull, x_desc, w_desc, w_ring,
                           wfull, WT, w_row, w_k0, WKN, ACT, WGN, PT, C0, noff_m, nlive, qs_ptr=qs_ptr, QACT=QACT,
                           live_ptr=half_ptr)
        elif HALF == 2 and gl.load(half_ptr + off_m + BM // 4) >= T:      # the pairs in the first quarter
            _mma_tiles(a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr, T,
                       HAS_BIAS, BM, BM // 4, BK, STAGES, NW, PFENCE, MW, XTMA, PP, ROW0, xfull, x_desc, w_desc,
                       w_ring, wfull, WT, w_row, w_k0, WKN, ACT, WGN, PT, C0, noff_m, nlive, t_ring, t_desc, TAIL, 0,
                       ntail, qs_ptr=qs_ptr, QACT=QACT, live_ptr=half_ptr)
        else:
            _mma_tiles(a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr, T,
                       HAS_BIAS, BM, BM // 2, BK, STAGES, NW, PFENCE, MW, XTMA, PP, ROW0, xfull, x_desc, w_desc,
                       w_ring, wfull, WT, w_row, w_k0, WKN, ACT, WGN, PT, C0, noff_m, nlive, t_ring, t_desc, TAIL, 0,
                       ntail, qs_ptr=qs_ptr, QACT=QACT, live_ptr=half_ptr)
    else:
        _mma_tiles(a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr, T, HAS_BIAS,
                   BM, BM, BK, STAGES, NW, PFENCE, MW, XTMA, PP, ROW0, xfull, x_desc, w_desc, w_ring, wfull, WT,
                   w_row, w_k0, WKN, ACT, WGN, PT, C0, noff_m, nlive, qs_ptr=qs_ptr, QACT=QACT,
                   live_ptr=half_ptr)


@gluon.jit
def _mma_tiles(a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr, T,
               HAS_BIAS: gl.constexpr, BM: gl.constexpr, BMC: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
               NW: gl.constexpr, PFENCE: gl.constexpr, MW: gl.constexpr, XTMA: gl.constexpr, PP: gl.constexpr,
               ROW0: gl.constexpr, xfull, x_desc, w_desc, w_ring, wfull, WT: gl.constexpr, w_row, w_k0,
               WKN: gl.constexpr, ACT: gl.constexpr, WGN: gl.constexpr = 1, PT: gl.constexpr = 0, C0=0, noff_m=0,
               nlive=False, t_ring=None, t_desc=None, TAIL: gl.constexpr = 0, TL: gl.constexpr = 0, ntail=False,
               qs_ptr=None, QACT: gl.constexpr = 0, live_ptr=None):
    """_mma_partition's K loop and output on the first BMC of the slots' BM activation rows (the TMA still brings
    all BM: the ring's slots and their byte counts stay one size). WGN 2: the accumulator's columns (activation
    rows) split between two warpgroups, each issuing its own wgmma of N = BMC / 2. PT (XTMA 1, MW 1): K tile i is
    the ring's tile C0 + i; the slots freed by this tile's last STAGES MMAs take the next output tile's first
    activation tiles (noff_m's rows, where nlive), the last one handed back before the output is written, so the
    decode warps and the TMA fill the next tile's slots while this one's output is stored (_pt_mma). TAIL: the
    ring's tail slots (t_ring), filled for this tile where TL (= TAIL: its tail holds pairs, multiplied into a
    second accumulator; 0: not) and for the next PT tile where ntail."""
    BN: gl.constexpr = 16 * NW // WGN
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW // WGN, WGN],
                                                    instr_shape=[16, BMC // WGN, 16])
    acc = gl.zeros([BN, BMC], gl.float32, acc_l)
    if TL:
        tacc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                         instr_shape=[16, TL, 16])
        tacc = gl.zeros([BN, TL], gl.float32, tacc_l)
    n_tiles = K // BK
    if XTMA == 1 and not PT:    # (PT: the previous tile's loop, or _pt_mma for the first, started these)
        for p in gl.static_range(STAGES):
            _x_tile(x_desc, x_ring, xfull, p, n_tiles, off_m, BM, BK, STAGES, t_ring, t_desc, TAIL, TL > 0)
    if WT:
        for p in gl.static_range(WT):
            _w_tile(w_desc, w_ring, wfull, p, n_tiles, w_row, w_k0, BN, BK, WT, WKN)
    for i in range(n_tiles):
        slot = (C0 + i) % STAGES
        phase = ((C0 + i) // STAGES) & 1
        mbarrier.wait(full.index(slot), phase)
        if WT:
            _w_tile(w_desc, w_ring, wfull, i + WT, n_tiles, w_row, w_k0, BN, BK, WT,
                    WKN)
        if XTMA:
            mbarrier.wait(xfull.index(slot), phase)
        if not PFENCE:
            fence_async_shared()        # the decode warps' stores (ordered before by the mbarrier) before the wgmma
        a_s = a_ring.index(slot)
        if PP:
            a_s = a_s.slice(ROW0, BN, dim=0)
        x_s = x_ring.index(slot)
        if BMC != BM:
            x_s = x_s.slice(0, BMC, dim=0)
        acc = warpgroup_mma(a_s, x_s.permute((1, 0)), acc, is_async=True)
        if TL:
            t_s = t_ring.index(slot)
            tacc = warpgroup_mma(a_s, t_s.permute((1, 0)), tacc, is_async=True)
        if MW:
            if TL:      # two wgmma groups a tile: this tile's both may stay in flight
                acc, tacc, _, _, _ = warpgroup_mma_wait(num_outstanding=2, deps=(acc, tacc, a_s, x_s, t_s))
            else:
                acc, _, _ = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a_s, x_s))
            mbarrier.arrive(empty.index((C0 + i + STAGES - 1) % STAGES), count=1, pred=i > 0)
            if XTMA == 1:
                if i > 0:
                    if PT:
                        _x_tile_pt(x_desc, x_ring, xfull, i - 1 + STAGES, n_tiles, C0, off_m, noff_m, nlive, BM, BK,
                                   STAGES, t_ring, t_desc, TAIL, TL > 0, ntail)
                    else:
                        _x_tile(x_desc, x_ring, xfull, i - 1 + STAGES, n_tiles, off_m, BM, BK, STAGES, t_ring, t_desc,
                                TAIL, TL > 0)
        else:
            if TL:
                acc, tacc, _, _, _ = warpgroup_mma_wait(num_outstanding=0, deps=(acc, tacc, a_s, x_s, t_s))
            else:
                acc, _, _ = warpgroup_mma_wait(num_outstanding=0, deps=(acc, a_s, x_s))
            mbarrier.arrive(empty.index(slot), count=1)
            if XTMA == 1:
                _x_tile(x_desc, x_ring, xfull, i + STAGES, n_tiles, off_m, BM, BK, STAGES, t_ring, t_desc, TAIL,
                        TL > 0)
    if TL:
        acc, tacc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, tacc))
    else:
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    if PT:      # the last slot back, and the next tile's K tile STAGES - 1 into it
        mbarrier.arrive(empty.index((C0 + n_tiles - 1) % STAGES), count=1)
        _x_tile_pt(x_desc, x_ring, xfull, n_tiles - 1 + STAGES, n_tiles, C0, off_m, noff_m, nlive, BM, BK, STAGES,
                   t_ring, t_desc, TAIL, TL > 0, ntail)
    _mma_out(acc, b_ptr, y_ptr, off_n, off_m, M, N, stride_ym, sid_ptr, T, HAS_BIAS, BN, BMC, NW, ROW0, ACT, qs_ptr,
             QACT, live_ptr)
    if TL:
        _mma_out(tacc, b_ptr, y_ptr, off_n, off_m + BM, M, N, stride_ym, sid_ptr, T, HAS_BIAS, BN, TL, NW, ROW0, ACT,
                 qs_ptr, QACT, live_ptr)


@gluon.jit
def _mma_out(acc, b_ptr, y_ptr, off_n, off_m, M, N, stride_ym, sid_ptr, T, HAS_BIAS: gl.constexpr, BN: gl.constexpr,
             BMC: gl.constexpr, NW: gl.constexpr, ROW0: gl.constexpr, ACT: gl.constexpr, qs_ptr=None,
             QACT: gl.constexpr = 0, live_ptr=None):
    """An accumulator's output: its BN weight rows (from off_n + ROW0) by BMC activation rows (from off_m), x the
    expert's factor or + bias (HAS_BIAS 2 / 1), then FC2's input (ACT), the pairs' rows (sid_ptr) or y's rows."""
    acc_l: gl.constexpr = acc.type.layout
    on = off_n + ROW0 + gl.arange(0, BN, layout=gl.SliceLayout(1, acc_l))
    if ACT is not None:     # accumulator row r holds the weight row _pair_rows moved there or _act_rows chose
        r = on - off_n - ROW0
        if ACT[0] == ACT_SWIGLUOAI:
            on = off_n + ROW0 + (r // 16) * 16 + 2 * (r % 8) + (r % 16) // 8
        else:
            on = _act_rows(r, off_n, N)
    om = off_m + gl.arange(0, BMC, layout=gl.SliceLayout(0, acc_l))
    if HAS_BIAS == 2:       # b_ptr: the expert's fp32 output factor (moe_ws's NVFP4: g over the decode's 2**-8)
        acc = acc * gl.load(b_ptr)
    elif HAS_BIAS:
        acc += gl.load(b_ptr + on, mask=on < N, other=0.0).to(gl.float32)[:, None]
    if ACT is not None:
        _store_act(acc, y_ptr, off_n, off_m, M, N, stride_ym, BN, BMC, NW, ACT, qs_ptr, QACT, live_ptr, T)
    elif sid_ptr is not None:     # MoE, scattered: block row j is pair sid[j]'s output row (T and past: padding)
        pair = gl.load(sid_ptr + om)
        mask = (on < N)[:, None] & (pair < T)[None, :]
        gl.store(y_ptr + pair[None, :].to(gl.int64) * stride_ym + on[:, None], acc.to(gl.bfloat16), mask=mask)
    else:
        mask = (on < N)[:, None] & (om < M)[None, :]
        gl.store(y_ptr + om[None, :] * stride_ym + on[:, None], acc.to(gl.bfloat16), mask=mask)


@gluon.jit
def _mma_wg0(a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr, T,
             HAS_BIAS: gl.constexpr,
             BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, PFENCE: gl.constexpr, MW: gl.constexpr,
             XTMA: gl.constexpr, xfull, x_desc):
    """PP 1: the MMA warpgroup on the slots' weight rows 0-63 (a worker partition of 4 warps)."""
    _mma_partition(a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr, T, HAS_BIAS,
                   BM, BK,
                   STAGES, 4, PFENCE, MW, XTMA, 1, 0, xfull, x_desc)


@gluon.jit
def _mma_wg1(a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr, T,
             HAS_BIAS: gl.constexpr,
             BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, PFENCE: gl.constexpr, MW: gl.constexpr,
             XTMA: gl.constexpr, xfull, x_desc):
    """PP 1: the MMA warpgroup on the slots' weight rows 64-127."""
    _mma_partition(a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr, T, HAS_BIAS,
                   BM, BK,
                   STAGES, 4, PFENCE, MW, XTMA, 1, 64, xfull, x_desc)


@gluon.jit
def _decode_p0(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K, stride_xm,
               stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN: gl.constexpr, ELEM: gl.constexpr,
               GROUP: gl.constexpr, HAS_ZERO: gl.constexpr,
               NW: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, DW: gl.constexpr,
               PFENCE: gl.constexpr, XCP: gl.constexpr, WPF: gl.constexpr, XTMA: gl.constexpr, DP: gl.constexpr, xfull,
               x_desc, w_ring, wfull, WT: gl.constexpr, ACT: gl.constexpr):
    """DP > 1: decode partition 0 of DP (K tiles 0, DP, 2 DP, ...; DW / DP warps)."""
    _decode_partition(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K, stride_xm,
                      stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP, HAS_ZERO, NW, BM, BK,
                      STAGES, DW // DP, PFENCE, XCP,
                      WPF, XTMA, 0, DP, xfull, x_desc, w_ring, wfull, WT, ACT)


@gluon.jit
def _decode_p1(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K, stride_xm,
               stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN: gl.constexpr, ELEM: gl.constexpr,
               GROUP: gl.constexpr, HAS_ZERO: gl.constexpr,
               NW: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, DW: gl.constexpr,
               PFENCE: gl.constexpr, XCP: gl.constexpr, WPF: gl.constexpr, XTMA: gl.constexpr, DP: gl.constexpr, xfull,
               x_desc, w_ring, wfull, WT: gl.constexpr, ACT: gl.constexpr):
    """DP > 1: decode partition 1 of DP."""
    _decode_partition(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K, stride_xm,
                      stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP, HAS_ZERO, NW, BM, BK,
                      STAGES, DW // DP, PFENCE, XCP,
                      WPF, XTMA, 1, DP, xfull, x_desc, w_ring, wfull, WT, ACT)


@gluon.jit
def _decode_p2(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K, stride_xm,
               stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN: gl.constexpr, ELEM: gl.constexpr,
               GROUP: gl.constexpr, HAS_ZERO: gl.constexpr,
               NW: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, DW: gl.constexpr,
               PFENCE: gl.constexpr, XCP: gl.constexpr, WPF: gl.constexpr, XTMA: gl.constexpr, DP: gl.constexpr, xfull,
               x_desc, w_ring, wfull, WT: gl.constexpr, ACT: gl.constexpr):
    """DP 4: decode partition 2 of 4."""
    _decode_partition(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K, stride_xm,
                      stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP, HAS_ZERO, NW, BM, BK,
                      STAGES, DW // DP, PFENCE, XCP,
                      WPF, XTMA, 2, DP, xfull, x_desc, w_ring, wfull, WT, ACT)


@gluon.jit
def _decode_p3(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K, stride_xm,
               stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN: gl.constexpr, ELEM: gl.constexpr,
               GROUP: gl.constexpr, HAS_ZERO: gl.constexpr,
               NW: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, DW: gl.constexpr,
               PFENCE: gl.constexpr, XCP: gl.constexpr, WPF: gl.constexpr, XTMA: gl.constexpr, DP: gl.constexpr, xfull,
               x_desc, w_ring, wfull, WT: gl.constexpr, ACT: gl.constexpr):
    """DP 4: decode partition 3 of 4."""
    _decode_partition(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K, stride_xm,
                      stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP, HAS_ZERO, NW, BM, BK,
                      STAGES, DW // DP, PFENCE, XCP,
                      WPF, XTMA, 3, DP, xfull, x_desc, w_ring, wfull, WT, ACT)


@gluon.jit
def _pt_tile(t, total, ids_ptr, N, BN: gl.constexpr, BM: gl.constexpr, MOE: gl.constexpr):
    """PT: output tile t of the persistent order (weight-row tiles fastest, as the one-tile grid launches them): its
    off_n, off_m, expert (MoE: its block's, -1 none; dense 0) and whether it is work (t < total, an expert). The
    alignment's blocks without an expert are the last ones, so the first such tile ends a program's list."""
    n_tn = (N + BN - 1) // BN
    mb = gl.minimum(t, total - 1) // n_tn
    off_n = (gl.minimum(t, total - 1) - mb * n_tn) * BN
    if MOE:
        e = gl.load(ids_ptr + mb)
    else:
        e = mb * 0
    return off_n, mb * BM, e, (t < total) & (e >= 0)


@gluon.jit
def _pt_mma(a_ring, x_ring, full, empty, xfull, x_desc, ids_ptr, b_ptr, y_ptr, M, N, K, stride_ym, sid_ptr, T,
            stride_be, HAS_BIAS: gl.constexpr, MOE: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr,
            STAGES: gl.constexpr, NW: gl.constexpr, ACT: gl.constexpr, half_ptr, HALF: gl.constexpr, t_ring=None,
            t_desc=None, TAIL: gl.constexpr = 0, qs_ptr=None, QACT: gl.constexpr = 0):
    """PT: the MMA warps of a persistent program, over its output tiles t = program, + programs, ... (_pt_tile):
    each tile's K loop and output (_mma_partition) on the ring's tiles from C0 = the K tiles before it, the next
    tile's first activation tiles started by this one's loop (_mma_tiles). TAIL: blocks of BM + TAIL rows, each
    tile's tail rows loaded where its row BM holds a pair (the flag _mma_partition reads for its multiply)."""
    BN: gl.constexpr = 16 * NW
    BS: gl.constexpr = BM + TAIL
    n_tiles = K // BK
    total = ((N + BN - 1) // BN) * ((M + BS - 1) // BS)
    step = gl.num_programs(0)
    t = gl.program_id(0)
    off_n, off_m, e, live = _pt_tile(t, total, ids_ptr, N, BN, BS, MOE)
    tail = live
    if TAIL:
        tail = live & (gl.load(half_ptr + off_m + BM) < T)
    for p in gl.static_range(STAGES):       # the first tile's activations (the later ones' by the loop before)
        _x_tile_at(x_desc, x_ring, xfull, p, p, off_m, live, BM, BK, t_ring, t_desc, TAIL, tail)
    c0 = t * 0
    while live:
        noff_n, noff_m, ne, nlive = _pt_tile(t + step, total, ids_ptr, N, BN, BS, MOE)
        ntail = nlive
        if TAIL:
            ntail = nlive & (gl.load(half_ptr + noff_m + BM) < T)
        bias = b_ptr
        if MOE:
            bias = b_ptr + e.to(gl.int64) * stride_be
        _mma_partition(a_ring, x_ring, full, empty, bias, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr, T,
                       HAS_BIAS, BM, BK, STAGES, NW, 0, 1, 1, 0, 0, xfull, x_desc, None, None, None, 0, 0, 0, 0, ACT,
                       half_ptr, HALF, 1, 1, c0, noff_m, nlive, t_ring, t_desc, TAIL, ntail, qs_ptr, QACT)
        c0 += n_tiles
        t += step
        off_n, off_m, e, live = noff_n, noff_m, ne, nlive


@gluon.jit
def _pt_decode(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, ids_ptr, M, N, K, stride_xm,
               stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, stride_we, stride_se, stride_ze,
               WKN: gl.constexpr, ELEM: gl.constexpr, GROUP: gl.constexpr, HAS_ZERO: gl.constexpr, MOE: gl.constexpr,
               NW: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, DW: gl.constexpr,
               WPF: gl.constexpr, PART: gl.constexpr, DP: gl.constexpr, ACT: gl.constexpr, WU: gl.constexpr,
               TAIL: gl.constexpr = 0):
    """PT: decode partition PART of DP (DW warps) of a persistent program, over the same output tiles as _pt_mma:
    each tile's words from its expert (MoE), decoded into the ring's tiles from C0 (_decode_partition). A tile's
    first words are loaded while the MMA warps still multiply and store the previous one. TAIL: blocks of BM + TAIL
    rows (_pt_mma's tiles)."""
    BN: gl.constexpr = 16 * NW
    BS: gl.constexpr = BM + TAIL
    n_tiles = K // BK
    total = ((N + BN - 1) // BN) * ((M + BS - 1) // BS)
    step = gl.num_programs(0)
    t = gl.program_id(0)
    off_n, off_m, e, live = _pt_tile(t, total, ids_ptr, N, BN, BS, MOE)
    c0 = t * 0
    while live:
        w_e, s_e, z_e, g_e = w_ptr, s_ptr, z_ptr, g_ptr
        if MOE:
            w_e, s_e, g_e, _ = expert_operands(e.to(gl.int64), w_ptr, s_ptr, g_ptr, g_ptr, stride_we, stride_se, 0)
            if HAS_ZERO:
                z_e = z_ptr + e.to(gl.int64) * stride_ze
        _decode_partition(x_ptr, w_e, s_e, z_e, g_e, a_ring, x_ring, full, empty, off_n, off_m, M, N, K, stride_xm,
                          stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP, HAS_ZERO, NW, BM,
                          BK, STAGES, DW, 0, 0, WPF, 1, PART, DP, None, None, None, None, 0, ACT, c0, WU)
        c0 += n_tiles
        t += step
        off_n, off_m, e, live = _pt_tile(t, total, ids_ptr, N, BN, BS, MOE)


@gluon.jit
def _pt_decode_p0(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, ids_ptr, M, N, K, stride_xm,
                  stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, stride_we, stride_se, stride_ze,
                  WKN: gl.constexpr, ELEM: gl.constexpr, GROUP: gl.constexpr, HAS_ZERO: gl.constexpr,
                  MOE: gl.constexpr, NW: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                  DW: gl.constexpr, WPF: gl.constexpr, DP: gl.constexpr, ACT: gl.constexpr, WU: gl.constexpr,
                  TAIL: gl.constexpr = 0):
    """PT: decode partition 0 of DP."""
    _pt_decode(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, ids_ptr, M, N, K, stride_xm, stride_wk,
               stride_sk, stride_zk, stride_wn, stride_sn, stride_we, stride_se, stride_ze, WKN, ELEM, GROUP,
               HAS_ZERO, MOE, NW, BM, BK, STAGES, DW // DP, WPF, 0, DP, ACT, WU, TAIL)


@gluon.jit
def _pt_decode_p1(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, ids_ptr, M, N, K, stride_xm,
                  stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, stride_we, stride_se, stride_ze,
                  WKN: gl.constexpr, ELEM: gl.constexpr, GROUP: gl.constexpr, HAS_ZERO: gl.constexpr,
                  MOE: gl.constexpr, NW: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                  DW: gl.constexpr, WPF: gl.constexpr, DP: gl.constexpr, ACT: gl.constexpr, WU: gl.constexpr,
                  TAIL: gl.constexpr = 0):
    """PT: decode partition 1 of DP 2."""
    _pt_decode(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, ids_ptr, M, N, K, stride_xm, stride_wk,
               stride_sk, stride_zk, stride_wn, stride_sn, stride_we, stride_se, stride_ze, WKN, ELEM, GROUP,
               HAS_ZERO, MOE, NW, BM, BK, STAGES, DW // DP, WPF, 1, DP, ACT, WU, TAIL)


@gluon.jit
def _ws_pt_parts(a_ring, x_ring, full, empty, xfull, x_desc, x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, y_ptr, ids_ptr,
                 M, N, K, stride_xm, stride_ym, sid_ptr, T, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn,
                 stride_we, stride_se, stride_ze, stride_be, WKN: gl.constexpr, ELEM: gl.constexpr,
                 GROUP: gl.constexpr, HAS_ZERO: gl.constexpr, HAS_BIAS: gl.constexpr, MOE: gl.constexpr,
                 BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, DW: gl.constexpr, DREGS: gl.constexpr,
                 num_warps: gl.constexpr, WPF: gl.constexpr, DP: gl.constexpr, ACT: gl.constexpr, half_ptr,
                 HALF: gl.constexpr, WU: gl.constexpr, t_ring=None, t_desc=None, TAIL: gl.constexpr = 0, qs_ptr=None,
                 QACT: gl.constexpr = 0):
    """PT: w4_ws_kernel's split for a persistent program: _pt_mma as the default partition, DP (1 or 2) decode
    partitions (Triton 3.6's workers share one argument tuple)."""
    # the argument tuples written inline (w4_ws_kernel says why)
    if DP == 1:
        if _WS_LIST:
            gl.warp_specialize([
                (_pt_mma, (a_ring, x_ring, full, empty, xfull, x_desc, ids_ptr, b_ptr, y_ptr, M, N, K, stride_ym, sid_ptr, T, stride_be,
             HAS_BIAS, MOE, BM, BK, STAGES, num_warps, ACT, half_ptr, HALF, t_ring, t_desc, TAIL, qs_ptr, QACT)),
                (_pt_decode_p0, (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, ids_ptr, M, N, K, stride_xm, stride_wk,
             stride_sk, stride_zk, stride_wn, stride_sn, stride_we, stride_se, stride_ze, WKN, ELEM, GROUP, HAS_ZERO,
             MOE, num_warps, BM, BK, STAGES, DW, WPF, DP, ACT, WU, TAIL))], [DW], [DREGS])
        else:
            gl.warp_specialize((a_ring, x_ring, full, empty, xfull, x_desc, ids_ptr, b_ptr, y_ptr, M, N, K, stride_ym, sid_ptr, T, stride_be,
             HAS_BIAS, MOE, BM, BK, STAGES, num_warps, ACT, half_ptr, HALF, t_ring, t_desc, TAIL, qs_ptr, QACT), _pt_mma,
                               (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, ids_ptr, M, N, K, stride_xm, stride_wk,
             stride_sk, stride_zk, stride_wn, stride_sn, stride_we, stride_se, stride_ze, WKN, ELEM, GROUP, HAS_ZERO,
             MOE, num_warps, BM, BK, STAGES, DW, WPF, DP, ACT, WU, TAIL), [_pt_decode_p0], [DW], [DREGS])
    else:
        if _WS_LIST:
            gl.warp_specialize([
                (_pt_mma, (a_ring, x_ring, full, empty, xfull, x_desc, ids_ptr, b_ptr, y_ptr, M, N, K, stride_ym, sid_ptr, T, stride_be,
             HAS_BIAS, MOE, BM, BK, STAGES, num_warps, ACT, half_ptr, HALF, t_ring, t_desc, TAIL, qs_ptr, QACT)),
                (_pt_decode_p0, (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, ids_ptr, M, N, K, stride_xm, stride_wk,
             stride_sk, stride_zk, stride_wn, stride_sn, stride_we, stride_se, stride_ze, WKN, ELEM, GROUP, HAS_ZERO,
             MOE, num_warps, BM, BK, STAGES, DW, WPF, DP, ACT, WU, TAIL)),
                (_pt_decode_p1, (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, ids_ptr, M, N, K, stride_xm, stride_wk,
             stride_sk, stride_zk, stride_wn, stride_sn, stride_we, stride_se, stride_ze, WKN, ELEM, GROUP, HAS_ZERO,
             MOE, num_warps, BM, BK, STAGES, DW, WPF, DP, ACT, WU, TAIL))], [DW // 2, DW // 2], [DREGS, DREGS])
        else:
            gl.warp_specialize((a_ring, x_ring, full, empty, xfull, x_desc, ids_ptr, b_ptr, y_ptr, M, N, K, stride_ym, sid_ptr, T, stride_be,
             HAS_BIAS, MOE, BM, BK, STAGES, num_warps, ACT, half_ptr, HALF, t_ring, t_desc, TAIL, qs_ptr, QACT), _pt_mma,
                               (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, ids_ptr, M, N, K, stride_xm, stride_wk,
             stride_sk, stride_zk, stride_wn, stride_sn, stride_we, stride_se, stride_ze, WKN, ELEM, GROUP, HAS_ZERO,
             MOE, num_warps, BM, BK, STAGES, DW, WPF, DP, ACT, WU, TAIL), [_pt_decode_p0, _pt_decode_p1], [DW // 2, DW // 2], [DREGS, DREGS])

@gluon.jit
def w4_ws_kernel(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_ym, stride_wk,
                 stride_sk, stride_zk, ELEM: gl.constexpr, GROUP: gl.constexpr, HAS_ZERO: gl.constexpr,
                 HAS_BIAS: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                 DW: gl.constexpr, DREGS: gl.constexpr, num_warps: gl.constexpr, PFENCE: gl.constexpr = 0,
                 XCP: gl.constexpr = 0, WPF: gl.constexpr = 2, MW: gl.constexpr = 1, XTMA: gl.constexpr = 0,
                 PP: gl.constexpr = 0, DP: gl.constexpr = 1, x_desc=None, MOE: gl.constexpr = 0, stride_wn=1,
                 stride_sn=1, ids_ptr=None, sid_ptr=None, T=0, stride_we=0, stride_se=0, stride_be=0,
                 WT: gl.constexpr = 0, w_desc=None, KMAJOR: gl.constexpr = 1, stride_ze=0, ACT: gl.constexpr = None,
                 half_ptr=None, HALF: gl.constexpr = 0, WGN: gl.constexpr = 1, PT: gl.constexpr = 0,
                 TAIL: gl.constexpr = 0, t_desc=None, qs_ptr=None, QACT: gl.constexpr = 0):
    """y[m, n] = sum_k x[m, k] W[n, k] (+ bias[n]) for BN = 16 x num_warps weight rows and BM activation rows
    (the wgmma's N) per program; DW decode warps with DREGS registers each (the module docstring). The proxy
    fence between the decode warps' shared stores and the wgmma that reads them: by the MMA warps after the
    slot's mbarrier (PFENCE 0), or by the decode warps before they arrive on it (PFENCE 1: there ptxas's
    MEMBAR waits for the words still in flight for the next tiles, so every K tile sits out a memory latency).
    XTMA 1 / 2: x_desc, a TMA descriptor of x with [BM, 64] boxes, through which the MMA warps (1) or the decode
    warps (2) load the activations. PP 1 (with XTMA 2): the num_warps = DW decode warps are the default partition
    and two MMA warpgroups (workers of 4 warps, DREGS registers) each take 64 of BN = 128 weight rows on their own.
    DP 2 / 4 (with XTMA): the decode warps as DP partitions of DW / DP warps, each on every DP-th K tile.
    MOE 1 (moe_ws): program row b is the alignment's block b of BM pairs of expert ids[b] (-1: none, the
    program returns), x the pairs' activation rows in block order (M = blocks x BM), the weights [E, N, K/8]
    words (stride_wn = K / 8, stride_wk 1) with [E, N, K/group] scales, or (KMAJOR 0: INT4 experts) GPTQ's
    [E, K/8, N] words with [E, K/group, N] scales and [E, K/group, N/8] zero points (at stride_ze), the expert's
    words, scales, global scale and bias at stride_we / stride_se / 1 / stride_be; the output rows in block order
    too, or (sid_ptr) scattered to the pairs' rows sid[row] (T and past: padding, not written).
    WT > 0 (with XTMA 1, not PP): the words by TMA (w_desc: a [BK/8, BN] box of the dense [K/8, N] words, or a
    [BN, BK/8] box of the MoE's words as [E N, K/8]) into a ring of WT slots that the MMA warps fill WT tiles
    ahead; the decode warps read them from there, so many more tiles of words are in flight than the WPF tiles
    their registers hold (w_tma_desc). ACT = (kind, limit, alpha, beta) (MoE FC1, with XTMA, not PP: interleaved
    swigluoai, ACT_SWIGLUOAI, or silu on gate / up halves, ACT_SILU, not with WT): the decode warps store each
    tile's rows paired (_pair_rows; ACT_SILU: they decode the rows _act_rows picks, which arrive paired) and the
    epilogue writes FC2's input [rows, N / 2], the activation of the bf16-rounded outputs (_store_act), instead
    of FC1's rows. HALF 1 (the MoE with XTMA, not PP; half_ptr: the alignment's sorted ids): a block whose pairs
    all lie in its first BM / 2 rows is multiplied and written on those rows only (_mma_partition); HALF 2
    (BM >= 128) also one whose pairs lie in its first BM / 4 rows on those. WGN 2 (the MoE with XTMA 1, not PP):
    the num_warps = 8 MMA warps are two warpgroups on the two halves of BM (up to 512) activation rows, both multiplying the same BN = 16 x
    num_warps / 2 decoded weight rows (_mma_tiles), so each weight is decoded once per BM pairs at twice the rows
    one warpgroup's accumulator holds. PT 1 (XTMA 1, MW 1, DP 1 or 2 dividing STAGES, not PP, WT or WGN 2; K / BK >=
    STAGES): a persistent grid of at most one program an SM, each taking the output tiles program, + programs, ...
    in the one-tile grid's order (_pt_tile); the ring, its barriers' phases and the decode partitions' K tiles run
    on across a program's tiles, so the decode warps fill the next tile's slots and the MMA warps start its
    activations while the tile before is still multiplied and written (one program an SM otherwise sits out each
    tile's first loads and its output: R101c, the decode warps waiting at the program's end a fifth of their time).
    PT 2 (WPF 2): PT with the decode loop unrolled by two trips (_decode_loop_xcp's WU).
    HAS_BIAS 2: b_ptr is one fp32 factor (the MoE: an expert's, at stride_be) the accumulator is multiplied by
    before the output (and ACT); moe_ws's NVFP4 experts take g_ptr = 2**-8 (so the decoded E2M1 value x E4M3 scale
    x 2**-8 is exact in bf16, the fused decoder's factor at most 448 / 256) and this factor = 256 x g.
    TAIL (the MoE with XTMA 1 and HALF, not PP, WT or WGN 2): program row b is the block of BM + TAIL pairs at row
    b x (BM + TAIL); its first BM rows as before, and where its row BM holds a pair its TAIL rows after BM too,
    by a second wgmma of N = TAIL on the same decoded tile (t_desc: x's [TAIL, 64] boxes into a ring of their
    own). An expert with a few more pairs than BM (Qwen3's 256 +- 16 an expert at 4096 tokens) is then one block,
    its weights decoded once, where BM-pair blocks decode them twice for the overflow's few rows.
    QACT (with ACT; moe_ws's NVFP4 W4A4 with a static FC2 input scale, qs_ptr): the epilogue also rounds FC2's input
    through NVFP4 (_store_act), so no rounding launch runs between the GEMMs. QACT 2 (a dynamic FC2 input scale;
    qs_ptr: int32 state, zero before the launch; half_ptr: the sorted ids): the epilogue merges the largest |value|
    it writes to rows that hold a pair into qs_ptr[0] (_store_act), so the amax launch over FC2's input does not
    run (the rounding launch then takes the scale from it: launch.scale_from_amax); QACT 3: each warp's max by its
    own atomic.
    """
    gl.static_assert(ACT is None or (MOE and XTMA and not PP), "ACT: the MoE's FC1 with XTMA, without PP")
    gl.static_assert(WT == 0 or (XTMA == 1 and not PP), "WT: with XTMA 1, without PP")
    gl.static_assert(ACT is None or ACT[0] == ACT_SWIGLUOAI or WT == 0, "ACT_SILU: rows _act_rows picks, no WT boxes")
    gl.static_assert(HALF == 0 or (MOE and XTMA and not PP), "HALF: the MoE with XTMA, without PP")
    gl.static_assert(HALF != 2 or BM >= 128, "HALF 2: quarter blocks of at least 32 rows")
    gl.static_assert(WGN == 1 or (MOE and XTMA == 1 and not PP and num_warps == 8), "WGN 2: the MoE, XTMA 1, 8 warps")
    gl.static_assert(TAIL == 0 or (MOE and XTMA == 1 and HALF > 0 and not PP and WT == 0 and WGN == 1 and
                                   TAIL % 16 == 0 and TAIL <= BM), "TAIL: the MoE with XTMA 1 and HALF, no PP / WT / WGN 2")
    gl.static_assert(QACT == 0 or ACT is not None, "QACT: FC2's input written by FC1's epilogue (ACT)")
    gl.static_assert(QACT < 2 or half_ptr is not None, "QACT 2 / 3: the sorted ids (half_ptr) say which rows count")
    gl.static_assert(PT != 2 or WPF == 2, "PT 2 (WU): the words two tiles ahead, in two register sets")
    gl.static_assert(PT == 0 or (XTMA == 1 and MW == 1 and DP <= 2 and STAGES % DP == 0 and not PP and WT == 0
                                 and WGN == 1 and PFENCE == 0), "PT: XTMA 1, MW 1, DP 1 or 2, not PP / WT / WGN 2")
    NW: gl.constexpr = 8 if PP else num_warps
    BN: gl.constexpr = 16 * NW // WGN
    WKN: gl.constexpr = MOE * KMAJOR       # the words K-contiguous ([E, N, K/8]): words_layout's K-major form
    if PT:
        _ws_pt(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_ym, stride_wk, stride_sk,
               stride_zk, stride_wn, stride_sn, stride_we, stride_se, stride_ze, stride_be, ids_ptr, sid_ptr, T,
               x_desc, half_ptr, WKN, ELEM, GROUP, HAS_ZERO, HAS_BIAS, MOE, BM, BK, STAGES, DW, DREGS, num_warps, WPF,
               DP, ACT, HALF, PT == 2, TAIL, t_desc, qs_ptr, QACT)
        return
    off_n = gl.program_id(0) * BN
    off_m = gl.program_id(1) * (BM + TAIL)
    w_row = off_n       # WT: the box's place in w_desc (_w_tile)
    w_k0 = 0
    if MOE:
        e = gl.load(ids_ptr + gl.program_id(1))
        if e < 0:
            return      # a block past the last expert's (the grid is the static bound on the blocks)
        if WKN:
            w_row = e * N + off_n
        else:
            w_k0 = e * (K // 8)
        w_ptr, s_ptr, g_ptr, b_ptr = expert_operands(e.to(gl.int64), w_ptr, s_ptr, g_ptr, b_ptr, stride_we,
                                                     stride_se, stride_be)
        if HAS_ZERO:
            z_ptr = z_ptr + e.to(gl.int64) * stride_ze
    a_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    a_ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BN, BK], a_sl)
    x_ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BM, BK], a_sl)
    if TAIL:    # the blocks' TAIL rows after BM, a ring of their own (BM + TAIL is no power of two)
        t_ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, TAIL, BK], a_sl)
    else:
        t_ring = gl.constexpr(None)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    xfull = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=2 if PP else 1)
        if XTMA:
            mbarrier.init(xfull.index(s), count=1)
    if WT:      # the words' ring, unswizzled: the decode warps read whole 16-byte chunks of it
        w_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
        if WKN:
            w_ring = gl.allocate_shared_memory(gl.int32, [WT, BN, BK // 8], w_sl)
        else:
            w_ring = gl.allocate_shared_memory(gl.int32, [WT, BK // 8, BN], w_sl)
        wfull = gl.allocate_shared_memory(gl.int64, [WT, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(WT):
            mbarrier.init(wfull.index(s), count=1)
    else:       # a constexpr None: the partitions' argument tuples refuse a bare None
        w_ring = gl.constexpr(None)
        wfull = gl.constexpr(None)
    if XTMA:
        fence_async_shared()    # the barriers' initialisation before the TMA unit signals them
    # the argument tuples written inline: a tuple assigned to a name first holds its constexprs as tensors
    if not XTMA:    # the partitions' arguments as before XTMA
        if _WS_LIST:
            gl.warp_specialize([
                (_mma_partition, (a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym,
                                  sid_ptr, T, HAS_BIAS,
                                  BM, BK, STAGES, num_warps, PFENCE, MW)),
                (_decode_partition, (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N,
                                     K, stride_xm, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM,
                                     GROUP, HAS_ZERO, num_warps,
                                     BM, BK, STAGES, DW, PFENCE, XCP, WPF))], [DW], [DREGS])
        else:
            gl.warp_specialize((a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr,
                                T, HAS_BIAS,
                                BM, BK, STAGES, num_warps, PFENCE, MW), _mma_partition,
                               (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K,
                                stride_xm, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP,
                                HAS_ZERO, num_warps, BM, BK,
                                STAGES, DW, PFENCE, XCP, WPF), [_decode_partition], [DW], [DREGS])
    elif PP:    # Triton 3.6's workers share one argument tuple: both MMA warpgroups take the same
        if _WS_LIST:
            gl.warp_specialize([
                (_decode_partition, (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N,
                                     K, stride_xm, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM,
                                     GROUP, HAS_ZERO, NW, BM, BK,
                                     STAGES, DW, PFENCE, XCP, WPF, XTMA, 0, 1, xfull, x_desc)),
                (_mma_wg0, (a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr, T,
                            HAS_BIAS, BM,
                            BK, STAGES, PFENCE, MW, XTMA, xfull, x_desc)),
                (_mma_wg1, (a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr, T,
                            HAS_BIAS, BM,
                            BK, STAGES, PFENCE, MW, XTMA, xfull, x_desc))], [4, 4], [DREGS, DREGS])
        else:
            gl.warp_specialize((x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K,
                                stride_xm, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP,
                                HAS_ZERO, NW, BM, BK, STAGES,
                                DW, PFENCE, XCP, WPF, XTMA, 0, 1, xfull, x_desc), _decode_partition,
                               (a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr,
                                T, HAS_BIAS,
                                BM, BK, STAGES, PFENCE, MW, XTMA, xfull, x_desc), [_mma_wg0, _mma_wg1], [4, 4],
                               [DREGS, DREGS])
    else:     # XTMA: through a jit call, so its None arguments reach the partitions as constexprs
        _ws_decode_parts(a_ring, x_ring, full, empty, xfull, x_desc, x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, y_ptr,
                         off_n, off_m, M, N, K, stride_xm, stride_ym, sid_ptr, T, stride_wk, stride_sk, stride_zk,
                         stride_wn, stride_sn, WKN, ELEM, GROUP,
                         HAS_ZERO, HAS_BIAS, BM, BK, STAGES, DW, DREGS, num_warps, PFENCE, XCP, WPF, MW, XTMA, DP,
                         w_desc, w_ring,
                         wfull, WT, w_row, w_k0, ACT, half_ptr, HALF, WGN, t_ring, t_desc, TAIL, qs_ptr, QACT)


@gluon.jit
def _ws_decode_parts(a_ring, x_ring, full, empty, xfull, x_desc, x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, y_ptr, off_n,
                     off_m, M, N, K, stride_xm, stride_ym, sid_ptr, T, stride_wk, stride_sk, stride_zk, stride_wn,
                     stride_sn, WKN: gl.constexpr, ELEM: gl.constexpr,
                     GROUP: gl.constexpr, HAS_ZERO: gl.constexpr, HAS_BIAS: gl.constexpr, BM: gl.constexpr,
                     BK: gl.constexpr, STAGES: gl.constexpr, DW: gl.constexpr, DREGS: gl.constexpr,
                     num_warps: gl.constexpr, PFENCE: gl.constexpr, XCP: gl.constexpr, WPF: gl.constexpr,
                     MW: gl.constexpr, XTMA: gl.constexpr, DP: gl.constexpr, w_desc, w_ring, wfull, WT: gl.constexpr,
                     w_row, w_k0, ACT: gl.constexpr, half_ptr, HALF: gl.constexpr, WGN: gl.constexpr, t_ring=None,
                     t_desc=None, TAIL: gl.constexpr = 0, qs_ptr=None, QACT: gl.constexpr = 0):
    """DP 2 / 4: w4_ws_kernel's split with the MMA warps as the default partition and DP decode partitions (the
    same argument tuple, Triton 3.6's workers sharing one); DP 1 (with XTMA): the one decode partition. WGN 2: the
    decode partitions see num_warps / 2 MMA warps' worth of weight rows (NWD: BN = 16 x NWD)."""
    NWD: gl.constexpr = num_warps // WGN
    if DP == 1:
        if _WS_LIST:
            gl.warp_specialize([
                (_mma_partition, (a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym,
                                  sid_ptr, T, HAS_BIAS,
                                  BM, BK, STAGES, num_warps, PFENCE, MW, XTMA, 0, 0, xfull, x_desc,
                                  w_desc, w_ring, wfull, WT, w_row, w_k0, WKN, ACT, half_ptr, HALF, WGN, 0, 0, 0, False,
                                  t_ring, t_desc, TAIL, False, qs_ptr, QACT)),
                (_decode_partition, (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M,
                                     N, K, stride_xm, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM,
                                     GROUP, HAS_ZERO, NWD, BM, BK,
                                     STAGES, DW, PFENCE, XCP, WPF, XTMA, 0, 1, xfull, x_desc,
                                     w_ring, wfull, WT, ACT))], [DW], [DREGS])
        else:
            gl.warp_specialize((a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr,
                                T, HAS_BIAS, BM,
                                BK, STAGES, num_warps, PFENCE, MW, XTMA, 0, 0, xfull, x_desc,
                                w_desc, w_ring, wfull, WT, w_row, w_k0, WKN, ACT, half_ptr, HALF, WGN, 0, 0, 0, False,
                                t_ring, t_desc, TAIL, False, qs_ptr, QACT), _mma_partition,
                               (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K,
                                stride_xm, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP,
                                HAS_ZERO, NWD, BM, BK,
                                STAGES, DW, PFENCE, XCP, WPF, XTMA, 0, 1, xfull, x_desc,
                                w_ring, wfull, WT, ACT), [_decode_partition], [DW],
                               [DREGS])
    elif DP == 2:
        if _WS_LIST:
            gl.warp_specialize([
                (_mma_partition, (a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym,
                                  sid_ptr, T, HAS_BIAS,
                                  BM, BK, STAGES, num_warps, PFENCE, MW, XTMA, 0, 0, xfull, x_desc,
                                  w_desc, w_ring, wfull, WT, w_row, w_k0, WKN, ACT, half_ptr, HALF, WGN, 0, 0, 0, False,
                                  t_ring, t_desc, TAIL, False, qs_ptr, QACT)),
                (_decode_p0, (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K,
                              stride_xm, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP,
                              HAS_ZERO, NWD, BM, BK,
                              STAGES, DW, PFENCE, XCP, WPF, XTMA, DP, xfull, x_desc, w_ring, wfull, WT, ACT)),
                (_decode_p1, (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K,
                              stride_xm, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP,
                              HAS_ZERO, NWD, BM, BK,
                              STAGES, DW, PFENCE, XCP, WPF, XTMA, DP, xfull, x_desc, w_ring, wfull, WT, ACT))],
                [DW // 2, DW // 2], [DREGS, DREGS])
        else:
            gl.warp_specialize((a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr,
                                T, HAS_BIAS,
                                BM, BK, STAGES, num_warps, PFENCE, MW, XTMA, 0, 0, xfull, x_desc,
                                w_desc, w_ring, wfull, WT, w_row, w_k0, WKN, ACT, half_ptr, HALF, WGN, 0, 0, 0, False,
                                t_ring, t_desc, TAIL, False, qs_ptr, QACT), _mma_partition,
                               (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K,
                                stride_xm, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP,
                                HAS_ZERO, NWD, BM, BK,
                                STAGES, DW, PFENCE, XCP, WPF, XTMA, DP, xfull, x_desc,
                                w_ring, wfull, WT, ACT), [_decode_p0, _decode_p1],
                               [DW // 2, DW // 2], [DREGS, DREGS])
    else:
        if _WS_LIST:
            gl.warp_specialize([
                (_mma_partition, (a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym,
                                  sid_ptr, T, HAS_BIAS,
                                  BM, BK, STAGES, num_warps, PFENCE, MW, XTMA, 0, 0, xfull, x_desc,
                                  w_desc, w_ring, wfull, WT, w_row, w_k0, WKN, ACT, half_ptr, HALF, WGN, 0, 0, 0, False,
                                  t_ring, t_desc, TAIL, False, qs_ptr, QACT)),
                (_decode_p0, (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K,
                              stride_xm, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP,
                              HAS_ZERO, NWD, BM, BK,
                              STAGES, DW, PFENCE, XCP, WPF, XTMA, DP, xfull, x_desc, w_ring, wfull, WT, ACT)),
                (_decode_p1, (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K,
                              stride_xm, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP,
                              HAS_ZERO, NWD, BM, BK,
                              STAGES, DW, PFENCE, XCP, WPF, XTMA, DP, xfull, x_desc, w_ring, wfull, WT, ACT)),
                (_decode_p2, (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K,
                              stride_xm, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP,
                              HAS_ZERO, NWD, BM, BK,
                              STAGES, DW, PFENCE, XCP, WPF, XTMA, DP, xfull, x_desc, w_ring, wfull, WT, ACT)),
                (_decode_p3, (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K,
                              stride_xm, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP,
                              HAS_ZERO, NWD, BM, BK,
                              STAGES, DW, PFENCE, XCP, WPF, XTMA, DP, xfull, x_desc, w_ring, wfull, WT, ACT))],
                [DW // 4, DW // 4, DW // 4, DW // 4], [DREGS, DREGS, DREGS, DREGS])
        else:
            gl.warp_specialize((a_ring, x_ring, full, empty, b_ptr, y_ptr, off_n, off_m, M, N, K, stride_ym, sid_ptr,
                                T, HAS_BIAS,
                                BM, BK, STAGES, num_warps, PFENCE, MW, XTMA, 0, 0, xfull, x_desc,
                                w_desc, w_ring, wfull, WT, w_row, w_k0, WKN, ACT, half_ptr, HALF, WGN, 0, 0, 0, False,
                                t_ring, t_desc, TAIL, False, qs_ptr, QACT), _mma_partition,
                               (x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, a_ring, x_ring, full, empty, off_n, off_m, M, N, K,
                                stride_xm, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn, WKN, ELEM, GROUP,
                                HAS_ZERO, NWD, BM, BK,
                                STAGES, DW, PFENCE, XCP, WPF, XTMA, DP, xfull, x_desc, w_ring, wfull, WT, ACT),
                               [_decode_p0, _decode_p1, _decode_p2, _decode_p3], [DW // 4, DW // 4, DW // 4, DW // 4],
                               [DREGS, DREGS, DREGS, DREGS])


@gluon.jit
def _ws_pt(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_ym, stride_wk, stride_sk,
           stride_zk, stride_wn, stride_sn, stride_we, stride_se, stride_ze, stride_be, ids_ptr, sid_ptr, T, x_desc,
           half_ptr, WKN: gl.constexpr, ELEM: gl.constexpr, GROUP: gl.constexpr, HAS_ZERO: gl.constexpr,
           HAS_BIAS: gl.constexpr, MOE: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
           DW: gl.constexpr, DREGS: gl.constexpr, num_warps: gl.constexpr, WPF: gl.constexpr, DP: gl.constexpr,
           ACT: gl.constexpr, HALF: gl.constexpr, WU: gl.constexpr, TAIL: gl.constexpr = 0, t_desc=None, qs_ptr=None,
           QACT: gl.constexpr = 0):
    """PT 1 / 2: the persistent program's ring (the one-tile kernel's: STAGES slots of weights and activations, their
    full / empty / xfull barriers) and its partitions (_ws_pt_parts)."""
    BN: gl.constexpr = 16 * num_warps
    a_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    a_ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BN, BK], a_sl)
    x_ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BM, BK], a_sl)
    if TAIL:
        t_ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, TAIL, BK], a_sl)
    else:
        t_ring = gl.constexpr(None)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    xfull = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
        mbarrier.init(xfull.index(s), count=1)
    fence_async_shared()    # the barriers' initialisation before the TMA unit signals them
    _ws_pt_parts(a_ring, x_ring, full, empty, xfull, x_desc, x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, y_ptr, ids_ptr,
                 M, N, K, stride_xm, stride_ym, sid_ptr, T, stride_wk, stride_sk, stride_zk, stride_wn, stride_sn,
                 stride_we, stride_se, stride_ze, stride_be, WKN, ELEM, GROUP, HAS_ZERO, HAS_BIAS, MOE, BM, BK, STAGES,
                 DW, DREGS, num_warps, WPF, DP, ACT, half_ptr, HALF, WU, t_ring, t_desc, TAIL, qs_ptr, QACT)
