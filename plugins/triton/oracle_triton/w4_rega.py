"""Few-row 4-bit W4A16 GEMM with the decoded weights as wgmma's REGISTER A operand (issue 26, M <= 16;
Gluon, sm_90).

Why: gemm.w4_swap_kernel (tl.dot, swap-AB) is bound inside the SM at M = 16, not by bytes: per 128-deep
K tile each warp runs about 300 instructions, the decoded tile makes a shared-memory round trip (stores,
a barrier, ldmatrix) into the layout wgmma wants, and each of the eight 64x16x16 MMAs is waited for.
Triton picks the layout of a load itself, so tl.dot cannot get the decoded values where the MMA wants
them. Gluon states layouts: here each lane LOADS exactly the packed words whose decoded values are its
A-fragment registers (wgmma m64nNk16 bf16: lane l of warp w holds rows 16w + l/4 and + 8, k pairs
2(l%4), +1 and + 8, + 9; words_layout), decodes them in place (byte_pairs_ptx: a PRMT per byte pair, then
two or three instructions for its two values, pair_lines), and hands them to `warpgroup_mma` with no layout change
(`convert_layout(..., assert_trivial=True)` fails the compile otherwise). Eight MMAs per K tile are
issued back to back and waited for once.

No repack: the weights stay in the engine's [K/8, N] word layout. Lane pair c (l % 4) of a row loads
words 4c + e (e = 2h + p: h the fragment's k half, p the word parity) of each 128-wide K tile; MMA step
j + 4p multiplies codes 2j and 2j + 1 of the words of parity p, i.e. k = 32c + 16h + 8p + 2j (+ 1) at the
step's k index 8h + 2c (+ 1). The activations are copied into shared memory in that order (a 4-byte
cp.async per k pair, XT K tiles per chunk), so the step's B operand is 16 contiguous columns.

INT4 (zero points or not): q - z exactly (bf16 has 8 bits of mantissa), the tile's products summed
in fp32 and scaled once per (row, tile): the K tile is the 128-wide group (as w4_swap_kernel). E2M1
(MXFP4 / NVFP4): value x scale rounded once to bf16 as the reference dequantizes (the fused decoder;
scales checked at load by formats.fused_scales_ok); for NVFP4 that factor is bf16(s x g x 2**126), the scale
rounded before the value's 1.5, so TABLE (gemm.e2m1_word_ptx_table's A-fragment order) gives exactly the
reference's weights instead.
bf16 layers only; grid (N / BN, M / 16, SPLIT_K); the MoE modes: (N / BN, pairs or blocks, SPLIT_K).
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

from .gemm import e2m1_word_ptx_table

#: The CTA-wide barrier (bar.sync): `thread_barrier` in Triton 3.6 (the H200's), `barrier` in 3.7.
_cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier


def pair_lines(e2m1: bool, word: str, factor: str) -> tuple[list[str], list[list[str]]]:
    """PTX of the byte-pair decoders (byte_pairs_ptx here, w4_ws.pairs_ptx): the lines before the pairs, and for
    each byte j of word the lines that leave its codes 2j and 2j + 1 in register a (code 2j the low half).
    INT4 (factor = {0x4300 | z, 0x4300 | z}): PRMT puts byte j of the word and of the word shifted right by 4 in
    the two halves (both codes at bits 0-3), masked and ORed into 0x4300 (bf16 128, where 128 + q is exact) in
    one LOP3, and one packed subtraction gives q - z exactly. E2M1 (factor = {c, c}, c = bf16(2**126 x scale),
    gemm.e2m1_scale_pair): PRMT takes both codes from the high nibble of a byte (code 2j from the word shifted
    left by 4, code 2j + 1 from the word) and fills the byte above each with that byte's sign (PRMT's sign
    replication), so one shift left by 2 puts the magnitude at bf16 bits 6-8 and a copy of the sign at bit 15,
    one AND clears the rest (value x 2**-126 exactly), and one packed FMA by c gives value x scale rounded once
    (+ -0 keeps the signs of zeros): 4 instructions a pair (7 before R100: the MXFP4 MoE's WS launches are bound
    by their decode warps, R98b)."""
    prelude = [".reg .b32 v, t, a, b, z, c;", "mov.b32 z, 0x80008000;", "mov.b32 c, 0x43004300;",
               f"shl.b32 v, {word}, 4;" if e2m1 else f"shr.b32 v, {word}, 4;"]
    pairs = []
    for j in range(4):
        if e2m1:
            sel = j | ((8 | j) << 4) | ((4 + j) << 8) | ((12 + j) << 12)     # bytes: v's j, its sign; word's j, its sign
            pairs.append([f"prmt.b32 t, v, {word}, {sel:#x};", "shl.b32 a, t, 2;", "and.b32 a, a, 0x81C081C0;",
                          f"fma.rn.bf16x2 a, a, {factor}, z;"])
        else:
            sel = j | (j << 4) | ((4 + j) << 8) | ((4 + j) << 12)
            pairs.append([f"prmt.b32 t, {word}, v, {sel:#x};", "lop3.b32 a, t, 0x000F000F, c, 0xEA;",   # (t & mask) | c
                          f"sub.rn.bf16x2 a, a, {factor};"])
    return prelude, pairs


def byte_pairs_ptx(e2m1: bool) -> str:
    """PTX: one word $8 of 8 codes (code i at bits 4i..4i+3, k order) and its factor pair $9 (pair_lines) -> the
    codes 2j and 2j + 1 of each byte j as the halves $j / $(j + 4): INT4 q - z, E2M1 value x scale, in bf16."""
    prelude, pairs = pair_lines(e2m1, "$8", "$9")
    lines = prelude + [x for j in range(4) for x in pairs[j] + [f"mov.b32 {{${j}, ${j + 4}}}, a;"]]
    return "{\n" + "\n".join(lines) + "\n}"


_INT4_PTX = gl.constexpr(byte_pairs_ptx(False))
_E2M1_PTX = gl.constexpr(byte_pairs_ptx(True))
_TABLE_PTX = gl.constexpr(e2m1_word_ptx_table(a_fragment=True))


def launch_keys(cfg: dict[str, int], scale_ptr: int, stride_sn: int) -> dict[str, int]:
    """w4_rega_kernel's optional constexprs from a REGA config (EARLY, TABLE, WAIT, VEC as the kernel's docstring says;
    absent: 0). TABLE 2 loads two E4M3 scale bytes as one 16-bit word: where the scale tensor's address or row
    stride is odd it runs as TABLE 1 (the same scale words, byte loads)."""
    table = cfg.get("TABLE", 0)
    return {"EARLY": cfg.get("EARLY", 0), "TABLE": 1 if table == 2 and (scale_ptr | stride_sn) % 2 else table,
            "WAIT": cfg.get("WAIT", 0), "VEC": cfg.get("VEC", 0)}


@gluon.constexpr_function
def words_layout(num_warps: int, bn: int, per_lane: int) -> gl.DistributedLinearLayout:
    """[BN, 4, per_lane] words of a K tile (row, lane pair c, word): lane l holds c = l % 4 of rows l / 4
    and + 8 of its warp's 16 rows (the A fragment's rows), per_lane words each."""
    regs = [[0, 0, 1 << i] for i in range(per_lane.bit_length() - 1)] + [[8, 0, 0]]
    return gl.DistributedLinearLayout(reg_bases=regs,
                                      lane_bases=[[0, 1, 0], [0, 2, 0], [1, 0, 0], [2, 0, 0], [4, 0, 0]],
                                      warp_bases=[[16 << i, 0, 0] for i in range(num_warps.bit_length() - 1)],
                                      block_bases=[], shape=[bn, 4, per_lane])


@gluon.constexpr_function
def out_layout(num_warps: int, vec: int) -> gl.BlockedLayout:
    """[BN, 16] outputs and split-K partials, n fastest (coalesced): one n per lane, or (VEC 1) 4 consecutive n
    per thread (16-byte partial loads and stores, 8-byte bf16 stores): BN / 4 lanes along n, the rest along m."""
    if not vec:
        return gl.BlockedLayout([1, 1], [32, 1], [1, num_warps], [0, 1])
    ln = min(32, 4 * num_warps)
    return gl.BlockedLayout([4, 1], [ln, 32 // ln], [1, num_warps], [0, 1])


@gluon.constexpr_function
def x_pairs_layout(num_warps: int) -> gl.BlockedLayout:
    """[2 XT x 16, 64] activation half tiles, 2 contiguous k per thread (one 4-byte cp.async)."""
    return gl.BlockedLayout([1, 2], [1, 32], [num_warps, 1], [1, 0])


@gluon.constexpr_function
def x_vec_layout(num_warps: int) -> gl.BlockedLayout:
    """XP: [2 XT x BM, 64] activation half tiles already in the copy's order, 8 contiguous values per thread (one
    16-byte cp.async)."""
    return gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])


@gluon.jit
def _operand(lo, hi, a_l: gl.constexpr):
    """Codes 2j and 2j + 1 of the words [BN, 4, 2] (lane pair c, fragment half h) -> the [BN, 16] A operand
    (k index 8h + 2c + which), in the A fragment's registers: no data movement (asserted)."""
    w = gl.permute(gl.join(lo, hi), (0, 2, 1, 3))        # [BN, h, c, which]
    return gl.convert_layout(gl.reshape(w, [lo.shape[0], 16]), a_l, assert_trivial=True)


@gluon.jit
def _decode(u, f, ELEM: gl.constexpr, TABLE: gl.constexpr):
    """Words [BN, 4, 2] and their factor pairs (TABLE: scale words) -> the 8 bf16 code tensors (byte_pairs_ptx;
    TABLE: gemm.e2m1_word_ptx_table(a_fragment=True))."""
    if TABLE and ELEM == 2:
        h = gl.inline_asm_elementwise(_TABLE_PTX, "=h,=h,=h,=h,=h,=h,=h,=h,r,r", [u, f], dtype=(gl.int16,) * 8,
                                      is_pure=True, pack=1)
    elif ELEM == 3:
        h = gl.inline_asm_elementwise(_INT4_PTX, "=h,=h,=h,=h,=h,=h,=h,=h,r,r", [u, f], dtype=(gl.int16,) * 8,
                                      is_pure=True, pack=1)
    else:
        h = gl.inline_asm_elementwise(_E2M1_PTX, "=h,=h,=h,=h,=h,=h,=h,=h,r,r", [u, f], dtype=(gl.int16,) * 8,
                                      is_pure=True, pack=1)
    return h[0].to(gl.bfloat16, bitcast=True), h[1].to(gl.bfloat16, bitcast=True), \
        h[2].to(gl.bfloat16, bitcast=True), h[3].to(gl.bfloat16, bitcast=True), \
        h[4].to(gl.bfloat16, bitcast=True), h[5].to(gl.bfloat16, bitcast=True), \
        h[6].to(gl.bfloat16, bitcast=True), h[7].to(gl.bfloat16, bitcast=True)


@gluon.jit
def _mma_half(acc, u, f, xs, a_l: gl.constexpr, ELEM: gl.constexpr, FIRST: gl.constexpr, TABLE: gl.constexpr):
    """The four MMA steps of one word parity p: step j multiplies codes 2j, 2j + 1 of each word (A, from
    registers) with the activations' half tile xs [16, 64] at columns 16j..16j + 15 (B)."""
    h0, h1, h2, h3, h4, h5, h6, h7 = _decode(u, f, ELEM, TABLE)
    acc = warpgroup_mma(_operand(h0, h4, a_l), xs.slice(0, 16, dim=1).permute((1, 0)), acc, use_acc=not FIRST,
                        is_async=True)
    acc = warpgroup_mma(_operand(h1, h5, a_l), xs.slice(16, 16, dim=1).permute((1, 0)), acc, is_async=True)
    acc = warpgroup_mma(_operand(h2, h6, a_l), xs.slice(32, 16, dim=1).permute((1, 0)), acc, is_async=True)
    return warpgroup_mma(_operand(h3, h7, a_l), xs.slice(48, 16, dim=1).permute((1, 0)), acc, is_async=True)


@gluon.jit
def _tile(acc, u, s, f, xs_all, i, f_l: gl.constexpr, a_l: gl.constexpr, BN: gl.constexpr, ELEM: gl.constexpr,
          TABLE: gl.constexpr, WAIT: gl.constexpr = 0):
    """acc + K tile i of the shared-memory chunk times its words u [BN, 4, 4] (factors f; INT4: group scales s,
    the tile's products summed in fp32 first), its eight MMAs issued back to back and waited for once (E2M1 with
    WAIT 1: only the previous tile's MMAs waited for, so that the next tile's decode runs beside this tile's MMAs;
    the caller waits for the last tile's)."""
    wp0, wp1 = gl.split(gl.reshape(u, [BN, 4, 2, 2]))           # word parity p = 0 / 1: [BN, c, h]
    wp0 = gl.convert_layout(wp0, f_l, assert_trivial=True)
    wp1 = gl.convert_layout(wp1, f_l, assert_trivial=True)
    if ELEM == 3:
        fz = f + gl.zeros_like(wp0)
        p = _mma_half(acc, wp0, fz, xs_all.index(2 * i), a_l, ELEM, True, False)
        p = _mma_half(p, wp1, fz, xs_all.index(2 * i + 1), a_l, ELEM, False, False)
        p = warpgroup_mma_wait(num_outstanding=0, deps=(p,))
        acc += p * s[:, None]
    else:
        acc = _mma_half(acc, wp0, f, xs_all.index(2 * i), a_l, ELEM, False, TABLE)
        acc = _mma_half(acc, wp1, f, xs_all.index(2 * i + 1), a_l, ELEM, False, TABLE)
        acc = warpgroup_mma_wait(num_outstanding=8 if WAIT else 0, deps=(acc,))
    return acc


@gluon.jit
def _load_tile(t, t1, rows3, c3, e3, n_ok3, rows2, c2, h2, n_ok2, rows1, n_ok1, offs_n, n_ok, w_ptr, s_ptr, z_ptr,
               gscale, stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM: gl.constexpr,
               GROUP: gl.constexpr, HAS_ZERO: gl.constexpr, TABLE: gl.constexpr, K=0, KMASK: gl.constexpr = 0):
    """K tile t's words [BN, 4, 4] (word 4c + e of the tile's 16 per row: row-contiguous layouts give one
    16-byte load per row and lane), and the decoders' factors: INT4 the zero-point pairs [BN] and the
    group scales [BN] (acc rows); E2M1 the scale pairs [BN, 4, 2] of words 4c + 2h (+ 1): k 32c + 16h..
    KMASK (K a multiple of 32, not of 128: the last tile's lane pairs past K load zero words and scales; the mask
    is constant over each lane's 4 words, so the loads stay 16 bytes wide)."""
    t = gl.minimum(t, t1 - 1)
    if KMASK:
        n_ok3 = n_ok3 & ((t * 128 + 32 * c3) < K)
        n_ok2 = n_ok2 & ((t * 128 + 32 * c2) < K)
    u = gl.load(w_ptr + rows3 * stride_wn + (t * 16 + 4 * c3 + e3) * stride_wk, mask=n_ok3, other=0)
    if ELEM == 3:
        s = gl.load(s_ptr + t * stride_sk + offs_n, mask=n_ok, other=0.0).to(gl.float32)
        if HAS_ZERO:
            zw = gl.load(z_ptr + t * stride_zk + rows1 // 8, mask=n_ok1, other=0)
            z = (zw >> ((rows1 % 8) * 4)) & 15
        else:
            z = gl.full(rows1.shape, 8, gl.int32, rows1.type.layout)
        f = (z | 0x4300) * 65537
    else:
        if TABLE == 2:
            # lane pair c's two groups 2c, 2c + 1 (k 32c..32c + 31) of the tile: their two E4M3 bytes in one
            # 16-bit load (stride_sk 1, stride_sn even: DenseGemm.rega), split into the scale words of h = 0, 1
            rows_s = gl.sum(rows2, axis=2)                  # [BN, 1] and [1, 4] in f_l's slice: no data movement
            c_s = gl.sum(c2, axis=2)
            sp = (s_ptr + rows_s * stride_sn + t * 8 + 2 * c_s).to(gl.pointer_type(gl.int16))
            pair = gl.load(sp, mask=gl.max(n_ok2.to(gl.int32), axis=2) != 0, other=0).to(gl.int32)
            f = gl.convert_layout(gl.join(_scale_word((pair & 0xFF).to(gl.uint8), gscale),
                                          _scale_word(((pair >> 8) & 0xFF).to(gl.uint8), gscale)), rows2.type.layout,
                                  assert_trivial=True)
            return u, gl.zeros_like(offs_n.to(gl.float32)), f
        g = t * (128 // GROUP) + (32 * c2 + 16 * h2) // GROUP
        sr = gl.load(s_ptr + rows2 * stride_sn + g * stride_sk, mask=n_ok2, other=0)
        if ELEM == 1:
            f = (sr.to(gl.int32) + 126) * 0x00800080
        elif TABLE:
            f = _scale_word(sr, gscale)
        else:
            c = (sr.to(gl.float8e4nv, bitcast=True).to(gl.float32) * gscale) * 8.507059173023462e37
            f = (c.to(gl.bfloat16).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF) * 65537
        s = gl.zeros_like(offs_n.to(gl.float32))
    return u, s, f


@gluon.jit
def _scale_word(sr, gscale):
    """NVFP4 E4M3 scale bytes -> the byte-table decoder's scale words {A, B} (int32, A low): A = bf16(s x g), B =
    bf16((1.5 s) x g), the products in fp32 (1.5 s is exact), each rounded once as the reference's weights (one
    packed conversion: cvt.rn.bf16x2.f32 puts its second source in the low half)."""
    sv = sr.to(gl.float8e4nv, bitcast=True).to(gl.float32)
    return gl.inline_asm_elementwise("cvt.rn.bf16x2.f32 $0, $2, $1;", "=r,f,f", [sv * gscale, (sv * 1.5) * gscale],
                                     dtype=gl.int32, is_pure=True, pack=1)      # both rounded to nearest even


@gluon.jit
def expert_operands(e64, w_ptr, s_ptr, g_ptr, b_ptr, stride_we, stride_se, stride_be):
    """The MoE modes' expert e64 (int64): its words, scales, global scale and bias, at their expert strides (the
    global scale one fp32 an expert)."""
    return w_ptr + e64 * stride_we, s_ptr + e64 * stride_se, g_ptr + e64, b_ptr + e64 * stride_be


@gluon.jit
def w4_rega_kernel(x_ptr, w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym,
                   stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM: gl.constexpr, GROUP: gl.constexpr,
                   HAS_ZERO: gl.constexpr, HAS_BIAS: gl.constexpr, SPLIT_K: gl.constexpr, XT: gl.constexpr,
                   num_warps: gl.constexpr, PF: gl.constexpr = 2, EARLY: gl.constexpr = 0,
                   TABLE: gl.constexpr = 0, WAIT: gl.constexpr = 0, VEC: gl.constexpr = 0, ids_ptr=None, E=0, TOPK=1,
                   stride_we=0, stride_se=0, stride_be=0, MOE: gl.constexpr = 0, A_BY_PAIR: gl.constexpr = 0,
                   XDB: gl.constexpr = 0, sid_ptr=None, BM: gl.constexpr = 16, KMASK: gl.constexpr = 0,
                   XP: gl.constexpr = 0):
    """y[m, n] = sum_k x[m, k] W[n, k] (+ bias[n]), BM (16 but in MOE 2) activation rows per program, BN = 16 x
    num_warps weight rows (num_warps 4 or 8: one or two warpgroups; 16 in MOE 2: four), K tiles of 128 dealt to SPLIT_K programs
    (dequant.split_range), the activations of XT tiles at a time in shared memory; PF 1 / 2: each tile's words
    loaded PF tiles ahead in the K loop; PF 0: the program has exactly XT tiles (SPLIT_K x XT = K / 128, XT <= 4),
    all their words loaded before the first MMA beside the activations' copy, the tiles unrolled (few K tiles
    per program: one memory latency instead of one per loop trip). EARLY (PF 0): a CTA barrier after the loads
    (1: before the activations' wait; 2: before their copy) so that ptxas issues them there: without it the
    sm_90a SASS issues most word loads after the wait (two memory latencies in series). TABLE (NVFP4): the
    byte-table decoder (gemm.e2m1_word_ptx_table's A-fragment order, exact weights) instead of the fused factor;
    TABLE 2: the same, each lane's two scale bytes of a K tile in one 16-bit load (stride_sk 1; stride_sn even
    and s_ptr 2-byte aligned: launch_keys). WAIT 1 (PF 0, E2M1): each K tile waits only for the previous tile's
    MMAs (the next tile's decode beside this tile's MMAs), the last tile's waited for before the epilogue. Only with
    PF 0: there the tiles are unrolled and ptxas renames the next tile's A registers, waiting for the one it reuses
    (WARPGROUP.DEPBAR.LE 7); in the K loop it reuses the in-flight tile's A registers across the back edge without a
    wait (R90-R92, twenty-second pass: a loop form gave wrong sums in 10 of 47 timed configurations). VEC 1:
    the outputs and split-K partials 4 consecutive n per thread (out_layout). Words: int32, word j
    (codes k 8j..8j+7) of row n at n * stride_wn + j * stride_wk (E2M1 [N, K/8], INT4 GPTQ [K/8, N]).
    SPLIT_K > 1: fp32 partials to part_ptr [SPLIT_K, M, N]; the last program of an output tile (cnt_ptr)
    sums them in order and resets its counter (dequant.finish_tile's scheme).
    MOE 1 (one activation row a pair: the W4A4 MoE at one token, moe.TritonMoE.apply_w4a4_rega): program row
    pid_m is pair p of M pairs, expert ids_ptr[p] (ids outside [0, E) read expert 0; the caller drops those
    pairs), whose weights, scales, global scale and bias sit stride_we / stride_se / 1 / stride_be further on;
    its activation row is p // TOPK (A_BY_PAIR: p), the tile's other 15 rows zeros, and y's row p its output.
    MOE 2 (blocks of one expert's pairs: the W4A16 / W4A4 MoE at many tokens, moe_rega.apply_swap_rega): program
    row pid_m is aligned block b (TritonMoE._align: sid_ptr the pair ids sorted by expert in BM-row blocks, padded
    with M = the pair count; ids_ptr each block's expert, -1 where unused: the program returns at once), its BM
    columns the block's pairs: activation row p // TOPK (A_BY_PAIR: p), y's row p; each weight is decoded once for
    the block. BM (16-128, a power of two): activation rows a program, wgmma's N. KMASK 1: K a multiple of 32
    but not of 128 (gpt-oss's 2880): the last K tile's words, scales and activations past K read as zeros. XP 1: the
    activation rows come permuted into the copy's order and zero-padded to whole K tiles (moe_rega.permute_rows;
    stride_xm their padded stride): 16-byte copies instead of 4-byte ones (a quarter as many copies, and as many
    address registers).
    XDB 1 (PF 1 / 2): two chunk buffers, the next chunk's activations copied while this chunk's tiles are
    multiplied (without it each chunk of XT tiles starts with a copy from L2 that every warp waits for).

    Step q = j + 4p of a K tile (j, p < 4, 2) multiplies, for lane pair c and fragment half h, the codes
    2j, 2j + 1 of word 4c + 2h + p: k = 32c + 16h + 8p + 2j (+ 1) at MMA k index 8h + 2c (+ 1); the
    activations are copied into shared memory (4-byte cp.async per k pair) in that order, half tile p
    [16, 64] at column 16j + 8h + 2c."""
    BN: gl.constexpr = 16 * num_warps
    pid_n = gl.program_id(0)
    pid_m = gl.program_id(1)
    u_l: gl.constexpr = words_layout(num_warps, BN, 4)
    f_l: gl.constexpr = words_layout(num_warps, BN, 2)
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                    instr_shape=[16, BM, 16])
    a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_l, k_width=2)
    x_l: gl.constexpr = x_vec_layout(num_warps) if XP else x_pairs_layout(num_warps)
    out_l: gl.constexpr = out_layout(num_warps, VEC)
    x_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    NB: gl.constexpr = 2 if XDB else 1        # chunk buffers
    xs_all = gl.allocate_shared_memory(gl.bfloat16, [NB * XT * 2, BM, 64], x_sl)
    xs_bufs = xs_all._reinterpret(gl.bfloat16, [NB, XT * 2 * BM, 64], x_sl)      # the same bytes (whole swizzle atoms)
    xs_flat = xs_bufs.index(0)

    rows3 = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, gl.SliceLayout(2, u_l)))[:, None, None]
    c3 = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, u_l)))[None, :, None]
    e3 = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, u_l)))[None, None, :]
    n_ok3 = (rows3 < N) & (c3 >= 0) & (e3 >= 0)
    rows2 = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, gl.SliceLayout(2, f_l)))[:, None, None]
    c2 = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, f_l)))[None, :, None]
    h2 = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(1, f_l)))[None, None, :]
    n_ok2 = (rows2 < N) & (c2 >= 0) & (h2 >= 0)
    rows1 = rows2
    n_ok1 = rows1 < N
    offs_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, acc_l))
    n_ok = offs_n < N
    x_base = pid_m * BM             # the tile's first activation row and output row, and where each stops
    x_lim = M
    o_base = pid_m * BM
    o_lim = M
    if MOE == 2:
        e = gl.load(ids_ptr + pid_m).to(gl.int32)
        if e < 0:
            return      # a block past the last expert's (the grid is the static bound on the blocks)
        w_ptr, s_ptr, g_ptr, b_ptr = expert_operands(e.to(gl.int64), w_ptr, s_ptr, g_ptr, b_ptr, stride_we,
                                                     stride_se, stride_be)
    elif MOE:
        e = gl.load(ids_ptr + pid_m).to(gl.int32)
        w_ptr, s_ptr, g_ptr, b_ptr = expert_operands((e * ((e >= 0) & (e < E)).to(gl.int32)).to(gl.int64), w_ptr,
                                                     s_ptr, g_ptr, b_ptr, stride_we, stride_se, stride_be)
        if A_BY_PAIR:
            x_base = pid_m
        else:
            x_base = pid_m // TOPK
        x_lim = x_base + 1
        o_base = pid_m
        o_lim = pid_m + 1
    # activation copies [2 XT x 16 rows, 64] (rows 16 (2i + p) + m: half p of chunk tile i): destination
    # column 16j + 8h + 2c + e of half p <- k = 32c + 16h + 8p + 2j + e
    r = gl.arange(0, XT * 2 * BM, layout=gl.SliceLayout(1, x_l))
    col = gl.arange(0, 64, layout=gl.SliceLayout(0, x_l))
    xhalf = r // BM
    if MOE == 2:
        pair = gl.load(sid_ptr + pid_m * BM + r % BM)
        if A_BY_PAIR:
            xrow = pair
        else:
            xrow = pair // TOPK
        m_ok2 = (pair < M)[:, None] & (col >= 0)[None, :]
    else:
        xrow = x_base + r % BM
        m_ok2 = (xrow < x_lim)[:, None] & (col >= 0)[None, :]
    if XP:      # the rows already in the copy's order (moe_rega.permute_rows): half p = the tile's values 64p..
        colk = col
        rowk = 64 * (xhalf % 2) + 128 * (xhalf // 2)
    else:
        colk = 32 * ((col // 2) % 4) + 16 * ((col // 8) % 2) + 2 * (col // 16) + col % 2
        rowk = 8 * (xhalf % 2) + 128 * (xhalf // 2)
    src = colk[None, :] + (xrow * stride_xm + rowk)[:, None]
    kx = colk[None, :] + rowk[:, None]          # k of each copied value within its chunk (KMASK)
    gscale = 1.0
    if ELEM == 2:
        gscale = gl.load(g_ptr)
    k_tiles = gl.cdiv(K, 128)
    per = gl.cdiv(k_tiles, SPLIT_K)
    t0 = gl.program_id(2) * per
    t1 = gl.minimum(t0 + per, k_tiles)

    acc = gl.zeros([BN, BM], gl.float32, acc_l)
    if PF == 0:
        # the program's XT K tiles (SPLIT_K x XT = K / 128: DenseGemm.rega) all loaded before the first MMA,
        # beside the activations' copy: one memory latency, no words in flight across loop iterations
        ua, sa, fa = _load_tile(t0, t1, rows3, c3, e3, n_ok3, rows2, c2, h2, n_ok2, rows1, n_ok1, offs_n, n_ok,
                                w_ptr, s_ptr, z_ptr, gscale, stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                                ELEM, GROUP, HAS_ZERO, TABLE, K, KMASK)
        if XT >= 2:
            ub, sb, fb = _load_tile(t0 + 1, t1, rows3, c3, e3, n_ok3, rows2, c2, h2, n_ok2, rows1, n_ok1, offs_n,
                                    n_ok, w_ptr, s_ptr, z_ptr, gscale, stride_wn, stride_wk, stride_sn, stride_sk,
                                    stride_zk, ELEM, GROUP, HAS_ZERO, TABLE, K, KMASK)
        if XT >= 3:
            uc, sc, fc = _load_tile(t0 + 2, t1, rows3, c3, e3, n_ok3, rows2, c2, h2, n_ok2, rows1, n_ok1, offs_n,
                                    n_ok, w_ptr, s_ptr, z_ptr, gscale, stride_wn, stride_wk, stride_sn, stride_sk,
                                    stride_zk, ELEM, GROUP, HAS_ZERO, TABLE, K, KMASK)
        if XT >= 4:
            ud, sd, fd = _load_tile(t0 + 3, t1, rows3, c3, e3, n_ok3, rows2, c2, h2, n_ok2, rows1, n_ok1, offs_n,
                                    n_ok, w_ptr, s_ptr, z_ptr, gscale, stride_wn, stride_wk, stride_sn, stride_sk,
                                    stride_zk, ELEM, GROUP, HAS_ZERO, TABLE, K, KMASK)
        if EARLY == 2:
            _cta_barrier()      # the words' and scales' loads issued before the activations' copy
        async_copy.async_copy_global_to_shared(xs_flat, x_ptr + t0 * 128 + src,
                                               mask=_x_mask(m_ok2, t0, t1, xhalf, kx, K, KMASK, XP))
        async_copy.commit_group()
        if EARLY == 1:
            _cta_barrier()      # ... before the activations' wait (ptxas otherwise issues most of them after it)
        async_copy.wait_group(0)
        fence_async_shared()
        _cta_barrier()
        acc = _tile(acc, ua, sa, fa, xs_all, 0, f_l, a_l, BN, ELEM, TABLE, WAIT)
        if XT >= 2:
            acc = _tile(acc, ub, sb, fb, xs_all, 1, f_l, a_l, BN, ELEM, TABLE, WAIT)
        if XT >= 3:
            acc = _tile(acc, uc, sc, fc, xs_all, 2, f_l, a_l, BN, ELEM, TABLE, WAIT)
        if XT >= 4:
            acc = _tile(acc, ud, sd, fd, xs_all, 3, f_l, a_l, BN, ELEM, TABLE, WAIT)
        if WAIT:
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))        # the last tile's MMAs
    else:
        u1, s1, f1 = _load_tile(t0 + PF - 1, t1, rows3, c3, e3, n_ok3, rows2, c2, h2, n_ok2, rows1, n_ok1, offs_n,
                                n_ok, w_ptr, s_ptr, z_ptr, gscale, stride_wn, stride_wk, stride_sn, stride_sk,
                                stride_zk, ELEM, GROUP, HAS_ZERO, TABLE, K, KMASK)
        u, s, f = _load_tile(t0, t1, rows3, c3, e3, n_ok3, rows2, c2, h2, n_ok2, rows1, n_ok1, offs_n, n_ok, w_ptr,
                             s_ptr, z_ptr, gscale, stride_wn, stride_wk, stride_sn, stride_sk, stride_zk, ELEM, GROUP,
                             HAS_ZERO, TABLE, K, KMASK)
        if XDB:
            async_copy.async_copy_global_to_shared(xs_flat, x_ptr + t0 * 128 + src,
                                                   mask=_x_mask(m_ok2, t0, t1, xhalf, kx, K, KMASK, XP))
            async_copy.commit_group()
        for c0 in range(t0, t1, XT):
            _cta_barrier()      # every warpgroup's MMAs of the last chunk are done before its tiles are replaced
            b = 0
            if XDB:             # the next chunk into the other buffer (its MMAs, two chunks back, are done)
                b = ((c0 - t0) // XT) % 2
                async_copy.async_copy_global_to_shared(xs_bufs.index(1 - b), x_ptr + (c0 + XT) * 128 + src,
                                                       mask=_x_mask(m_ok2, c0 + XT, t1, xhalf, kx, K, KMASK, XP))
                async_copy.commit_group()
                async_copy.wait_group(1)        # this chunk's copy (this thread's)
            else:
                async_copy.async_copy_global_to_shared(xs_flat, x_ptr + c0 * 128 + src,
                                                       mask=_x_mask(m_ok2, c0, t1, xhalf, kx, K, KMASK, XP))
                async_copy.commit_group()
                async_copy.wait_group(0)
            fence_async_shared()
            _cta_barrier()
            for t in range(c0, gl.minimum(c0 + XT, t1)):
                un, sn, fn = _load_tile(t + PF, t1, rows3, c3, e3, n_ok3, rows2, c2, h2, n_ok2, rows1, n_ok1, offs_n,
                                        n_ok, w_ptr, s_ptr, z_ptr, gscale, stride_wn, stride_wk, stride_sn, stride_sk,
                                        stride_zk, ELEM, GROUP, HAS_ZERO, TABLE, K, KMASK)
                acc = _tile(acc, u, s, f, xs_all, b * XT + t - c0, f_l, a_l, BN, ELEM, TABLE)
                if PF == 2:
                    u, s, f = u1, s1, f1
                    u1, s1, f1 = un, sn, fn
                else:
                    u, s, f = un, sn, fn
    if XDB:
        async_copy.wait_group(0)    # the copy past the last chunk (masked off) is done before the memory is reused
    _cta_barrier()     # every warpgroup's MMAs done before the layout change reuses shared memory
    out = gl.convert_layout(acc, out_l)                                   # [n, m], n fastest: coalesced
    on = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, out_l))
    if MOE == 2:        # the block's pairs (padding: M, masked off)
        om = gl.load(sid_ptr + pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(0, out_l)))
        o_lim = M
    else:
        om = o_base + gl.arange(0, BM, layout=gl.SliceLayout(0, out_l))
    mask = (on < N)[:, None] & (om < o_lim)[None, :]
    if SPLIT_K > 1:
        part = part_ptr + om[None, :] * N + on[:, None]
        gl.store(part + gl.program_id(2) * M * N, out, mask=mask)
        _cta_barrier()                         # every thread's partial written before the arrival
        tile = pid_m * gl.num_programs(0) + pid_n
        arrived = gl.atomic_add(cnt_ptr + tile, 1)
        if arrived == SPLIT_K - 1:
            tot = gl.zeros([BN, BM], gl.float32, out_l)
            for k in range(SPLIT_K):
                tot += gl.load(part + k * M * N, mask=mask, other=0.0, cache_modifier=".cg")
            _store_out(tot, b_ptr, y_ptr, on, om, mask, N, stride_ym, HAS_BIAS)
            gl.atomic_xchg(cnt_ptr + tile, 0)
    else:
        _store_out(out, b_ptr, y_ptr, on, om, mask, N, stride_ym, HAS_BIAS)


@gluon.jit
def _x_mask(m_ok2, c0, t1, xhalf, kx, K, KMASK: gl.constexpr, XP: gl.constexpr = 0):
    """The activation copy's mask for the chunk from K tile c0: rows in range, tiles before t1 (KMASK: k < K; with
    XP the rows are zero past K up to the tile's end, moe_rega.permute_rows)."""
    mask = m_ok2 & ((c0 + xhalf // 2) < t1)[:, None]
    if KMASK and not XP:
        mask = mask & (c0 * 128 + kx < K)
    return mask


@gluon.jit
def _store_out(acc, b_ptr, y_ptr, on, om, mask, N, stride_ym, HAS_BIAS: gl.constexpr):
    """acc [BN, 16] (+ bias) -> y[om, on] in bf16."""
    if HAS_BIAS:
        acc += gl.load(b_ptr + on, mask=on < N, other=0.0).to(gl.float32)[:, None]
    gl.store(y_ptr + om[None, :] * stride_ym + on[:, None], acc.to(gl.bfloat16), mask=mask)
