"""Thousands-of-tokens MXFP4 / NVFP4 / INT4 fused MoE on w4_ws's warp-specialized kernel (config WS): each block of
an expert's pairs multiplies weights decoded by their own warps while the MMA warps multiply the previous K tile.

Why: from about 2048 tokens every expert has hundreds of pairs, and the MoE is compute-bound. DEQUANT_MM (each
weight decoded once into a BF16 workspace, then the BF16 mode's grouped GEMM) pays the decode's HBM traffic in
series with the GEMMs: 557 us of gpt-oss-20b's 2377 at 4096 tokens (R40-R41), 1.2-1.8x this MoE's BF16 mode.
w4_ws decodes each K tile of weights in DW decode warps into a shared-memory ring that one MMA warpgroup reads
(the dense 256-row entries: 0.84-0.92x BF16 cuBLAS), so the decode runs beside the MMA instead of before it;
each weight is decoded once per block of BM pairs. WS_TAIL: blocks of BM + WS_TAIL pairs, the tail rows a second
wgmma on the same decoded tile where they hold a pair (Qwen3's 256 +- 16 pairs an expert at 4096 tokens: one block
an expert instead of two, R106a: 12-15% off those launches).

Launches: the alignment (TritonMoE._align, blocks of BM pairs of one expert), gather_rows_kernel (FC1's input rows
in block order, zeros for padding with ZERO_PADDING, and each row's expert id), FC1 (w4_ws_kernel's MoE mode: the
output in block order), the activation (moe_w4a4.w4a4_act_kernel over the block rows, IDS_FIRST: padding rows give
zeros and are not read), FC2 (its input already in block order; the output scattered to the pairs' rows), the
router-weighted top-k sum (TritonMoE._topk_sum). The activations reach the MMA warps by TMA (XTMA): the
block-ordered rows are one dense matrix (FC1's MMA warps gathering the rows themselves by cp.async, no gather
launch, was slower on every 4096-token cell: FC1 re-reads its block's rows from L2 for each output tile, which the
TMA's bulk copies serve better than 16-byte requests; R108, bench/results/h200-2026-12-05/r108/gather.patch). WT:
the words too reach the decode warps by TMA, into
their own ring of WT slots filled WT K tiles ahead. Calls the kernel cannot serve (no sm_90 GPU, fp16, K not a
multiple of the K tile, MXFP4 scales above the fused decoder's 2.0: checked at load; INT4 groups the K tile does
not divide or fp32 scales) run the entry's other keys, a DEQUANT_MM config (ws_fallback).

MXFP4 and NVFP4 experts are read as [E, N, K/8] words (the K-major form of w4_ws's word loads), INT4 ones (zero
points or not) in GPTQ's [E, K/8, N] layout, each expert's part exactly the dense kernel's. NVFP4 experts are
decoded exactly: w4_ws's fused decoder multiplies each E2M1 value by bf16(s x g) x 2**126, which rounds s x g to
bf16 before the product (3.6e-3 from the reference on the dense entries; W4A4's activation rounding amplified that
to 2.2e-2 at one token in R94); here its g is 2**-8 (value x s x 2**-8 has at most 6 significant bits: exact in
bf16, and s x 2**-8 <= 448 / 256 stays under the decoder's 2.0), and the epilogue multiplies each expert's
accumulator by 256 x g (w4_ws's HAS_BIAS 2), so such a layer has no bias on this path. W4A4 (NVFP4 activations):
FC1's input rounded before the gather and FC2's after the activation (TritonMoE._round, as DEQUANT_MM); with a
dynamic FC2 scale the activation runs in its own launch, whose zeros on the padding rows keep them out of the
amax (FC1's epilogue leaves those rows as it found them), unless WS_QACT has FC1's epilogue take the amax of the
rows holding a pair itself (w4_ws's QACT 2): then the activation and amax launches give way to a one-program
scale launch (launch.scale_from_amax) before the rounding; with a static scale (a ModelOpt checkpoint's
input_scale) and WS_QACT 2, FC1's epilogue rounds FC2's input itself (w4_ws's QACT 1) and no rounding launch runs
(slower: R108b).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from oracle.formats import E2M1_MAX, E4M3_MAX

from .formats import ACT_NONE, ACT_NVFP4, E2M1_MX, E2M1_NV, INT4, WS_BK, WS_MOE_KEYS
from .launch import interpreting, pt_programs, quantize_activations, scale_from_amax
from .moe_rega import rega_layer_ok

#: The keys of a WS MoE entry that belong to w4_ws (the rest is its DEQUANT_MM fallback); WS_WARPS: the MMA warps
#: (w4_ws's num_warps; the fallback keeps its own); WS_ACT: the activation in FC1's epilogue where it can be
#: (fused_act); WS_HALF: a block whose pairs fit in its first half multiplied on that half only (w4_ws's HALF; 2:
#: its first quarter too); WS_TAIL: blocks of BM + WS_TAIL pairs, the tail rows multiplied where they hold a pair
#: (w4_ws's TAIL); WS_QACT: W4A4 with WS_ACT, FC2's NVFP4 input amax taken in FC1's epilogue where its scale is
#: dynamic (w4_ws's QACT 2: no activation or amax launch; R108b, H100: 3697.9 -> 3532.9 us at Qwen3-235B's 4096
#: tokens); WS_QACT 2 also rounds it there where the scale is static (QACT 1; no rounding launch, but R108b: 3406.7
#: -> 4824.5 us, the epilogue's divisions holding the MMA warps)
WS_KEYS = ("WS", "WS_WARPS", "WS_ACT", "WS_HALF", "WS_TAIL", "WS_QACT", *WS_MOE_KEYS)
#: gather_rows_kernel: rows a program, the columns of one step and the warps. It writes 268 MB at 1.7 TB/s on
#: Qwen3-235B's 4096 tokens (155 us, R109a / R110a, H100); whole rows a step (GATHER_COLS 4096, every load of a
#: row in flight at once) were no faster in R110a: 155.4 -> 165.2 us there, 80.1 -> 78.9 on Qwen3-30B INT4
GATHER_ROWS, GATHER_COLS, GATHER_WARPS = 4, 512, 4
#: gather_rows_kernel's STREAM: its rows stored evict-first, so the token rows stay in L2 for their other top-k
#: reads (Qwen3-235B at 4096 tokens: 268 MB written against 33.5 MB of token rows, which an H100's 50 MB L2 holds;
#: the launch's 155 us is 1.55x the 302 MB it moves with every token row read once, 0.87x the 536 MB with every
#: read from HBM). Off: written after the thirty-fourth pass's last device call, not yet run on a GPU (R111's
#: 'stream4096' times it)
GATHER_STREAM = False
#: gather_rows_kernel writes zeros to the padding rows (True), or leaves them as the buffer held them (False:
#: gather_rows_kernel's docstring says why nothing reads them; about a fifth of its 118 MB of writes at
#: gpt-oss-20b's 4096 tokens). False since R98a (H100, the twenty-seventh pass): the gather 90-92 -> 66 us at
#: Qwen3-30B INT4's 4096 tokens, 62 -> 52 at gpt-oss-20b's; the WS tests passed with it on the GPU (R98t)
ZERO_PADDING = False
#: WS_ACT takes silu layers too (ACT_SILU: gate / up halves, fused_act). On since R98a (H100, the twenty-seventh
#: pass): Qwen3-30B INT4 at 4096 tokens 1193.6 -> 1132.3 us (the activation launch, 68.5 us, gone); GPU-tested in R98t
SILU_IN_FC1 = True
#: W4A4: FC2's input rounded on the block rows that hold a pair only (launch.quantize_activations' rid: about half
#: of Qwen3-235B's 65 K block rows at 4096 tokens are padding, and the rounding took 208 us of them in R104c);
#: padding rows keep whatever the activation left, which no output reads. Off: GPU-tested (R105), but no faster
#: (R105a 4211.4 against 4202.7 us; R107a, static scales, 3327.1 against 3375.5 with the rounding launch itself
#: 268.5 against 162.0: the row ids' loads and masks cost more than the skipped rows)
ROUND_LIVE_ROWS = False
#: W4A4: FC2's input rounded on the 16-row tiles that hold a pair only, with or without WS_QACT (act_qdq_kernel's
#: RID_TILES: one 64-byte load of row ids a program, no per-row masks; about a fifth of Qwen3-235B's 4096-token
#: block rows are padding with WS_TAIL). On since R109 (thirty-third pass, H100, medians of 7 interleaved rounds):
#: the rounding 383.2 -> 98.9 us, Qwen3-235B at 4096 tokens 3635.1 -> 3507.9 us alone, 3415.9 with
#: launch.FAST_NVFP4_DIV (static scales 3530.6 -> 3412.8); the same output bits (GPU test, R109)
ROUND_LIVE_TILES = True
#: WS_QACT's amax (dynamic scales): each warp's max merged by its own atomic (w4_ws's QACT 3) instead of the tile's,
#: which takes two CTA-wide reductions through shared memory a tile (QACT 2: FC1 1724.0 -> 1878.6 us in R108b at
#: Qwen3-235B's 4096 tokens, H100). Off: written after the pass's last device call, not yet run on a GPU
AMAX_BY_WARP = False


@triton.jit
def gather_rows_kernel(a_ptr, sid_ptr, bexp_ptr, ids_ptr, out_ptr, rid_ptr, T, K, stride_a, stride_o,
                       BM: tl.constexpr, TOPK: tl.constexpr, BY_PAIR: tl.constexpr, ROWS: tl.constexpr,
                       COLS: tl.constexpr, ZERO_PAD: tl.constexpr = True, STREAM: tl.constexpr = False):
    """Rows j of the blocks (ROWS a program): out[j] = a's row of pair sid[j] (the token's, pair // TOPK, or the
    pair's own with BY_PAIR); zeros for padding (sid >= T) with ZERO_PAD, else nothing; nothing for blocks with no
    expert (their sorted ids are never written and no GEMM program reads their rows); rid[j] = the pair's expert
    id, -1 on the rows of both (the activation then writes zeros there). Without ZERO_PAD, padding rows keep
    whatever the buffer held: a GEMM's output row depends on its own input row only, the activation launch reads
    no row whose id is -1, and FC2 writes no padding row, so their values reach nothing (the zeros were a fifth of
    the launch's 118 MB at gpt-oss-20b's 4096 tokens: 256-pair blocks leave about 128 rows of padding an
    expert). STREAM: the rows stored as streaming data (st.global.cs: evict-first in L1 and L2), so the 8-32x
    larger output does not push the token rows, each read top-k times, out of L2."""
    j = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    p = tl.load(sid_ptr + j)
    e = tl.load(bexp_ptr + j // BM)
    ok = (e >= 0) & (p >= 0) & (p < T)
    if BY_PAIR:
        src = p
    else:
        src = p // TOPK
    src = tl.where(ok, src, 0).to(tl.int64)
    rid = tl.load(ids_ptr + tl.where(ok, p, 0), mask=ok, other=-1).to(tl.int32)
    tl.store(rid_ptr + j, tl.where(ok, rid, -1))
    dst = j.to(tl.int64)
    for c in range(0, K, COLS):
        cols = c + tl.arange(0, COLS)
        v = tl.load(a_ptr + src[:, None] * stride_a + cols[None, :], mask=ok[:, None] & (cols < K)[None, :],
                    other=0.0)
        written = (e >= 0) if ZERO_PAD else ok
        tl.store(out_ptr + dst[:, None] * stride_o + cols[None, :], v, mask=written[:, None] & (cols < K)[None, :],
                 cache_modifier=".cs" if STREAM else "")


def ws_ok(moe, x: torch.Tensor, bk: int = WS_BK) -> bool:
    """Can WS serve this call: bf16 activations and layer on an sm_90 GPU (w4_ws is Gluon: wgmma, warp
    specialization), experts with both K dims multiples of the K tile bk: MXFP4 (W4A16) in the [E, N, K/2] byte
    layout with scales the fused decoder covers (moe.fused_ok, checked at load), NVFP4 (W4A16 or W4A4) in that
    layout without biases (the epilogue's operand is the expert's global scale: module docstring), or INT4 (W4A16)
    in GPTQ's layout with groups bk divides (int4_layer_ok)."""
    ok = getattr(moe, "_ws_ok", None)
    if ok is None:
        elem = moe.w13.layout.elem
        ok = moe._ws_ok = (
            (moe.act == ACT_NONE and elem == E2M1_MX and bool(getattr(moe, "fused_ok", False))
             and rega_layer_ok(moe, WS_BK))
            or (moe.act in (ACT_NONE, ACT_NVFP4) and elem == E2M1_NV and moe.b13 is None and moe.b2 is None
                and rega_layer_ok(moe, WS_BK))
            or (moe.act == ACT_NONE and elem == INT4 and int4_layer_ok(moe)))
    return (ok and x.dtype == torch.bfloat16 and moe.hidden % bk == 0 and moe.inter % bk == 0
            and (moe.w13.layout.elem != INT4 or moe.w13.layout.group % bk == 0))


def int4_layer_ok(moe) -> bool:
    """The INT4 layer's part of ws_ok: a bf16 layer on an sm_90 GPU, both weights GPTQ's contiguous [E, K/8, N]
    words with contiguous fp16 / bf16 group scales (the decoder's exact two-term product; fp32 ones take the
    fallback) and zero points if any, groups a multiple of the K tile."""
    w = moe.w13.weight
    return (moe.dtype == torch.bfloat16 and w.device.type == "cuda" and not interpreting()
            and torch.cuda.get_device_capability(w.device) == (9, 0)
            and all(p.weight.is_contiguous() and p.scale.is_contiguous() and p.layout.group % WS_BK == 0
                    and p.scale.dtype in (torch.float16, torch.bfloat16)
                    and (p.zero is None or p.zero.is_contiguous()) for p in (moe.w13, moe.w2)))


def ws_fallback(cfg: dict[str, int]) -> dict[str, int]:
    """The entry's DEQUANT_MM config, which serves the calls w4_ws cannot."""
    return {key: value for key, value in cfg.items() if key not in WS_KEYS}


def apply_ws(moe, x: torch.Tensor, topw: torch.Tensor, ids: torch.Tensor, m: int, k: int,
             cfg: dict[str, int]) -> torch.Tensor:
    """The WS call (module docstring). cfg: BM (pairs a block: w4_ws's activation rows a program, 64-256),
    WS_WARPS (the MMA warps: 16 x WS_WARPS weight rows a program), BK, STAGES, DW, DREGS, MAXNREG, XTMA, DP, WPF,
    MW, PFENCE, XCP, PP, WT, PT as w4_ws_kernel takes them, for both GEMMs; WS_ACT 1: FC1 writes FC2's input itself
    where the activation allows (fused_act), no activation launch; WS_HALF 1: each GEMM multiplies an expert's
    last block on its first half alone where its pairs fit there (w4_ws's HALF; WS_HALF 2: on its first quarter
    where they fit there). WS_TAIL (with WS_HALF): blocks of BM + WS_TAIL pairs, so an expert with up to that many
    pairs is one block and its weights are decoded once (w4_ws's TAIL). W4A4: both GEMMs' inputs rounded through
    NVFP4 first (module docstring); WS_QACT 1, where FC1 applies the activation and FC2's input scale is dynamic,
    FC1's epilogue takes its amax (w4_ws's QACT 2); WS_QACT 2 also rounds it there where the scale is static
    (QACT 1)."""
    t, dev = m * k, moe.device
    bm = cfg["BM"] + cfg.get("WS_TAIL", 0)      # the alignment's rows a block
    by_pair = bool(moe.layer.apply_router_weight_on_input)
    sorted_ids, block_expert, blocks = moe._align(ids, t, bm)
    a1 = moe._round(0, moe._input(x, topw, k))[0]           # W4A4: NVFP4 values; else the rows themselves
    rows = blocks * bm
    xs = torch.empty(rows, moe.hidden, dtype=moe.dtype, device=dev)
    rid = torch.empty(rows, dtype=torch.int32, device=dev)
    gather_rows_kernel[(rows // GATHER_ROWS,)](a1, sorted_ids, block_expert, ids, xs, rid, t, moe.hidden,
                                               a1.stride(0), xs.stride(0), BM=bm, TOPK=k, BY_PAIR=by_pair,
                                               ROWS=GATHER_ROWS, COLS=GATHER_COLS, ZERO_PAD=ZERO_PADDING,
                                               STREAM=GATHER_STREAM, num_warps=GATHER_WARPS)
    act = fused_act(moe, cfg)
    # WS_QACT (W4A4, FC1 applying the activation): a dynamic FC2 input scale has the epilogue merge its amax into a
    # zeroed state (QACT 2); WS_QACT 2 also rounds FC2's input there where the scale is static (QACT 1)
    qact = 0 if act is None or not cfg.get("WS_QACT") or moe.act != ACT_NVFP4 else \
        2 if moe.static[1] is None else 1 if cfg["WS_QACT"] == 2 else 0
    qs = moe.static[1] if qact == 1 else moe._counters(2, "_ws_amax_state") if qact == 2 else None
    if act is not None:         # FC1's epilogue applies the activation: its output is FC2's input
        inter = torch.empty(rows, moe.inter, dtype=moe.dtype, device=dev)
        _ws_gemm(xs, moe.w13, _epilogue(moe, 0), inter, block_expert, None, t, cfg, act, sorted_ids, qs, qact)
    else:
        y1 = torch.empty(rows, moe.rows, dtype=moe.dtype, device=dev)
        _ws_gemm(xs, moe.w13, _epilogue(moe, 0), y1, block_expert, None, t, cfg, half_ids=sorted_ids)
        inter = moe._activation(y1, rid, ids_first=True)
    # W4A4: FC2's input rounded on the block rows holding a pair only (ROUND_LIVE_TILES: their 16-row tiles)
    live = rid if moe.act == ACT_NVFP4 and (ROUND_LIVE_TILES or ROUND_LIVE_ROWS) else None
    if qact == 2:               # the scale from the epilogue's amax (which leaves the padding rows out)
        inter = quantize_activations(inter, moe.act, scale_from_amax(qs, E2M1_MAX * E4M3_MAX), moe.facts, live,
                                     rid_tiles=ROUND_LIVE_TILES)
    elif qact == 0 and live is not None:
        inter = quantize_activations(inter, moe.act, moe._act_scale(1, inter), moe.facts, live,
                                     rid_tiles=ROUND_LIVE_TILES)
    elif qact == 0:             # (QACT 1: FC1's epilogue rounded it)
        inter = moe._round(1, inter)[0]
    y2 = torch.empty(t, moe.hidden, dtype=moe.dtype, device=dev)
    _ws_gemm(inter, moe.w2, _epilogue(moe, 1), y2, block_expert, sorted_ids, t, cfg, half_ids=sorted_ids)
    out = torch.empty(m, moe.hidden, dtype=moe.dtype, device=dev)
    moe._topk_sum(y2, ids, out, m, k, weigh=None if by_pair else topw)
    return out


#: NVFP4 on WS: the decode's global factor (w4_ws's g), a power of two that keeps E2M1 value x E4M3 scale x it
#: exact in bf16 and the fused decoder's factor 448 x it under 2.0; the epilogue multiplies by g / it
NV_DECODE_G = 2.0 ** -8


def _epilogue(moe, idx: int) -> tuple[torch.Tensor | None, int, torch.Tensor | None]:
    """FC1's (idx 0) or FC2's (idx 1) epilogue for w4_ws: (b_ptr, HAS_BIAS, g_ptr): the bias (HAS_BIAS 1) or none
    (0), the weights' own global scales (None: the scales' tensor stands in); NVFP4 experts: each expert's output
    factor g / NV_DECODE_G (HAS_BIAS 2) and NV_DECODE_G for every expert as the decode's g (module docstring), made
    once a weight (kept on the weight itself, as w4_ws.w_tma_desc's descriptors: reloaded weights get their own)."""
    w, bias = (moe.w13, moe.b13) if idx == 0 else (moe.w2, moe.b2)
    if w.layout.elem != E2M1_NV:
        return bias, int(bias is not None), None
    made = w.__dict__.get("_ws_factors")
    if made is None:
        g = w.global_scale.float().reshape(-1)
        made = w.__dict__["_ws_factors"] = ((g / NV_DECODE_G).contiguous(), torch.full_like(g, NV_DECODE_G))
    return made[0], 2, made[1]


def fused_act(moe, cfg: dict[str, int]) -> tuple[int, float, float, float] | None:
    """WS_ACT: the (kind, limit, alpha, beta) of the activation FC1's epilogue applies (w4_ws's ACT), or None where
    the activation launch runs instead. On one MMA warpgroup's tiles (not PP) fed by TMA (XTMA, whose decode loop
    pairs the rows): swigluoai with its limit (gpt-oss's; its gate and up rows interleaved, so a tile holds whole
    pairs: ACT_SWIGLUOAI), or silu without one (Qwen3's: gate and up are FC1's two halves, so each program decodes
    the gate and up rows of its BN / 2 outputs, ACT_SILU; with SILU_IN_FC1 only, not with WT, whose boxes are
    whole row ranges, and only where BN / 2 divides the intermediate size). Not for W4A4 with a dynamic FC2 scale:
    its amax needs the activation launch's zeros on the padding rows (module docstring), unless WS_QACT has FC1's
    epilogue take that amax over the rows holding a pair (w4_ws's QACT 2)."""
    if not cfg.get("WS_ACT") or cfg.get("PP") or not cfg.get("XTMA"):
        return None
    if moe.act == ACT_NVFP4 and moe.static[1] is None and not cfg.get("WS_QACT"):
        return None
    from .w4_ws import ACT_SILU, ACT_SWIGLUOAI

    activation = moe.layer.activation
    if activation == "swigluoai" and moe.limit is not None:
        return ACT_SWIGLUOAI.value, float(moe.limit), float(moe.alpha), float(moe.beta)
    half_tile = 8 * cfg["WS_WARPS"] // cfg.get("WGN", 1)
    if SILU_IN_FC1 and activation == "silu" and moe.limit is None and not cfg.get("WT") and \
            moe.inter % half_tile == 0:
        return ACT_SILU.value, 0.0, 0.0, 0.0
    return None


def _ws_gemm(a: torch.Tensor, w, epi: tuple[torch.Tensor | None, int, torch.Tensor | None], y: torch.Tensor,
             block_expert: torch.Tensor, sorted_ids: torch.Tensor | None, t: int, cfg: dict[str, int],
             act: tuple[int, float, float, float] | None = None, half_ids: torch.Tensor | None = None,
             qs: torch.Tensor | None = None, qact: int = 0) -> None:
    """y = a's block rows times their block's expert's weights w, then the epilogue epi (_epilogue: + bias, or x
    the expert's factor with NVFP4's decode g): one w4_ws_kernel launch in its MoE mode,
    grid (N / (16 x WS_WARPS), blocks); with sorted_ids the output rows go to the pairs' rows (FC2); act (FC1): y
    is FC2's input, the activation of those rows (w4_ws's ACT); WS_HALF (half_ids: the sorted ids): blocks whose
    pairs fit in their first half multiplied on it alone (w4_ws's HALF); WGN 2: WS_WARPS = 8 as two warpgroups on
    the block's two halves of BM (up to 512) rows, 16 x 4 weight rows a program (w4_ws's WGN); PT 1: a persistent
    program an SM over those output tiles (w4_ws's PT; launch.pt_programs); WS_TAIL: the blocks are BM + WS_TAIL rows
    apart, their tail rows multiplied where they hold a pair (w4_ws's TAIL: check_ws_moe has it with WS_HALF); qs
    (with act): FC2's static NVFP4 input scale, by which the epilogue rounds what it writes (qact 1), or the int32
    state the epilogue merges the amax of what it writes to the pairs' rows into (qact 2) (w4_ws's QACT)."""
    from . import fastlaunch
    from .w4_ws import tma_ok, w4_ws_kernel, w_tma_desc, x_tma_desc

    lay = w.layout
    b, has_b, g = epi
    bm, warps, xt, pp = cfg["BM"], cfg["WS_WARPS"], cfg.get("XTMA", 0), cfg.get("PP", 0)
    wgn = cfg.get("WGN", 1)         # 2: two MMA warpgroups on the block's two halves of rows, one weight tile
    bk8, bn = cfg.get("BK", WS_BK) // 8, 16 * warps // wgn
    half = int(cfg.get("WS_HALF", 0)) if xt and not pp and half_ids is not None else 0
    tail = int(cfg.get("WS_TAIL", 0))      # apply_ws aligned on BM + tail; check_ws_tail has it only with HALF
    if lay.elem == INT4:        # GPTQ's [E, K/8, N] words, [E, K/group, N] scales, [E, K/group, N/8] zero points
        words, z = w.weight, w.zero
        n, kdim = words.shape[2], words.shape[1] * 8
        strides = dict(stride_wk=words.stride(1), stride_wn=1, stride_sk=w.scale.stride(1), stride_sn=1,
                       stride_zk=z.stride(1) if z is not None else 0, stride_ze=z.stride(0) if z is not None else 0,
                       KMAJOR=0, HAS_ZERO=z is not None)
        box = [bk8, bn]
    else:                       # MXFP4 / NVFP4 [E, N, K/2] bytes: word j = codes k 8j..8j+7
        words, z = w.weight.view(torch.int32), None
        n, kdim = words.shape[1], words.shape[2] * 8
        strides = dict(stride_wk=1, stride_wn=words.stride(1), stride_sk=1, stride_sn=w.scale.stride(1), stride_zk=0,
                       HAS_ZERO=False)
        box = [bn, bk8]
    rows = words.view(-1, words.shape[2]) if words.is_contiguous() else None    # WT's TMA view: [E N, K/8], [E K/8, N]
    wt = cfg.get("WT", 0) if rows is not None and tma_ok(rows) else 0       # WT 0: the words through registers
    if xt:      # the descriptor holds this call's activations: a replayed plan would read another call's
        fastlaunch.spoil("a TMA descriptor of the call's activations")
    grid = (-(-n // (16 * 8 if pp else bn)), block_expert.shape[0], 1)
    pt = pt_programs(grid[0] * grid[1], kdim // cfg.get("BK", WS_BK), cfg["STAGES"], a.device) \
        if cfg.get("PT") else 0
    if pt:      # PT: a persistent program an SM over the blocks' output tiles
        grid = (pt, 1, 1)
    fastlaunch.launch(w4_ws_kernel, grid,
                      cfg["DW"] if pp else warps, None, maxnreg=cfg["MAXNREG"],
                      x_ptr=a, w_ptr=words, s_ptr=w.scale, z_ptr=z if z is not None else w.scale,
                      g_ptr=g if g is not None else w.scale, b_ptr=b if b is not None else w.scale, y_ptr=y,
                      M=a.shape[0], N=n, K=kdim, stride_xm=a.stride(0), stride_ym=y.stride(0), ELEM=lay.elem,
                      GROUP=lay.group, HAS_BIAS=has_b, BM=bm,
                      BK=cfg.get("BK", WS_BK), STAGES=cfg["STAGES"], DW=cfg["DW"], DREGS=cfg["DREGS"],
                      PFENCE=cfg.get("PFENCE", 0), XCP=cfg.get("XCP", 0), WPF=cfg.get("WPF", 2), MW=cfg.get("MW", 1),
                      XTMA=xt, PP=pp, DP=cfg.get("DP", 1), x_desc=x_tma_desc(a, bm) if xt else None, MOE=1,
                      ids_ptr=block_expert, sid_ptr=sorted_ids, T=t, stride_we=words.stride(0),
                      stride_se=w.scale.stride(0), stride_be=b.stride(0) if b is not None else 0, WT=wt,
                      w_desc=w_tma_desc(w, rows, box) if wt else None, ACT=act,
                      half_ptr=half_ids if half or qact >= 2 else None, HALF=half, WGN=wgn,
                      PT=cfg["PT"] if pt else 0, TAIL=tail,
                      t_desc=x_tma_desc(a, tail) if tail else None, qs_ptr=qs,
                      QACT=3 if qact == 2 and AMAX_BY_WARP else qact, **strides)
