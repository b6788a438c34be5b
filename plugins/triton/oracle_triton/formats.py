"""How each weight format is laid out, as the numbers the Triton kernels take (no triton here).

A weight element (n, k) of a [N, K] matrix is read as: storage unit
`n * stride_wn + (k // PACK) * stride_wk`, nibble `k % PACK` (PACK = 1 for FP8); its scale
at `(n // SCALE_ROWS) * stride_sn + (k // GROUP) * stride_sk`. The layouts are those of
oracle.kernel's checkpoint table (fp4: low nibble = even k; GPTQ int4: [K/8, N], low
nibble first; zero points [K/g, N/8]).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from oracle.formats import FP8_BLOCK, MX_BLOCK, NV_BLOCK

#: Format codes the kernels branch on (constexpr). BF16: unquantized experts (the fused MoE's
#: BF16 mode, the baseline the MoE benchmark reports; weight bytes as stored, no scales).
FP8, E2M1_MX, E2M1_NV, INT4, BF16 = 0, 1, 2, 3, 4
#: Scale encodings.
SCALE_F32, SCALE_E8M0, SCALE_E4M3, SCALE_F16 = 0, 1, 2, 3
#: Activation quantization inside the GEMM prologue.
ACT_NONE, ACT_GROUP, ACT_TOKEN, ACT_TENSOR, ACT_NVFP4 = 0, 1, 2, 3, 4
ACT_CODES = {"group": ACT_GROUP, "token": ACT_TOKEN, "tensor": ACT_TENSOR}


@dataclass(frozen=True)
class Layout:
    """Index arithmetic of one weight matrix [N, K] (per expert for MoE)."""

    elem: int          # FP8 | E2M1_MX | E2M1_NV | INT4 | BF16
    pack: int          # elements per storage unit along K
    scale_kind: int
    group: int         # K elements per scale
    scale_rows: int    # N rows per scale (128 for fp8_block, else 1)
    stride_wn: int
    stride_wk: int
    stride_sn: int
    stride_sk: int
    stride_zk: int = 0     # int4 zero points: words per group row (N/8); 0 = symmetric (zero 8)

    def weight_bytes(self, n: int, k: int) -> int:
        """Bytes of the packed weight and its scales (what one pass over the matrix reads)."""
        w = n * k * 2 if self.elem == BF16 else (n * k if self.elem == FP8 else n * k // 2)
        groups = -(-k // self.group) if self.stride_sk else 1
        rows = -(-n // self.scale_rows) if self.stride_sn else 1
        s = groups * rows * {SCALE_F32: 4, SCALE_E8M0: 1, SCALE_E4M3: 1, SCALE_F16: 2}[self.scale_kind]
        z = groups * n // 2 if self.stride_zk else 0
        return w + s + z


def layout_for(fmt: str, n: int, k: int, group: int | None = None) -> Layout:
    """The layout of a [N, K] weight in `fmt` (group: int4 group size along K)."""
    if fmt == "fp8_tensor":
        return Layout(FP8, 1, SCALE_F32, 1, 1, k, 1, 0, 0)
    if fmt == "fp8_channel":
        return Layout(FP8, 1, SCALE_F32, 1, 1, k, 1, 1, 0)
    if fmt == "fp8_block":
        return Layout(FP8, 1, SCALE_F32, FP8_BLOCK, FP8_BLOCK, k, 1, -(-k // FP8_BLOCK), 1)
    if fmt == "bf16":
        return Layout(BF16, 1, SCALE_F32, 1, 1, k, 1, 0, 0)
    if fmt == "mxfp4":
        return Layout(E2M1_MX, 2, SCALE_E8M0, MX_BLOCK, 1, k // 2, 1, k // MX_BLOCK, 1)
    if fmt == "nvfp4":
        return Layout(E2M1_NV, 2, SCALE_E4M3, NV_BLOCK, 1, k // 2, 1, k // NV_BLOCK, 1)
    if fmt == "int4":
        if group is None:
            raise ValueError("int4 needs its group size")
        return Layout(INT4, 8, SCALE_F16, group, 1, 1, n, 1, n, n // 8)
    raise ValueError(f"oracle-triton has no kernel for {fmt!r} weights")


def words_layout(fmt: str, n: int, k: int) -> Layout:
    """An MXFP4 / NVFP4 weight repacked at load into GPTQ's layout (weights.repack_words): int32
    words of 8 codes along K (low nibble first), [K/8, N], N contiguous; its group scales [K/group, N].
    The one-row GEMV then spreads N over the threads as INT4's does, and the activations it multiplies
    are the same for every thread (no reshuffle through shared memory per K tile)."""
    base = layout_for(fmt, n, k)
    return Layout(base.elem, 8, base.scale_kind, base.group, 1, 1, n, 1, n)


def is_words(layout: Layout) -> bool:
    """Is this an E2M1 weight in GPTQ's [K/8, N] word layout (words_layout; the kernels' KN)."""
    return layout.elem in (E2M1_MX, E2M1_NV) and layout.pack == 8


#: The fused E2M1 decoder (DECODE 5) multiplies each value by 2**126 x scale in bf16 in one step; that
#: factor is finite and exact (the two-step decoder's bits) for scales up to this bound.
FUSED_SCALE_MAX = 2.0


def fused_scales_ok(layout: Layout, scale, global_scale) -> bool:
    """Can the fused E2M1 decoder (DECODE 5) serve this weight: E2M1 words (one scale per word) whose
    decoded scales are all at most FUSED_SCALE_MAX (MXFP4: E8M0 bytes <= 128; NVFP4: E4M3 x global
    scale). Checked once where the layer is built (a reduction over the scales); kernels given DECODE 5
    for a weight that fails it take the two-step decoder (launch.DenseGemm.swap)."""
    import torch

    if not is_words(layout) or scale.numel() == 0:
        return False
    if layout.elem == E2M1_MX:
        return int(scale.max()) <= 128
    s = scale.view(torch.float8_e4m3fn).float().abs().max() * global_scale.float().reshape(-1)[0].abs()
    return bool(s <= FUSED_SCALE_MAX)


#: The swap-AB launch keys a REGA entry may carry (with SWAP_WARPS, the swap kernel's warps; SPLIT_K and KN are
#: shared): the swap entry it replaced, which serves the calls w4_rega cannot (fp16 activations or output).
REGA_SWAP_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "DECODE", "num_stages")


def rega_swap(cfg: dict[str, int]) -> dict[str, int] | None:
    """The swap-AB config a REGA config carries (SWAP_WARPS and REGA_SWAP_KEYS), or None where it carries none."""
    if "SWAP_WARPS" not in cfg:
        return None
    missing = [key for key in REGA_SWAP_KEYS if key not in cfg]
    if missing:
        raise ValueError(f"a REGA config with SWAP_WARPS carries its swap fallback whole: {missing} missing in {cfg}")
    return {"SWAP": 1, **{key: cfg[key] for key in REGA_SWAP_KEYS}, "SPLIT_K": cfg["SPLIT_K"],
            "num_warps": cfg["SWAP_WARPS"], **({"KN": cfg["KN"]} if "KN" in cfg else {})}


#: w4_ws (WS): its K tile, its activation rows a program (the wgmma's N) and the shared memory its ring may take
#: (STAGES x (weight rows + activation rows) x BK x 2 B; the H200 gives a block 227 KB); 512 rows only as two
#: MMA warpgroups' halves (WGN 2, the MoE's)
WS_BK = 64
WS_ROWS = (64, 128, 256, 512)
WS_SMEM = 208 * 1024
WS_MMA_REGS = 26


def check_ws_config(cfg: dict[str, int], layout: Layout, what: str = "weight", moe: bool = False) -> None:
    """Refuse a WS config (w4_ws.w4_ws_kernel) the kernel does not cover: K tiles (BK) of WS_BK or twice that; 4-bit
    words in GPTQ's [K/8, N] layout (INT4 with groups a multiple of BK, or E2M1 words); 4 or 8 MMA warps (BN = 16 x
    num_warps weight rows); BM of WS_ROWS; 1, 2, 4, 8 or 16 decode warps (DW: their lanes across the BN weight rows,
    the warps BN does not need across a K tile's word rows); a ring of 2-8 slots inside WS_SMEM; PFENCE / XCP / XTMA
    / MW / WPF / PP / DP / WT / PT in their ranges (the kernel's docstrings; WT's ring of words inside WS_SMEM too); DREGS
    a multiple of 8 in 24..256; MAXNREG a multiple of 8 in 64..255, the whole program's registers inside the register
    file (MAXNREG x 32 x its warps rounded up to whole warpgroups <= 65536) and room for the MMA warps' fp32
    accumulator (BN x BM / (32 x num_warps) registers a thread) plus WS_MMA_REGS (ptxas refuses the wgmma below that:
    8 + 16 warps at 80 registers, BM 128). WGN 2 (moe: the MoE's launches only): 8 MMA warps as two warpgroups on
    the halves of BM activation rows (BN = 16 x 4), with XTMA 1, not PP; BM 512 only so."""
    warps, bm, dw, stages = cfg.get("num_warps"), cfg.get("BM"), cfg.get("DW"), cfg.get("STAGES")
    bk, wt, wgn = cfg.get("BK", WS_BK), cfg.get("WT", 0), cfg.get("WGN", 1)
    if wgn not in (1, 2) or (wgn == 2 and (not moe or warps != 8 or cfg.get("XTMA") != 1 or cfg.get("PP"))) or \
            (bm == 512 and wgn != 2):
        raise ValueError(f"WGN for {what}: 1, or 2 (the MoE's 8 MMA warps as two warpgroups on the halves of BM "
                         f"activation rows, with XTMA 1, not PP; BM 512 needs it), not {cfg}")
    bn = 16 * (warps or 4) // wgn
    if bk not in (WS_BK, 2 * WS_BK) or layout.elem not in (INT4, E2M1_MX, E2M1_NV) or layout.pack != 8 or \
            (layout.elem == INT4 and layout.group % bk):
        raise ValueError(f"WS for {what}: the warp-specialized kernel (w4_ws) reads 4-bit words in GPTQ's [K/8, N] "
                         f"layout (INT4 with groups a multiple of its K tile BK, {WS_BK} or {2 * WS_BK}; MXFP4 / NVFP4 "
                         f"repacked) only, not {cfg}")
    if warps not in (4, 8) or bm not in WS_ROWS or dw not in (1, 2, 4, 8, 16) or \
            stages not in range(2, 9) or \
            stages * (bn + bm) * bk * 2 + (wt or 0) * bn * bk // 2 > WS_SMEM:
        raise ValueError(f"WS for {what}: num_warps 4 or 8, BM one of {WS_ROWS}, DW 1, 2, 4, 8 or 16, STAGES 2-8 "
                         f"inside {WS_SMEM} B of shared memory, not {cfg}")
    xcp = cfg.get("XCP", 0)
    xt = cfg.get("XTMA", 0)
    if cfg.get("PFENCE", 0) not in (0, 1) or xcp not in range(0, stages - 1) or cfg.get("MW", 1) not in (0, 1) or \
            xt not in (0, 1, 2) or (xt and xcp) or cfg.get("WPF", 2) not in ((2, 3, 4) if xcp or xt else (2,)):
        raise ValueError(f"PFENCE / XCP / XTMA / MW / WPF for {what}: PFENCE 0 (the MMA warps' proxy fence) or 1 (the "
                         f"decode warps'), XCP 0 (activations through registers) or 1..STAGES - 2 tiles copied ahead, "
                         f"XTMA 0, 1 or 2 (the activations by TMA from the MMA or the decode warps; XCP 0 then), MW 1 "
                         f"(a slot handed back after the next tile's MMA is issued) or 0 (after its own), WPF 2-4 (the "
                         f"words loaded that many tiles ahead; 2 with neither XCP nor XTMA), not {cfg}")
    if cfg.get("PP", 0) not in (0, 1) or (cfg.get("PP") and (warps != 8 or xt != 2 or dw not in (4, 8) or
                                                            cfg.get("DREGS") != cfg.get("MAXNREG"))):
        raise ValueError(f"PP for {what}: 0, or 1 (two MMA warpgroups on their own: num_warps 8, XTMA 2, DW 4 or 8, "
                         f"DREGS = MAXNREG, every warp's registers), not {cfg}")
    dp = cfg.get("DP", 1)
    if dp not in (1, 2, 4) or (dp > 1 and (not xt or cfg.get("PP") or dw % dp or dp > stages)):
        raise ValueError(f"DP for {what}: 1, 2 or 4 decode partitions (more than 1 with XTMA, without PP, DW a "
                         f"multiple of DP, DP <= STAGES), not {cfg}")
    if wt != 0 and (wt not in range(stages + 1, 17) or xt != 1 or cfg.get("PP")):
        raise ValueError(f"WT for {what}: 0 (the words loaded into registers WPF tiles ahead) or a ring of STAGES + 1 "
                         f"to 16 slots of words that the MMA warps fill by TMA (with XTMA 1, without PP), not {cfg}")
    pt = cfg.get("PT", 0)
    if pt not in (0, 1, 2) or (pt and (xt != 1 or cfg.get("MW", 1) != 1 or dp not in (1, 2) or stages % dp or
                                       cfg.get("PP") or wt or wgn != 1 or cfg.get("PFENCE", 0))) or \
            (pt == 2 and cfg.get("WPF", 2) != 2):
        raise ValueError(f"PT for {what}: 0, 1 (a persistent program an SM, the ring running on across its output "
                         f"tiles) or 2 (PT 1 with the decode loop unrolled by two trips: WPF 2), with XTMA 1, MW 1, DP "
                         f"1 or 2 dividing STAGES, not PP, WT, WGN 2 or PFENCE, not {cfg}")
    dregs, maxnreg = cfg.get("DREGS"), cfg.get("MAXNREG")
    if dregs not in range(24, 257, 8) or maxnreg not in range(64, 256, 8) or \
            maxnreg * 32 * -(-(warps + dw) // 4) * 4 > 65536 or maxnreg < bn * bm // (32 * warps) + WS_MMA_REGS:
        raise ValueError(f"DREGS / MAXNREG for {what}: DREGS a multiple of 8 in 24..256, MAXNREG a multiple of 8 "
                         f"in 64..255 with MAXNREG x 32 x (num_warps + DW, whole warpgroups) <= 65536 and at least "
                         f"BM / 2 / WGN + {WS_MMA_REGS} (the MMA warps' accumulator and addresses), not {cfg}")


#: The w4_ws launch keys a MoE WS entry carries beside its DEQUANT_MM fallback (moe_ws; its MMA warps as WS_WARPS)
WS_MOE_KEYS = ("BM", "BK", "STAGES", "DW", "DREGS", "MAXNREG", "PFENCE", "XCP", "WPF", "MW", "XTMA", "PP", "DP",
               "WT", "WGN", "PT")


def check_ws_moe(cfg: dict[str, int], layout: Layout, what: str) -> None:
    """WS in the fused MoE (moe_ws: its MXFP4, NVFP4 or INT4 experts on w4_ws's MoE mode): E2M1 experts (their
    words read in the MoE's [E, N, K/8] layout) or INT4 ones (GPTQ's [E, K/8, N], groups a multiple of the K tile);
    WS_WARPS the MMA warps (w4_ws's num_warps) and the other w4_ws keys as check_ws_config takes them; WS_ACT 0 or
    1 and WS_HALF 0, 1 or 2 (2: quarter blocks too, BM >= 128) with XTMA, not PP; the rest of the entry is the
    DEQUANT_MM config that serves the calls w4_ws cannot."""
    if layout.elem not in (E2M1_MX, E2M1_NV, INT4) or "WS_WARPS" not in cfg or not cfg.get("DEQUANT_MM"):
        raise ValueError(f"WS for {what}: the MoE's warp-specialized path takes MXFP4, NVFP4 or INT4 experts, its MMA "
                         f"warps as WS_WARPS and a DEQUANT_MM fallback, not {cfg}")
    if cfg.get("WS_ACT", 0) not in (0, 1) or (cfg.get("WS_ACT") and (cfg.get("PP") or not cfg.get("XTMA"))):
        raise ValueError(f"WS_ACT for {what}: 0, or 1 (swigluoai in FC1's epilogue) with the activations by TMA "
                         f"(XTMA) and one MMA warpgroup's tiles (not PP), not {cfg}")
    if cfg.get("WS_HALF", 0) not in (0, 1, 2) or (cfg.get("WS_HALF") and (cfg.get("PP") or not cfg.get("XTMA"))) \
            or (cfg.get("WS_HALF") == 2 and cfg.get("BM", 0) < 128):
        raise ValueError(f"WS_HALF for {what}: 0, or 1 (a block whose pairs fit in its first half multiplied on that "
                         f"half) or 2 (its first quarter too, BM >= 128) with the activations by TMA (XTMA) and one "
                         f"MMA warpgroup's tiles (not PP), not {cfg}")
    if cfg.get("WS_QACT", 0) not in (0, 1, 2) or (cfg.get("WS_QACT") and not cfg.get("WS_ACT")):
        raise ValueError(f"WS_QACT for {what}: 0, 1 (NVFP4 W4A4: FC2's input amax taken in FC1's epilogue where its "
                         f"scale is dynamic) or 2 (also FC2's input rounded there where it is static), with WS_ACT "
                         f"(the activation in that epilogue), not {cfg}")
    tail = cfg.get("WS_TAIL", 0)
    if tail:
        check_ws_tail(cfg, what)
    ws = {key: value for key, value in cfg.items() if key in WS_MOE_KEYS}
    try:
        check_ws_config(dict(ws, num_warps=cfg["WS_WARPS"]), replace(layout, pack=8), what, moe=True)
    except ValueError as exc:
        raise ValueError(f"WS for {what}, the MoE's w4_ws keys (num_warps: WS_WARPS): {exc}") from None


def check_ws_tail(cfg: dict[str, int], what: str) -> None:
    """WS_TAIL (w4_ws's TAIL): 16, 32, 64 or 128 rows (a power of two: the tail's TMA box and accumulator; 48 and 96
    fail to compile, R133), at most BM, after each block's BM (a second wgmma on the decoded tile, its rows' own ring
    of STAGES slots); with WS_HALF (its row BM says if the tail holds a pair), XTMA 1, one MMA warpgroup (4 warps,
    not PP, WGN 2) and no WT; the ring inside WS_SMEM, and the MMA warps' registers (the default partition's: MAXNREG
    x its warps plus what the decode warps give back below MAXNREG, at most 256 a thread) holding both accumulators,
    BN x (BM + WS_TAIL) / 128 a thread, plus WS_MMA_REGS."""
    tail, bm, stages = cfg["WS_TAIL"], cfg.get("BM", 0), cfg.get("STAGES", 0)
    bk, warps, dw = cfg.get("BK", WS_BK), cfg.get("WS_WARPS"), cfg.get("DW", 0)
    maxnreg, dregs = cfg.get("MAXNREG", 0), cfg.get("DREGS", 0)
    share = min(256, (maxnreg * warps + (maxnreg - dregs) * dw) // warps // 8 * 8) if warps == 4 else 0
    if tail not in (16, 32, 64, 128) or tail > bm or not cfg.get("WS_HALF") or cfg.get("XTMA") != 1 or \
            cfg.get("PP") or cfg.get("WGN", 1) != 1 or cfg.get("WT") or warps != 4 or \
            stages * (64 + bm + tail) * bk * 2 > WS_SMEM or share < 64 * (bm + tail) // 128 + WS_MMA_REGS:
        raise ValueError(f"WS_TAIL for {what}: 16, 32, 64 or 128 rows (at most BM) after each block's BM, with "
                         f"WS_HALF, XTMA 1, WS_WARPS 4 (not PP or WGN 2) and no WT, STAGES x (64 + BM + WS_TAIL) x BK "
                         f"x 2 <= {WS_SMEM} B, and the MMA warps' registers holding (BM + WS_TAIL) / 2 + "
                         f"{WS_MMA_REGS}, not {cfg}")


#: The smallest K of a 16-bit tensor-core product (tl.dot on bf16 / f16 operands, mma.sync and wgmma alike) and
#: the smallest row count of an MMA's narrow side: the floor under the swap, wgmma and code-by-code K tiles below.
DOT_MIN = 16


def check_grouped_rega(cfg: dict[str, int], layout: Layout, what: str) -> None:
    """SWAP 3 (the MoE's E2M1 experts on w4_rega's grouped mode, moe_rega): BLOCK_M pairs a block 16-128 (a power
    of two: wgmma's N), RWARPS / RWARPS2 4, 8 or 16 (one, two or four warpgroups), XT 1-8, PF 1 or 2, XDB 0 or 1,
    VEC 0 or 1, XP 0 or 1 (the activations permuted into the copy order first), TABLE 1 or 2 on NVFP4 only (its
    exact byte-table decoder), no WAIT (unsafe in the K loop: w4_rega_kernel's docstring); the rest of the entry is
    the SWAP 2 config that serves the calls w4_rega cannot."""
    if layout.elem not in (E2M1_MX, E2M1_NV) or cfg.get("BLOCK_M") not in (16, 32, 64, 128) or \
            "RWARPS" not in cfg or "XT" not in cfg or cfg["RWARPS"] not in (4, 8, 16) or \
            cfg.get("RWARPS2", 4) not in (4, 8, 16) or not 1 <= cfg["XT"] <= 8 or cfg.get("PF", 2) not in (1, 2) or \
            cfg.get("XDB", 0) not in (0, 1) or cfg.get("VEC", 0) not in (0, 1) or cfg.get("XP", 0) not in (0, 1) or \
            cfg.get("TABLE", 1 if layout.elem == E2M1_NV else 0) not in ((1, 2) if layout.elem == E2M1_NV else (0,)) \
            or cfg.get("EARLY", 0) or cfg.get("WAIT", 0):
        raise ValueError(f"SWAP 3 for {what}: w4_rega's grouped MoE mode takes MXFP4 / NVFP4 experts, BLOCK_M 16, "
                         f"32, 64 or 128, RWARPS / RWARPS2 4, 8 or 16 (64, 128 or 256 weight rows a program), XT 1-8, "
                         f"PF 1 or 2, XDB 0 or 1, VEC / XP 0 or 1, TABLE 1 or 2 on NVFP4 only, no EARLY or WAIT "
                         f"(w4_rega's PF 0 forms only); not {cfg}")


def _check_fp8_sum_option(cfg: dict[str, int], layout: Layout, what: str, key: str, refused: set[str],
                          about: str) -> None:
    """PROMO / FASTACC (how the float8 dot's sums reach fp32): 0 or 1, on FP8 weights with scales constant along K,
    and on no path the config names in `refused` (a path that does not read the key would drop it silently)."""
    on = cfg.get(key, 0)
    if on not in (0, 1) or (on and (layout.elem != FP8 or layout.group != 1 or "DECODE" in cfg
                                    or any(cfg.get(other) for other in refused))):
        raise ValueError(f"{key}={on} for {what}: {about}, not {cfg}")


def check_config(cfg: dict[str, int], layout: Layout, what: str = "weight") -> None:
    """Refuse launch parameters the kernels' index arithmetic does not cover (a config given by
    hand, e.g. a benchmark sweep or the tuned table), per path:
    - DEQUANT_MM (the weight dequantized once, cuBLAS): any weight (layer-dtype activations);
    - SCALED_MM (the GEMM handed to torch._scaled_mm rowwise): FP8 per-channel / per-tensor weights;
    - swap-AB (SWAP): FP8 only with scales constant along K (per channel / tensor), K tiles of 32-256;
      FULL_TILE (one dot per K tile) on E2M1 only with the word decoders (DECODE 4, or 5: fused, E2M1
      words only), PERM (the joined tile in the decoders' pair order) only with FULL_TILE;
      INT4 only with 128-wide groups (a K tile is one group); E2M1 K tiles of whole 128s; SWAP 3 (the MoE's
      E2M1 experts on w4_rega's grouped mode) also as check_grouped_rega says;
    - register-A few-row 4-bit (REGA, w4_rega): INT4 with 128-wide groups or E2M1 words, 4 or 8 warps; PF 0
      (every K tile of a program loaded up front) with at most 4 tiles per program (XT); EARLY (1 / 2: the
      words issued before the activations' wait / copy) and WAIT 1 (each K tile waits for the previous tile's MMAs)
      with PF 0 only; TABLE 1 / 2 (the byte-table decoder; 2: scale bytes in 16-bit loads) on NVFP4 only; VEC 1; the
      swap fallback it may carry (rega_swap) as a swap config;
    - wgmma 4-bit (WG): words in GPTQ's [K/8, N] layout; K tiles powers of two >= 16 (INT4: inside one group);
    - one-tile 4-bit GEMV (W4ROW, w4_rowgemv): words in GPTQ's [K/8, N] layout, power-of-two tiles, K tiles of
      whole groups, DECODE 0 or 3, a register cap (MAXNREG) of 24-255, packed f16 products (HX 1) on INT4 with
      DECODE 3 only;
    - GEMV (DECODE without SWAP): K tiles of whole scale groups (FP8: whole 128-wide blocks); the
      row-walking E2M1 GEMV (ROWS): power-of-two K chunks >= 64, BLOCK_N a power of two dividing ROWS;
    - FASTACC 1 (the float8 dot not promoted over K, as vLLM's sm_90 CUTLASS FP8 kernels sum): FP8 weights with
      scales constant along K, on the tiled GEMM or SCALED_MM, not with PROMO;
    - tiled GEMM: PROMO 1 on FP8 weights with scales constant along K only, at most 64 accumulator registers a
      thread (BLOCK_M * BLOCK_N / (32 * num_warps): the promotion holds a second accumulator); BF16 K tiles of 16-128, FP8 K tiles of
      32-128 inside one 128-wide scale block
      (the float8 dot needs K >= 32), 4-bit K tiles of whole scale groups and, code by code (no FULL_TILE),
      of at least 16 units (the dot's K >= 16: 32 codes in the [N, K/2] layout, 128 in the word layouts); E2M1
      in the word layout decoded by words (FULL_TILE 2) only where N is a multiple of 16."""
    bk = cfg.get("BLOCK_K", 0)
    other_paths = {"DEQUANT_MM", "SCALED_MM", "ROWGEMV", "SWAP", "REGA", "WS", "WG", "W4ROW", "ROWS"}
    _check_fp8_sum_option(cfg, layout, what, "PROMO", other_paths, "the tiled GEMM's written-out float8 promotion "
                          "(1) serves FP8 W8A8 with scales constant along K (per-channel / per-tensor weights) on the "
                          "tiled GEMM only")
    _check_fp8_sum_option(cfg, layout, what, "FASTACC", other_paths - {"SCALED_MM"} | {"PROMO"},
                          "the float8 dot without promotion over K (1) serves FP8 W8A8 with scales constant along K "
                          "on the tiled GEMM or SCALED_MM only, without PROMO")
    acc_regs = cfg.get("BLOCK_M", 0) * cfg.get("BLOCK_N", 0) // (32 * cfg.get("num_warps", 4))
    if cfg.get("PROMO") and acc_regs > 64:
        raise ValueError(f"PROMO=1 for {what}: a {cfg.get('BLOCK_M')}x{cfg.get('BLOCK_N')} tile on "
                         f"{cfg.get('num_warps', 4)} warps holds {acc_regs} fp32 registers a thread, twice with the "
                         "promotion's own accumulator: over 64 it spills (128x128 on 4 warps: 292 bytes, 3.3x slower "
                         "in R150); use more warps or a smaller tile")
    if cfg.get("WS") and "WS_WARPS" in cfg:         # the MoE's WS entry (moe_ws) with its DEQUANT_MM fallback
        check_ws_moe(cfg, layout, what)
    if cfg.get("DEQUANT_MM"):
        return
    check_rowq(cfg.get("ROWQ", 0), what)
    if cfg.get("ROWGEMV"):
        bn = cfg.get("BLOCK_N", 0)
        if cfg["ROWGEMV"] != 3:
            raise ValueError(f"ROWGEMV={cfg['ROWGEMV']} for {what}: the FP8 row GEMV is ROWGEMV 3 (fp8_rowgemv)")
        if layout.elem != FP8 or layout.group != 1:
            raise ValueError(f"ROWGEMV for {what}: the FP8 row GEMV serves per-channel / per-tensor FP8 weights only")
        if bn < 1 or bn & (bn - 1) or bk < 64 or bk & (bk - 1):
            raise ValueError(f"BLOCK_N={bn}, BLOCK_K={bk} for {what}: the FP8 row GEMV takes powers of two "
                             "(K chunks >= 64)")
        return
    if cfg.get("SCALED_MM"):
        if layout.elem != FP8 or layout.group != 1:
            raise ValueError(f"SCALED_MM for {what}: torch._scaled_mm rowwise serves FP8 weights with per-channel "
                             "or per-tensor scales only")
        return
    if cfg.get("SWAP"):
        if cfg.get("BLOCK_M", 0) < DOT_MIN:
            raise ValueError(f"BLOCK_M={cfg.get('BLOCK_M')} for {what}: the swap kernels' activation side is "
                             f">= {DOT_MIN} rows")
        if cfg.get("PREFETCH", 1) not in (1, 2) or (cfg.get("PREFETCH", 1) == 2 and layout.elem == FP8):
            raise ValueError(f"PREFETCH={cfg.get('PREFETCH')} for {what}: the 4-bit swap kernel loads 1 or 2 K tiles "
                             "ahead (the FP8 one: its pipelined dot, no PREFETCH)")
        if layout.elem == FP8:
            if layout.group != 1:
                raise ValueError(f"SWAP for {what}: the FP8 swap kernel serves per-channel / per-tensor scales only")
            if bk not in (32, 64, 128, 256):
                raise ValueError(f"BLOCK_K={bk} for {what}: FP8 swap K tiles must be 32, 64, 128 or 256")
        elif layout.elem == INT4:
            if layout.group != 128:
                raise ValueError(f"SWAP for {what}: the INT4 swap kernel needs 128-wide groups, not {layout.group}")
        elif bk % 128:
            raise ValueError(f"BLOCK_K={bk} for {what}: E2M1 swap K tiles must be whole 128s")
        elif cfg.get("FULL_TILE") and cfg.get("DECODE") not in (4, 5):
            raise ValueError(f"FULL_TILE for {what}: the E2M1 swap kernel joins whole tiles from the word decoders "
                             "(DECODE 4 or 5) only")
        if cfg.get("DECODE") == 5 and not is_words(layout):
            raise ValueError(f"DECODE=5 for {what}: the fused E2M1 word decoder reads one scale per word (MXFP4 / "
                             "NVFP4 in the [K/8, N] word layout) only")
        if cfg.get("PERM") and not cfg.get("FULL_TILE"):
            raise ValueError(f"PERM for {what}: the decoders' pair order applies to the joined whole tile (FULL_TILE 1)")
        if cfg["SWAP"] == 3:
            check_grouped_rega(cfg, layout, what)
        return
    if cfg.get("REGA"):
        if not ((layout.elem == INT4 and layout.group == 128) or is_words(layout)):
            raise ValueError(f"REGA for {what}: the register-A kernel (w4_rega) reads INT4 with 128-wide groups or "
                             "MXFP4 / NVFP4 in the [K/8, N] word layout only")
        if cfg.get("num_warps") not in (4, 8) or cfg.get("PF", 2) not in (0, 1, 2) or cfg.get("XT", 0) < 1 or \
                (cfg.get("PF", 2) == 0 and cfg["XT"] > 4):
            raise ValueError(f"REGA for {what}: num_warps 4 or 8 (one or two warpgroups), PF 0 (XT <= 4), 1 or 2 "
                             f"and XT >= 1, not {cfg}")
        if cfg.get("EARLY", 0) not in (0, 1, 2) or (cfg.get("EARLY") and cfg.get("PF", 2) != 0):
            raise ValueError(f"EARLY for {what}: 1 (the words issued before the activations' wait) or 2 (before their "
                             f"copy), PF 0's (every K tile of a program loaded up front) only, not {cfg}")
        if cfg.get("TABLE") and layout.elem != E2M1_NV:
            raise ValueError(f"TABLE for {what}: w4_rega's byte-table decoder takes NVFP4's two-factor scale words only")
        if cfg.get("TABLE", 0) not in (0, 1, 2) or cfg.get("VEC", 0) not in (0, 1) or cfg.get("WAIT", 0) not in (0, 1) \
                or (cfg.get("WAIT") and cfg.get("PF", 2) != 0):
            raise ValueError(f"TABLE / WAIT / VEC for {what}: TABLE 1 or 2 (the scale bytes in 16-bit loads), VEC 1, "
                             f"WAIT 1 with PF 0 only, not {cfg}")
        swap = rega_swap(cfg)
        if swap is not None:
            check_config(swap, layout, f"{what} (the swap kernel a REGA entry falls back to)")
        return
    if cfg.get("WS"):
        check_ws_config(cfg, layout, what)
        return
    if cfg.get("WG"):
        if layout.elem not in (INT4, E2M1_MX, E2M1_NV) or layout.pack != 8:
            raise ValueError(f"WG for {what}: the wgmma 4-bit kernel reads words in GPTQ's [K/8, N] layout (INT4, "
                             "or MXFP4 / NVFP4 repacked at load) only")
        if bk < DOT_MIN or bk & (bk - 1) or (layout.elem == INT4 and layout.group % bk):
            raise ValueError(f"BLOCK_K={bk} for {what}: wgmma K tiles are powers of two >= {DOT_MIN} (INT4: "
                             f"dividing the group of {layout.group}, one scale per tile)")
        if cfg.get("BLOCK_M", 0) < DOT_MIN or cfg.get("BLOCK_N", 0) < 64:
            raise ValueError(f"BLOCK_M/BLOCK_N for {what}: wgmma tiles have >= 64 weight rows and >= {DOT_MIN} "
                             "activation rows")
        return
    if cfg.get("W4ROW"):
        bn = cfg.get("BLOCK_N", 0)
        if layout.pack != 8 or layout.elem not in (INT4, E2M1_MX, E2M1_NV):
            raise ValueError(f"W4ROW for {what}: the one-tile 4-bit GEMV (w4_rowgemv) reads words in GPTQ's [K/8, N] "
                             "layout (INT4, or MXFP4 / NVFP4 repacked at load) only")
        if bn < 1 or bn & (bn - 1) or bk < layout.group or bk & (bk - 1) or bk % layout.group or \
                cfg.get("DECODE") not in (0, 3):
            raise ValueError(f"BLOCK_N={bn}, BLOCK_K={bk}, DECODE={cfg.get('DECODE')} for {what}: the one-tile 4-bit "
                             f"GEMV takes powers of two, K tiles of whole groups of {layout.group} and the integer (0) "
                             "or word (3) decoder")
        if cfg.get("HX", 0) and (cfg["HX"] != 1 or layout.elem != INT4 or cfg.get("DECODE") != 3):
            raise ValueError(f"HX={cfg['HX']} for {what}: the one-tile GEMV's packed f16 products (HX 1) serve INT4 "
                             "with the word decoder (DECODE 3) only")
        if cfg.get("MAXNREG", 0) and not 24 <= cfg["MAXNREG"] <= 255:
            raise ValueError(f"MAXNREG={cfg['MAXNREG']} for {what}: ptxas's register cap is 24-255 a thread")
        return
    if cfg.get("ROWS"):
        bn, rows = cfg.get("BLOCK_N", 0), cfg["ROWS"]
        if layout.elem not in (E2M1_MX, E2M1_NV) or is_words(layout):
            raise ValueError(f"ROWS for {what}: the row-walking GEMV (fp4_gemv) serves MXFP4 / NVFP4 weights in "
                             "their checkpoint layout [N, K/2] only")
        if bk < 64 or bk & (bk - 1) or bn < 1 or bn & (bn - 1) or rows % bn:
            raise ValueError(f"BLOCK_K={bk}, BLOCK_N={bn}, ROWS={rows} for {what}: the row-walking GEMV needs "
                             "power-of-two K chunks of at least 64 and BLOCK_N a power of two dividing ROWS")
        return
    if "DECODE" in cfg:
        if "PREFETCH" in cfg:
            raise ValueError(f"PREFETCH for {what}: the GEMV loads one K tile ahead (no PREFETCH)")
        unit = 128 if layout.elem == FP8 and layout.group > 1 else max(layout.group, 8)
        if bk <= 0 or bk % unit:
            raise ValueError(f"BLOCK_K={bk} for {what}: GEMV K tiles must hold whole scale groups of {unit}")
        return
    if cfg.get("FULL_TILE") == 2 and is_words(layout) and layout.stride_wk % 16:
        raise ValueError(f"FULL_TILE=2 for {what}: the word decode of E2M1 words in the [K/8, N] layout needs N a "
                         f"multiple of 16, not {layout.stride_wk} (Triton 3.6's dot-operand pass fails to compile "
                         "it for sm_90 otherwise)")
    if layout.elem == BF16:
        if bk not in (16, 32, 64, 128):
            raise ValueError(f"BLOCK_K={bk} for {what}: BF16 K tiles must be 16-128")
    elif layout.elem == FP8:
        if bk not in (32, 64, 128):
            raise ValueError(f"BLOCK_K={bk} for {what}: FP8 K tiles must be 32, 64 or 128 (one scale block)")
    elif bk % layout.group or bk % layout.pack:
        raise ValueError(f"BLOCK_K={bk} for {what}: 4-bit K tiles must hold whole scale groups "
                         f"(a group of {layout.group})")
    elif not cfg.get("FULL_TILE") and bk // layout.pack < DOT_MIN:
        raise ValueError(f"BLOCK_K={bk} for {what}: the tiled GEMM multiplies each of a unit's {layout.pack} codes "
                         f"as its own K / {layout.pack} slice, and the dot needs K >= {DOT_MIN}: K tiles of at least "
                         f"{DOT_MIN * layout.pack}")


#: cfg ROWQ CHUNK (launch.row_codes' split form): the smallest row chunk of a program.
ROWQ_SPLIT_MIN = 128


def check_rowq(rowq: int, what: str = "weight") -> None:
    """cfg ROWQ (the per-token quantizer before an FP8 swap GEMM or ROWGEMV 3): 0 (act_qdq_kernel), 1 (one
    program per row: fp8_rowgemv.row_codes_kernel) or a power of two CHUNK >= ROWQ_SPLIT_MIN (each row split
    into CHUNK-wide programs: fp8_rowgemv.split_codes_kernel)."""
    if rowq not in (0, 1) and (rowq < ROWQ_SPLIT_MIN or rowq & (rowq - 1)):
        raise ValueError(f"ROWQ={rowq} for {what}: 0, 1 (one program per row) or a power of two >= "
                         f"{ROWQ_SPLIT_MIN} (the row chunk of a program)")


def check_direct_config(cfg: dict[str, int], layout: Layout, what: str = "weight") -> None:
    """Refuse parameters of the MoE's CUDA-core direct path (moe_gemv) that its index arithmetic
    does not cover: power-of-two tiles, K tiles of whole scale groups (FP8 1x128 activation groups
    and 128x128 blocks: multiples of 128), a split of at least one."""
    for key in ("BLOCK_N", "BLOCK_K", "BLOCK_N2", "BLOCK_K2"):
        v = cfg.get(key)
        if v is not None and (v < 1 or v & (v - 1)):
            raise ValueError(f"{key}={v} for {what}: tiles of the direct path are powers of two")
    quantum = max(layout.group, 128 if layout.elem == FP8 and layout.group > 1 else 1, layout.pack * 8)
    for key in ("BLOCK_K", "BLOCK_K2"):
        v = cfg.get(key)
        if v is not None and v % quantum:
            raise ValueError(f"{key}={v} for {what}: K tiles of the direct path hold whole groups of {quantum}")
    if cfg.get("SPLIT_K", 1) < 1 or cfg["DECODE"] not in (0, 1, 2, 3):
        raise ValueError(f"SPLIT_K / DECODE of {what}: a split of at least 1 and a decoder code 0-3")
    if cfg.get("XQ", 0) not in (0, 1, 2):
        raise ValueError(f"XQ of {what}: 1 (the NVFP4 W4A4 byte-table kernels) or 2 (w4_rega's MoE mode), not {cfg}")
    if cfg.get("XQ") == 2:
        rega = {key: cfg.get(key) for key in ("RWARPS", "RSPLIT", "XT")}
        if None in rega.values() or cfg["RWARPS"] not in (4, 8) or cfg.get("RWARPS2", 4) not in (4, 8) or \
                not 1 <= cfg["RSPLIT"] <= 16 or not 1 <= cfg.get("RSPLIT2", 1) <= 16 or not 1 <= cfg["XT"] <= 8 \
                or cfg.get("PF", 2) not in (1, 2) or cfg.get("TABLE", 1) not in (1, 2) \
                or cfg.get("XDB", 0) not in (0, 1):
            raise ValueError(f"XQ 2 of {what}: w4_rega's MoE mode takes RWARPS / RWARPS2 4 or 8 (64 or 128 weight "
                             f"rows a program), RSPLIT / RSPLIT2 1-16 (the K splits), XT 1-8, PF 1 or 2 (words loaded "
                             f"one or two K tiles ahead), TABLE 1 or 2 (the exact byte-table decoder) and XDB 0 or 1, "
                             f"not {cfg}")
