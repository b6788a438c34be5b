"""The MoE's MXFP4 experts on w4_ws's warp-specialized MoE mode (config WS, oracle_triton.moe_ws): on an sm_90 GPU
against oracle-emulation (marked gpu), and on any machine the dispatch: the entry's check, the DEQUANT_MM fallback
where w4_ws cannot run, what the path needs and the block-row gather."""
from __future__ import annotations

import pytest
import torch

from helpers import configs_match_reference, dropped_id_then_replay, gpu_moe_pair, moe_pair, rel, routing
from oracle_triton.formats import check_config, layout_for

DEV = "cuda" if torch.cuda.is_available() else "cpu"
#: the DEQUANT_MM entry a WS entry carries (the fallback), as the H200's 4096-token entries
DQ = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_N1": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3,
      "DEQUANT_MM": 512}
WS = dict(DQ, WS=1, WS_WARPS=4, BM=128, STAGES=4, DW=8, DREGS=104, MAXNREG=168, XTMA=1, DP=2)
#: NVFP4 W4A4 against oracle-emulation: test_triton_gpu.TOL_Q["nvfp4"] (FC2's input re-rounding flips)
W4A4_TOL = 8e-2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("fmt,mode,act,h,i,activation,bias,router_on_input,symmetric", [
    # gpt-oss's form: MXFP4 W4A16, interleaved swigluoai with a limit and biases
    ("mxfp4", "w4a16_mx", "bf16", 640, 384, "swigluoai", True, False, True),
    # silu halves, no bias, the router weight on the input (a row per pair), K not a multiple of 128
    ("mxfp4", "w4a16_mx", "bf16", 576, 320, "silu", False, True, True),
    # INT4 experts in GPTQ's layout, groups of 128: zero points and a bias; symmetric, the router weight on the input
    ("int4", "w4a16_int4", "bf16", 640, 384, "silu", True, False, False),
    ("int4", "w4a16_int4", "bf16", 512, 256, "silu", False, True, True),
    # NVFP4 experts (exact decode, g in the epilogue): W4A4 with dynamic activation scales (Qwen3-235B's form), and
    # W4A16 with the router weight on the input
    ("nvfp4", "w4a4_nvfp4", "nvfp4", 512, 256, "silu", False, False, True),
    ("nvfp4", "w4a16_nvfp4", "bf16", 640, 384, "silu", False, True, True),
])
def test_ws_path_matches_emulation(fmt, mode, act, h, i, activation, bias, router_on_input, symmetric, monkeypatch):
    """WS on an sm_90 GPU, MXFP4, INT4 and NVFP4 (W4A16 and W4A4) experts, 8 experts. Four configurations at 1, 37
    and 300 tokens (one pair, uneven blocks, about 150 pairs an expert: several blocks each), the other forms at
    300 (each form compiles once a token count's specialisation): blocks of 64, 128 and 256 pairs, one or two MMA
    warpgroups (PP), the activations by the MMA warps' or the decode warps' TMA or by cp.async, 1, 2 or 4 decode
    partitions, K tiles of 64 and 128, the words by TMA into rings of 6-16 slots (WT; the ring wraps several
    times an expert), swigluoai in FC1's epilogue (WS_ACT; elsewhere the activation launch), silu's halves in
    FC1's epilogue (WS_ACT on the silu layers: the base configs with WS_HALF, and INT4's forms), blocks whose
    pairs fit in their first half multiplied on it alone (WS_HALF: 256-pair blocks at 1, 37 and 300 tokens,
    128-pair ones at 300, both halves taken), or in their first quarter too (WS_HALF 2, 256-pair blocks at 1, 37
    and 300 tokens: quarters, halves and whole blocks), 8 MMA warps as two warpgroups on the halves of 256- and
    512-pair blocks (WGN 2). Against oracle-emulation on the CPU (exact weights, fp32 sums, the layer dtype
    between launches: within 1e-2; W4A4 within W4A4_TOL), the same bits on more calls, an out-of-range id adding
    nothing, captured and replayed. DEQUANT_MM (the fallback) is never called. The forms run with
    moe_ws.ROUND_LIVE_ROWS (W4A4: FC2's input rounded on the rows holding a pair only)."""
    t, ref = gpu_moe_pair(fmt, mode, act, h, i, activation, bias, router_on_input, symmetric=symmetric)
    from oracle_triton import moe_dequant, moe_ws
    from oracle_triton.moe_ws import ws_ok

    if not ws_ok(t, torch.zeros(1, h, dtype=torch.bfloat16, device="cuda")):
        pytest.skip("WS needs an sm_90 GPU (w4_ws: wgmma, warp specialization)")

    def no_dequant(*a, **kw):
        raise AssertionError("DEQUANT_MM served a WS call")

    monkeypatch.setattr(moe_dequant, "apply_dequant", no_dequant)
    monkeypatch.setattr(moe_ws, "SILU_IN_FC1", True)      # silu's WS_ACT forms (the default since R98a)
    k = 1 if router_on_input else 4
    cpu_ref = lambda xx, ww, ii: ref.apply(xx.cpu(), ww.cpu(), ii.cpu()).to("cuda")      # noqa: E731
    base = [WS, dict(WS, BM=256, DP=4, WT=12, WS_ACT=1), dict(WS, BM=256, WS_HALF=1, WS_ACT=1),
            dict(WS, BM=256, WS_HALF=2, WS_ACT=1)]
    forms = [dict(WS, BM=64, DP=1, WT=16), dict(WS, XTMA=0, DP=1, XCP=1, BM=64), dict(WS, WS_HALF=1, DP=4, WT=8),
             dict(WS, WS_WARPS=8, WGN=2, BM=256, MAXNREG=128, WS_HALF=1), dict(WS, WS_WARPS=8, WGN=2, BM=512, STAGES=2,
                                                                              DW=4),
             dict(WS, WS_WARPS=8, PP=1, XTMA=2, DP=1, DREGS=128, MAXNREG=128, STAGES=3)]
    if fmt == "mxfp4":
        forms += [dict(WS, BM=64), dict(WS, BM=256), dict(WS, XTMA=2, DP=4), dict(WS, DP=1, MW=0, WPF=3),
                  dict(WS, WT=8), dict(WS, WS_ACT=1), dict(WS, XTMA=2, DP=4, WS_ACT=1)]
    else:           # Qwen3's silu on INT4 experts in FC1's epilogue (ACT_SILU), with zero points when not symmetric
        forms += [dict(WS, WS_ACT=1), dict(WS, WS_ACT=1, XTMA=2, DP=4)]
    if h % 128 == 0 and i % 128 == 0:
        forms += [dict(WS, BK=128, STAGES=3, WT=6)] + ([dict(WS, BK=128, STAGES=3)] if fmt == "mxfp4" else [])
    # W4A4: the project's NVFP4 MoE bound (test_triton_gpu.TOL_Q: FC2's input re-rounded, a value at a rounding
    # boundary flips a whole E2M1 step; R104 on the exact decode: 1.9e-2 at one token, BM 128)
    tol = W4A4_TOL if act == "nvfp4" else 1e-2
    # three more calls each: the second recorded as a launch plan (refused: the TMA descriptors), the third eager
    configs_match_reference(t, cpu_ref, base, h, k, (1, 37, 300), repeats=3, tol=tol)
    monkeypatch.setattr(moe_ws, "ROUND_LIVE_ROWS", True)      # W4A4's forms: FC2's input rounded on live rows only
    configs_match_reference(t, cpu_ref, forms, h, k, (300,), repeats=3, tol=tol)
    for cfg in base:
        t.config = cfg
        dropped_id_then_replay(t, cpu_ref, h, k, tol=tol)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("fmt,mode,h,i,activation,bias,symmetric", [
    ("mxfp4", "w4a16_mx", 576, 320, "silu", False, True),           # 9 and 5 K tiles: odd, 2 decode partitions
    ("mxfp4", "w4a16_mx", 640, 384, "swigluoai", True, True),
    ("int4", "w4a16_int4", 640, 384, "silu", True, False),          # zero points
    ("nvfp4", "w4a16_nvfp4", 640, 384, "silu", False, True),        # the epilogue's per-expert factor, PT's experts
])
def test_ws_persistent_programs_match_the_one_tile_grid(fmt, mode, h, i, activation, bias, symmetric, monkeypatch):
    """PT 1 in the MoE (a persistent program an SM over the blocks' output tiles, stopping at the first block
    without an expert): at 37 and 300 tokens x top-4 over 8 experts, with the activation in FC1 and half blocks
    (WS_HALF) or without, one or two decode partitions, K tile counts odd and even, the decode loop unrolled
    by two trips (PT 2); one program an SM and 3
    programs (many tiles each, several experts a program): the same bits as the one-tile grid, within 1e-2 of
    oracle-emulation, an out-of-range id adding nothing, captured and replayed."""
    from oracle_triton import launch, moe_ws

    t, ref = gpu_moe_pair(fmt, mode, "bf16", h, i, activation, bias, False, symmetric=symmetric)
    if not moe_ws.ws_ok(t, torch.zeros(1, h, dtype=torch.bfloat16, device="cuda")):
        pytest.skip("WS needs an sm_90 GPU (w4_ws: wgmma, warp specialization)")
    cpu_ref = lambda xx, ww, ii: ref.apply(xx.cpu(), ww.cpu(), ii.cpu()).to("cuda")      # noqa: E731
    cfgs = [dict(WS, BM=256, WS_HALF=1, WS_ACT=1, PT=1), dict(WS, BM=128, DP=1, WPF=3, PT=1),
            dict(WS, BM=256, WS_HALF=1, WS_ACT=1, PT=2), dict(WS, BM=256, WS_HALF=2, WS_ACT=1, PT=2)]
    one_tile = lambda cfg: {key: value for key, value in cfg.items() if key != "PT"}       # noqa: E731
    for programs in (None, 3):
        monkeypatch.setattr(launch, "PT_PROGRAMS", programs)
        configs_match_reference(t, cpu_ref, cfgs, h, 4, (37, 300), repeats=2, same=one_tile)
    for cfg in cfgs:
        t.config = cfg
        dropped_id_then_replay(t, cpu_ref, h, 4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("fmt,mode,act,h,i,activation,bias,symmetric", [
    ("int4", "w4a16_int4", "bf16", 512, 256, "silu", False, False),         # Qwen3-30B INT4's form, zero points
    ("nvfp4", "w4a4_nvfp4", "nvfp4", 512, 256, "silu", False, True),       # Qwen3-235B's: W4A4, the factor epilogue
    ("mxfp4", "w4a16_mx", "bf16", 640, 384, "swigluoai", True, True),      # gpt-oss's, biases
])
def test_ws_tail_blocks_match_emulation_and_the_blocks_without(fmt, mode, act, h, i, activation, bias, symmetric,
                                                                monkeypatch):
    """WS_TAIL (blocks of BM + WS_TAIL pairs, the tail rows a second wgmma on the same decoded tile where they hold a
    pair): 37, 300 and 700 tokens x top-4 over 8 experts (about 18, 150 and 350 pairs an expert: blocks of 128 + 64
    with and without their tail multiplied, 256 + 64 and 256 + 32 whole and spilling into a half or quarter block),
    with the activation in FC1 or its own launch, one program a tile or persistent (PT 1 / 2, one program an SM and 3):
    within tolerance of oracle-emulation, the same bits on more calls, and the same bits as the same entry without
    WS_TAIL (a pair's products do not depend on the wgmma's N); an out-of-range id adding nothing, captured and
    replayed. DEQUANT_MM never serves a call."""
    t, ref = gpu_moe_pair(fmt, mode, act, h, i, activation, bias, False, symmetric=symmetric)
    cfgs = [dict(WS, WS_HALF=1, WS_TAIL=64, WS_ACT=1), dict(WS, BM=256, WS_HALF=2, WS_TAIL=64, WS_ACT=1, PT=2),
            dict(WS, BM=256, WS_HALF=1, WS_TAIL=64, PT=1), dict(WS, WS_HALF=2, WS_TAIL=32, DP=1, WPF=3, PT=1),
            dict(WS, BM=256, WS_HALF=1, WS_TAIL=32, WS_ACT=1, PT=2)]         # the 4096-token entries' (R135)
    _same_bits_as_without("WS_TAIL", t, ref, h, cfgs, W4A4_TOL if act == "nvfp4" else 1e-2, monkeypatch)


def _same_bits_as_without(key: str, t, ref, h: int, cfgs: list, tol: float, monkeypatch) -> None:
    """The WS GPU tests of an opt-in key: each config at 37, 300 and 700 tokens x top-4 over 8 experts, with one
    program an SM and 3 (PT): within tol of oracle-emulation (on the CPU), the same bits on two more calls and
    as the config without `key`; then an out-of-range id and capture / replay. DEQUANT_MM never serves a call."""
    from oracle_triton import launch, moe_dequant, moe_ws

    if not moe_ws.ws_ok(t, torch.zeros(1, h, dtype=torch.bfloat16, device="cuda")):
        pytest.skip("WS needs an sm_90 GPU (w4_ws: wgmma, warp specialization)")

    def no_dequant(*a, **kw):
        raise AssertionError("DEQUANT_MM served a WS call")

    monkeypatch.setattr(moe_dequant, "apply_dequant", no_dequant)
    monkeypatch.setattr(moe_ws, "SILU_IN_FC1", True)
    cpu_ref = lambda xx, ww, ii: ref.apply(xx.cpu(), ww.cpu(), ii.cpu()).to("cuda")      # noqa: E731
    without = lambda cfg: {k: v for k, v in cfg.items() if k != key}       # noqa: E731
    for programs in (None, 3):
        monkeypatch.setattr(launch, "PT_PROGRAMS", programs)
        configs_match_reference(t, cpu_ref, cfgs, h, 4, (37, 300, 700), repeats=2, tol=tol, same=without)
    for cfg in cfgs:
        t.config = cfg
        dropped_id_then_replay(t, cpu_ref, h, 4, tol=tol)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_ws_qact_matches_the_rounding_launch(monkeypatch):
    """WS_QACT 2 on an sm_90 GPU (NVFP4 W4A4 with static input scales, Qwen3-235B's checkpoint form; FC2's input rounded
    through NVFP4 in FC1's epilogue, w4_ws's QACT): at 37, 300 and 700 tokens x top-4 over 8 experts, on 128- and
    256 + 64-pair blocks, halves and quarters, one program a tile or persistent (PT 2, one program an SM and 3):
    the same bits as the same entry without WS_QACT (the rounding launch, launch.quantize_activations) and within
    the NVFP4 bound of oracle-emulation with the same static scales; an out-of-range id adding nothing, captured
    and replayed."""
    t, ref = gpu_moe_pair("nvfp4", "w4a4_nvfp4", "nvfp4", 512, 256, "silu", False, False,
                          input_scales=(4.5 / 2688, 1.5 / 2688))
    cfgs = [dict(WS, WS_HALF=1, WS_ACT=1, WS_QACT=2),
            dict(WS, BM=256, WS_HALF=2, WS_TAIL=64, WS_ACT=1, WS_QACT=2, PT=2)]
    _same_bits_as_without("WS_QACT", t, ref, 512, cfgs, W4A4_TOL, monkeypatch)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("switch", ["", "by_warp", "live_tiles"])
def test_ws_qact_dynamic_matches_the_activation_and_amax_launches(switch, monkeypatch):
    """WS_QACT on an sm_90 GPU with dynamic activation scales (the Qwen3-235B bench row's form; w4_ws's QACT 2: FC1's
    epilogue applies silu and merges the amax of the rows holding a pair into a state, launch.scale_from_amax
    makes the scale): at 37, 300 and 700 tokens x top-4 over 8 experts, on 128- and 256 + 32-pair blocks, halves
    and quarters, one program a tile or persistent (PT 2, one program an SM and 3): the same bits as the entry
    without WS_QACT (FC1's rows, the activation launch with its zeros on the padding rows, the amax over its
    output) and within the NVFP4 bound of oracle-emulation; the state zero after every call (a replay starts
    clean); an out-of-range id adding nothing, captured and replayed. by_warp: moe_ws.AMAX_BY_WARP (each warp's
    max by its own atomic, w4_ws's QACT 3); live_tiles: moe_ws.ROUND_LIVE_TILES (FC2's input rounded on the 16-row
    tiles holding a pair only) with launch.FAST_NVFP4_DIV (the quotients by reciprocal and FMAs), on both sides."""
    from oracle_triton import launch, moe_ws

    monkeypatch.setattr(moe_ws, "AMAX_BY_WARP", switch == "by_warp")
    monkeypatch.setattr(moe_ws, "ROUND_LIVE_TILES", switch == "live_tiles")
    monkeypatch.setattr(launch, "FAST_NVFP4_DIV", switch == "live_tiles")
    t, ref = gpu_moe_pair("nvfp4", "w4a4_nvfp4", "nvfp4", 512, 256, "silu", False, False)
    cfgs = [dict(WS, WS_HALF=1, WS_ACT=1, WS_QACT=1),
            dict(WS, BM=256, WS_HALF=2, WS_TAIL=32, WS_ACT=1, WS_QACT=1, PT=2)]     # the shipped tail (R135)
    _same_bits_as_without("WS_QACT", t, ref, 512, cfgs, W4A4_TOL, monkeypatch)
    assert int(t._ws_amax_state.abs().sum()) == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("fmt,mode,activation,bias", [("mxfp4", "w4a16_mx", "swigluoai", True),
                                                      ("int4", "w4a16_int4", "silu", False)])
@pytest.mark.parametrize("align", ["wide", "narrow", "parts"])
def test_ws_path_with_the_wide_alignment_and_unzeroed_padding(fmt, mode, activation, bias, align, monkeypatch):
    """The module switches R98a turned on (wide: moe.ALIGN_WIDE, align_kernel's 4096-pair steps on 16 warps, past
    ALIGN_SMALL_PAIRS here at 300 and 700 tokens x top-4; moe_ws.ZERO_PADDING off: padding rows left as the buffer
    held them; moe_ws.SILU_IN_FC1: the INT4 case's silu in FC1's epilogue) and their other side (narrow: 256-pair
    steps, zeroed padding, silu in its own launch), and moe.ALIGN_PARTS (align_kernel on one program per 1024
    pairs, the counts reset by the last) with moe_ws.GATHER_STREAM (the gather's rows stored evict-first) and the
    first side's switches, on the WS path with and without WS_HALF,
    and on 512-pair blocks (WGN 2: at 700 tokens both halves of a block hold pairs): against oracle-emulation, the
    same bits on more calls, captured and replayed."""
    from oracle_triton import moe as moe_mod, moe_ws

    t, ref = gpu_moe_pair(fmt, mode, "bf16", 512, 256, activation, bias, False, symmetric=fmt == "mxfp4")
    if not moe_ws.ws_ok(t, torch.zeros(1, 512, dtype=torch.bfloat16, device="cuda")):
        pytest.skip("WS needs an sm_90 GPU (w4_ws: wgmma, warp specialization)")
    wide = align != "narrow"
    monkeypatch.setattr(moe_mod, "ALIGN_WIDE", wide)
    monkeypatch.setattr(moe_mod, "ALIGN_PARTS", align == "parts")
    monkeypatch.setattr(moe_ws, "GATHER_STREAM", align == "parts")
    monkeypatch.setattr(moe_ws, "ZERO_PADDING", not wide)
    monkeypatch.setattr(moe_ws, "SILU_IN_FC1", wide)
    cpu_ref = lambda xx, ww, ii: ref.apply(xx.cpu(), ww.cpu(), ii.cpu()).to("cuda")      # noqa: E731
    cfgs = [dict(WS, BM=256, WS_ACT=1), dict(WS, BM=256, WS_HALF=1, WS_ACT=1),
            dict(WS, WS_WARPS=8, WGN=2, BM=512, STAGES=2, DW=4, WS_HALF=1, WS_ACT=1)]
    configs_match_reference(t, cpu_ref, cfgs, 512, 4, (37, 300, 700), repeats=3)
    for cfg in cfgs:
        t.config = cfg
        dropped_id_then_replay(t, cpu_ref, 512, 4)


def test_ws_moe_entry_check():
    """formats.check_config takes a WS MoE entry on MXFP4, NVFP4 or INT4 experts with w4_ws's keys in range
    (WS_WARPS its MMA warps) and a DEQUANT_MM fallback, and refuses the rest (INT4 groups the K tile does not divide
    among them)."""
    mx, nv, i4 = layout_for("mxfp4", 5760, 2880), layout_for("nvfp4", 3072, 4096), layout_for("int4", 512, 256, 128)
    check_config(WS, mx)
    check_config(WS, i4)
    check_config(dict(WS, BM=256, WS_HALF=1, PT=1), nv)
    check_config(dict(WS, BK=128, STAGES=3, WT=6), i4)
    check_config(dict(WS, BM=256, XTMA=2, DP=4), mx)
    check_config(dict(WS, BM=256, DP=4, WT=12), mx)
    check_config(dict(WS, WS_ACT=1), mx)
    check_config(dict(WS, WS_HALF=1, WS_ACT=1, BM=256), mx)
    check_config(dict(WS, WS_HALF=1), i4)
    check_config(dict(WS, WS_HALF=2), i4)
    check_config(dict(WS, BM=256, WS_HALF=2, PT=2), nv)
    check_config(dict(WS, WS_WARPS=8, WGN=2, BM=512, STAGES=2, DW=4), mx)     # 147 KB of ring, 128 + 26 registers
    check_config(dict(WS, WS_WARPS=8, WGN=2, BM=256, MAXNREG=128, WS_HALF=1), i4)
    check_config(dict(WS, BM=256, WS_HALF=1, WS_TAIL=64, WS_ACT=1, PT=1), i4)     # 192 KB of ring
    check_config(dict(WS, BM=256, WS_HALF=2, WS_TAIL=64, PT=2), nv)
    check_config(dict(WS, WS_HALF=1, WS_TAIL=128), mx)
    for bad, lay in ((dict(WS, BM=256, WS_TAIL=64), i4),                             # the tail's flag: WS_HALF
                     (dict(WS, BM=256, WS_HALF=1, WS_TAIL=40), i4),
                     (dict(WS, BM=256, WS_HALF=1, WS_TAIL=48), i4),                # a power of two (R133)
                     (dict(WS, BM=256, WS_HALF=1, WS_TAIL=96), i4), (dict(WS, WS_HALF=1, WS_TAIL=256), mx),
                     (dict(WS, BM=256, WS_HALF=1, WS_TAIL=128), mx),                # 224 KB of ring
                     (dict(WS, BM=256, WS_HALF=1, WS_TAIL=64, STAGES=5), mx),
                     (dict(WS, BM=256, WS_HALF=1, WS_TAIL=64, DREGS=168), i4),    # no registers given back
                     (dict(WS, BM=256, WS_HALF=1, WS_TAIL=64, WT=8), mx),
                     (dict(WS, WS_WARPS=8, WGN=2, BM=256, MAXNREG=128, WS_HALF=1, WS_TAIL=64), i4),
                     (dict(WS, XTMA=2, DP=4, WS_HALF=1, WS_TAIL=64), mx),
                     (dict(WS, BM=96), mx), (dict(WS, BM=96), nv), (dict(WS, WS_WARPS=2), mx), (dict(WS, DW=3), mx),
                     (dict(WS, STAGES=9), mx), (dict(WS, DP=2, XTMA=0), mx), (dict(WS, MAXNREG=300), mx),
                     (dict(WS, WT=4), mx), (dict(WS, XTMA=2, WT=8), mx), (dict(WS, WS_ACT=2), mx),
                     (dict(WS, XTMA=0, DP=1, XCP=1, WS_ACT=1), mx), (dict(WS, WS_HALF=3), mx),
                     (dict(WS, BM=64, WS_HALF=2), mx),                                  # quarters of 16 rows
                     (dict(WS, XTMA=0, DP=1, XCP=1, WS_HALF=1), i4),
                     (dict(WS, WS_WARPS=8, PP=1, XTMA=2, DP=1, DREGS=128, MAXNREG=128, STAGES=3, WS_HALF=1), mx),
                     (dict(WS, BM=512, STAGES=2), mx),                                  # 512 rows need WGN 2
                     (dict(WS, WGN=2, BM=512, STAGES=2, DW=4), mx),                     # WGN 2 needs 8 MMA warps
                     (dict(WS, WS_WARPS=8, WGN=2, BM=512, STAGES=3, DW=4), mx),         # 216 KB of ring
                     (dict(WS, WS_WARPS=8, WGN=2, BM=512, STAGES=2), mx),               # 16 warps at 168 registers
                     (dict(WS, WS_WARPS=8, WGN=2, BM=512, STAGES=2, DW=4, MAXNREG=144), mx),   # under 128 + 26
                     (dict(WS, WS_WARPS=8, WGN=2, XTMA=2, DP=4, MAXNREG=128), mx), (dict(WS, WGN=3), mx),
                     (dict(WS, WS_WARPS=8, PP=1, XTMA=2, DP=1, DREGS=128, MAXNREG=128, STAGES=3, WS_ACT=1), mx),
                     ({k: v for k, v in WS.items() if k != "DEQUANT_MM"}, mx),
                     (WS, layout_for("int4", 512, 256, 32)),
                     (dict(WS, BK=128, STAGES=3), layout_for("int4", 512, 256, 64))):
        with pytest.raises(ValueError, match="WS"):
            check_config(bad, lay)


def test_ws_falls_back_to_dequant_where_w4_ws_cannot_run(monkeypatch):
    """A WS entry on a call w4_ws cannot serve (here: the interpreter, or fp16) runs its DEQUANT_MM keys, the same
    result as the DEQUANT_MM entry alone; where it can, moe_ws.apply_ws with the whole entry."""
    from oracle_triton import moe_ws
    from oracle_triton.moe_ws import ws_fallback

    assert ws_fallback(WS) == DQ
    t, _ = moe_pair("mxfp4", 8, 256, 128, 2, "w4a16_mx", "bf16", {}, activation="swigluoai", bias=True, device=DEV)
    x = torch.randn(4, 256, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(4, 8, 2, DEV)
    seen = []
    monkeypatch.setattr(moe_ws, "apply_ws", lambda moe, xx, ww, ii, m, k, cfg: seen.append(cfg) or "ws")
    t.config = WS
    if not moe_ws.ws_ok(t, x):
        y = t.forward(x, w, ids)
        t.config = DQ
        assert torch.equal(y, t.forward(x, w, ids)) and seen == []
        t.config = WS
    monkeypatch.setattr(moe_ws, "ws_ok", lambda moe, xx, bk: True)
    assert t.forward(x, w, ids) == "ws" and seen == [WS]


def test_ws_words_by_tma_reach_the_kernel(monkeypatch):
    """WT: each MoE GEMM hands w4_ws_kernel WT and a descriptor of the experts' own words as [E N, K/8] (no copy)
    in [16 x WS_WARPS, BK/8] boxes, built once per box shape and kept on the weight; without WT none; on words a
    TMA cannot cover (not one contiguous block) WT 0, the words through registers; INT4 experts as GPTQ's words
    with their zero points."""
    from oracle_triton import fastlaunch, moe_ws

    seen: list[dict] = []
    monkeypatch.setattr(fastlaunch, "launch", lambda fn, grid, warps, stream, **kw: seen.append(kw))
    t, _ = moe_pair("mxfp4", 8, 256, 128, 2, "w4a16_mx", "bf16", {}, activation="swigluoai", bias=True, device=DEV)
    blocks = torch.tensor([0, 3, -1], dtype=torch.int32, device=DEV)
    a = torch.randn(3 * 128, 256, dtype=torch.bfloat16, device=DEV)
    y = torch.empty(3 * 128, t.rows, dtype=torch.bfloat16, device=DEV)
    for cfg in (dict(WS, WT=8), dict(WS, WT=12), dict(WS, WT=8, WS_WARPS=8), WS):
        moe_ws._ws_gemm(a, t.w13, moe_ws._epilogue(t, 0), y, blocks, None, 4, cfg)
    first, second, eight, plain = seen
    words = t.w13.weight.view(torch.int32)
    assert first["WT"] == 8 and second["WT"] == 12 and plain["WT"] == 0 and plain["w_desc"] is None
    desc = first["w_desc"]
    assert tuple(desc.shape) == (8 * t.rows, 256 // 8) and desc.base.data_ptr() == words.data_ptr()
    assert desc.block_shape == [64, 8] and second["w_desc"] is desc and eight["w_desc"].block_shape == [128, 8]
    strided = torch.zeros(8, t.rows, 256, dtype=torch.uint8, device=DEV)[:, :, :128]        # the same bytes, rows 256 apart
    strided.copy_(t.w13.weight)
    monkeypatch.setattr(t.w13, "weight", strided)
    moe_ws._ws_gemm(a, t.w13, moe_ws._epilogue(t, 0), y, blocks, None, 4, dict(WS, WT=8))
    assert seen[-1]["WT"] == 0 and seen[-1]["w_desc"] is None
    # INT4 experts: GPTQ's [E, K/8, N] words (KMAJOR 0) in [BK/8, 16 x WS_WARPS] boxes of [E K/8, N], each expert's
    # zero points at its stride
    i4, _ = moe_pair("int4", 8, 256, 128, 2, "w4a16_int4", "bf16", {}, symmetric=False, device=DEV)
    moe_ws._ws_gemm(a, i4.w13, moe_ws._epilogue(i4, 0), y, blocks, None, 4, dict(WS, WT=8))
    launch = seen[-1]
    words, zero = i4.w13.weight, i4.w13.zero
    assert launch["KMAJOR"] == 0 and launch["HAS_ZERO"] and launch["z_ptr"] is zero
    assert launch["stride_ze"] == zero.stride(0) and launch["stride_zk"] == zero.stride(1)
    assert (launch["N"], launch["K"], launch["stride_wk"], launch["stride_wn"]) == (i4.rows, 256, i4.rows, 1)
    assert launch["stride_we"] == words.stride(0) and launch["stride_sn"] == 1
    assert launch["w_desc"].block_shape == [8, 64] and tuple(launch["w_desc"].shape) == (8 * 256 // 8, i4.rows)


def test_ws_act_pairs_put_gate_and_up_in_one_thread():
    """WS_ACT's index contract, with torch's row-major reshape / permute (Gluon's): w4_ws._pair_rows moves decoded row
    16a + 2q + h to row 16a + 8h + q; the epilogue's weight-row formula names, for every accumulator row, the row
    that landed there; its split of rows r / r + 8 (one thread's, in wgmma's accumulator layout) gives pair p = 8a +
    q's gate (FC1 row 2p) and up (2p + 1), stored at column p of the tile's BN / 2 (interleaved swigluoai)."""
    bn, c = 64, 3
    tile = torch.arange(bn).repeat_interleave(c).reshape(bn, c)           # each row holds its own index
    moved = tile.reshape(bn // 16, 8, 2, c).permute(0, 2, 1, 3).reshape(bn, c)      # _pair_rows
    r = torch.arange(bn)
    assert torch.equal(moved[:, 0], (r // 16) * 16 + 2 * (r % 8) + (r % 16) // 8)    # the epilogue's `on`
    assert all(((r[i] // 8) % 2 == 0) == (moved[i, 0] % 2 == 0) for i in range(bn))  # rows r: gates, r + 8: ups
    pairs = moved[:, 0].reshape(bn, 1).reshape(bn // 16, 2, 8, 1).permute(0, 2, 3, 1)  # _store_act's split
    gate, up = pairs[..., 0].reshape(bn // 2), pairs[..., 1].reshape(bn // 2)
    p = torch.arange(bn // 2)
    assert torch.equal(gate, 2 * p) and torch.equal(up, 2 * p + 1)


def test_ws_two_warpgroups_on_a_blocks_rows_launch_64_weight_rows_a_program(monkeypatch):
    """WGN 2 (8 MMA warps as two warpgroups on the halves of a block's rows): the launch carries WGN 2 and 8 warps, its
    grid covers N in 64-row programs (16 x 8 / 2), its WT boxes are 64 weight rows, and 512-pair blocks reach TMA
    as 256-row boxes (a box's limit; the kernel brings a tile as two); without WGN, 128-row programs at 8 warps."""
    from oracle_triton import fastlaunch, moe_ws

    seen: list = []
    monkeypatch.setattr(fastlaunch, "launch", lambda fn, grid, warps, stream, **kw: seen.append((grid, warps, kw)))
    t, _ = moe_pair("mxfp4", 8, 256, 128, 2, "w4a16_mx", "bf16", {}, activation="swigluoai", bias=True, device=DEV)
    blocks = torch.tensor([0, 3, -1], dtype=torch.int32, device=DEV)
    a = torch.randn(3 * 512, 256, dtype=torch.bfloat16, device=DEV)
    y = torch.empty(3 * 512, t.rows, dtype=torch.bfloat16, device=DEV)
    two = dict(WS, WS_WARPS=8, WGN=2, BM=512, STAGES=2, DW=4)
    for cfg in (two, dict(two, WT=8), dict(WS, WS_WARPS=8, MAXNREG=128)):
        moe_ws._ws_gemm(a, t.w13, moe_ws._epilogue(t, 0), y, blocks, None, 4, cfg)
    (grid, warps, kw), (_, _, wt), (grid1, warps1, kw1) = seen
    assert grid == (-(-t.rows // 64), 3, 1) and warps == 8 and kw["WGN"] == 2 and kw["BM"] == 512
    assert kw["x_desc"].block_shape == [256, 64] and wt["w_desc"].block_shape == [64, 8]
    assert grid1 == (-(-t.rows // 128), 3, 1) and warps1 == 8 and kw1["WGN"] == 1
    assert kw1["x_desc"].block_shape == [128, 64]


def test_ws_persistent_grid_over_the_blocks(monkeypatch):
    """PT 1 in the MoE: both GEMMs launch with PT 1 on a 1-D grid of min(programs, output tiles) (launch.pt_programs:
    the tiles counted over the static bound on the blocks; the kernel stops at the first block without an expert);
    a K too short for the ring (2 K tiles, 4 slots) keeps the one-tile grid."""
    from oracle_triton import fastlaunch, launch, moe_ws

    seen: list = []
    monkeypatch.setattr(fastlaunch, "launch", lambda fn, grid, warps, stream, **kw: seen.append((grid, kw)))
    monkeypatch.setattr(launch, "PT_PROGRAMS", 5)
    t, _ = moe_pair("mxfp4", 8, 256, 128, 2, "w4a16_mx", "bf16", {}, activation="swigluoai", bias=True, device=DEV)
    blocks = torch.tensor([0, 3, -1], dtype=torch.int32, device=DEV)
    a = torch.randn(3 * 256, 256, dtype=torch.bfloat16, device=DEV)
    y = torch.empty(3 * 256, t.rows, dtype=torch.bfloat16, device=DEV)
    cfg = dict(WS, BM=256, PT=1)
    moe_ws._ws_gemm(a, t.w13, moe_ws._epilogue(t, 0), y, blocks, None, 4, cfg)
    moe_ws._ws_gemm(a, t.w13, moe_ws._epilogue(t, 0), y, blocks, None, 4, dict(cfg, STAGES=5))      # 4 K tiles of 64, 5 slots
    (grid, kw), (grid1, kw1) = seen
    assert grid == (5, 1, 1) and kw["PT"] == 1 and kw["ids_ptr"] is blocks
    assert grid1 == (-(-t.rows // 64), 3, 1) and kw1["PT"] == 0


def test_ws_half_hands_both_gemms_the_sorted_ids(monkeypatch):
    """WS_HALF 1 / 2: FC1 and FC2 each get HALF 1 / 2 and the alignment's sorted ids (whose row BM / 2 of a block
    says if its second half holds a pair, row BM / 4 if its second quarter does); without it, or on a form the
    kernel refuses it on (XTMA 0, PP), HALF 0 and no ids. WS_TAIL: both get TAIL, blocks of BM + WS_TAIL rows from
    the alignment (6 pairs over 8 experts: 7 blocks), and the tail rows' TMA descriptor."""
    from oracle_triton import fastlaunch, moe_ws

    seen: list[dict] = []
    monkeypatch.setattr(fastlaunch, "launch", lambda fn, grid, warps, stream, **kw: seen.append(kw))
    t, _ = moe_pair("mxfp4", 8, 256, 128, 2, "w4a16_mx", "bf16", {}, activation="swigluoai", bias=True, device=DEV)
    x = torch.randn(3, 256, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(3, 8, 2, DEV)
    for cfg, half in ((dict(WS, WS_HALF=1), 1), (dict(WS, WS_HALF=1, WS_ACT=1), 1), (dict(WS, WS_HALF=2), 2), (WS, 0),
                      (dict(WS, XTMA=0, DP=1, XCP=1, WS_HALF=1), 0), (dict(WS, WS_HALF=1, WS_TAIL=64), 1),
                      (dict(WS, WS_HALF=2, WS_TAIL=32, WS_ACT=1), 2)):
        seen.clear()
        monkeypatch.setattr(t, "_activation", lambda y1, rid, ids_first=False: torch.zeros(
            y1.shape[0], t.inter, dtype=t.dtype, device=DEV))
        moe_ws.apply_ws(t, x, w.reshape(-1).float(), ids.reshape(-1).contiguous(), 3, 2, cfg)
        fc1, fc2 = seen
        assert fc1["HALF"] == fc2["HALF"] == half, cfg
        # WS_TAIL: both GEMMs on blocks of BM + tail rows (the alignment's), the tail's boxes of tail rows
        tail, blocks = cfg.get("WS_TAIL", 0), -(-6 // (cfg["BM"] + cfg.get("WS_TAIL", 0))) + 6
        assert fc1["TAIL"] == fc2["TAIL"] == tail and fc1["BM"] == cfg["BM"], cfg
        assert fc1["M"] == fc2["M"] == blocks * (cfg["BM"] + tail) == fc2["half_ptr"].numel() if half else True
        assert (fc1["t_desc"] is None) == (tail == 0) and (not tail or fc1["t_desc"].block_shape == [tail, 64])
        if half:
            assert fc1["half_ptr"] is fc2["half_ptr"] is fc2["sid_ptr"]
            assert fc1["sid_ptr"] is None and fc1["half_ptr"].dtype == torch.int32
        else:
            assert fc1["half_ptr"] is None and fc2["half_ptr"] is None


def _contract_gemm(dense: dict, seen: list, facts: dict | None = None):
    """moe_ws._ws_gemm as w4_ws_kernel's MoE mode is documented, in torch: block b's rows (BM of them, or with
    WS_HALF the first BM / 2 where row BM / 2 of its sorted ids is the sentinel, with WS_HALF 2 the first BM / 4
    where row BM / 4 is; with WS_TAIL blocks of BM + WS_TAIL rows, all of them where row BM holds a pair) times its
    expert's dense weights; with qs (w4_ws's QACT: FC1 with act) the activation's rows then rounded through NVFP4
    with that static scale as launch.quantize_activations rounds them (facts: the layer's), or with qact 2 the
    largest |value| of the rows holding a pair merged into the int32 state qs[0] as its fp32 bits
    (+ bias); FC1 writes them in block order (with act, swigluoai of the bf16-rounded interleaved pairs), FC2
    scatters them to the pairs' rows; a block labelled -1 is skipped. Rows it does not compute are left as they
    were. act: (kind, limit, alpha, beta), swigluoai on interleaved rows (kind 0) or silu on halves (kind 1)."""
    def gemm(a, w, epi, y, block_expert, sorted_ids, t, cfg, act=None, half_ids=None, qs=None, qact=0):
        bias, has_bias, _ = epi
        if has_bias == 2:       # NVFP4's per-expert factor: the dense reference weights hold g already
            bias = None
        assert has_bias == 2 or has_bias == int(bias is not None)
        bm, weights = cfg["BM"], dense[id(w)].float()
        half = bool(cfg.get("WS_HALF")) and half_ids is not None
        bs = bm + (cfg.get("WS_TAIL", 0) if half else 0)        # WS_TAIL: blocks of BM + tail rows
        for b, e in enumerate(block_expert.tolist()):
            if e < 0:
                continue
            rows = bm // 2 if half and int(half_ids[b * bs + bm // 2]) >= t else bm
            if cfg.get("WS_HALF") == 2 and rows < bm and int(half_ids[b * bs + bm // 4]) >= t:
                rows = bm // 4
            if bs > bm and int(half_ids[b * bs + bm]) < t:     # the tail holds a pair: multiplied too
                rows = bs
            seen.append(rows)
            r = slice(b * bs, b * bs + rows)
            out = a[r].float() @ weights[e].T + (bias[e].float() if bias is not None else 0.0)
            if act is not None:
                kind, limit, alpha, beta = act
                v = out.to(torch.bfloat16).float()
                if kind == 0:
                    g, u = v[:, 0::2].clamp(max=limit), v[:, 1::2].clamp(-limit, limit)
                    y[r] = (g * torch.sigmoid(alpha * g) * (u + beta)).to(y.dtype)
                else:
                    g, u = v.chunk(2, dim=1)
                    y[r] = (g * torch.sigmoid(g) * u).to(y.dtype)
                if qact == 2:       # the amax of the rows holding a pair, merged into qs[0] as fp32 bits
                    live = y[r][half_ids[r] < t].float().abs()
                    amax = live.max() if live.numel() else torch.zeros((), device=y.device)
                    qs[0] = torch.maximum(qs[0], amax.reshape(1).view(torch.int32)[0])
                elif qs is not None:
                    from oracle_triton.formats import ACT_NVFP4
                    from oracle_triton.launch import quantize_activations

                    y[r] = quantize_activations(y[r].contiguous(), ACT_NVFP4, qs, facts)
            elif sorted_ids is not None:
                pairs = sorted_ids[r].long()
                keep = pairs < t
                y[pairs[keep]] = out[keep].to(y.dtype)
            else:
                y[r] = out.to(y.dtype)
    return gemm


_EMPTY = torch.empty


def _nan_empty(*size, **kw):
    """torch.empty with every fresh float buffer NaN: a row a launch leaves unwritten cannot pass for zeros."""
    out = _EMPTY(*size, **kw)
    return out.fill_(float("nan")) if out.is_floating_point() else out


def _skewed_call(m: int):
    """x [m, 256], router weights and ids for m tokens x top-4 over 8 experts: all but the last m // 15 tokens on
    experts 0-3 (whole blocks there), those on experts 4-7 (a few pairs each)."""
    x = torch.randn(m, 256, dtype=torch.bfloat16, device=DEV)
    w, _ = routing(m, 8, 4, DEV)
    ids = torch.stack([torch.randperm(4) + (0 if n < m - m // 15 else 4) for n in range(m)]).to(torch.int32).to(DEV)
    return x, w, ids


@pytest.mark.parametrize("activation,zero_pad,half,bm,ws_act", [
    ("swigluoai", True, 0, 256, 1), ("swigluoai", False, 0, 256, 1), ("swigluoai", False, 1, 256, 1),
    ("silu", False, 1, 256, 1), ("silu", False, 1, 256, 0), ("swigluoai", False, 1, 512, 1),
    ("swigluoai", False, 2, 256, 1), ("silu", False, 1, (128, 64), 1), ("swigluoai", False, 2, (128, 64), 1),
    ("silu", False, 2, (128, 32), 0)])
def test_ws_padding_rows_reach_nothing(activation, zero_pad, half, bm, ws_act, monkeypatch):
    """apply_ws's launches on their contracts (the GEMMs as _contract_gemm, every other launch the real kernel in
    Triton's interpreter), every fresh float buffer filled with NaN: with the gather's zeros off (ZERO_PADDING) and
    with WS_HALF (whose blocks leave their second half's rows unwritten in FC1's output), the result matches
    oracle-emulation, so no padding row's value reaches the output (the WS_ACT epilogue on interleaved swigluoai and
    on silu's halves, and the activation launch, all taken). 256-pair blocks on 150 tokens x top-4 over 8 experts, 140 of them routed to experts 0-3:
    those experts' blocks hold 140 pairs (both halves computed), the others' 10 (the first half alone); 512-pair
    blocks (WGN 2) on 300 tokens, 280 routed so; WS_TAIL (bm = (BM, tail)): 128 + 64 / 32-pair blocks, experts 0-3's
    blocks with their tail rows multiplied (140 pairs), the others' on a half or a quarter."""
    from oracle_triton import moe_ws

    bm, tail = bm if isinstance(bm, tuple) else (bm, 0)
    monkeypatch.setattr(moe_ws, "SILU_IN_FC1", True)
    t, ref = moe_pair("mxfp4", 8, 256, 128, 4, "w4a16_mx", "bf16", {}, activation=activation,
                      activation_params={"alpha": 1.702, "limit": 7.0} if activation == "swigluoai" else None,
                      bias=True, device=DEV)
    m = 300 if bm == 512 else 150
    x, w, ids = _skewed_call(m)

    seen: list[int] = []
    monkeypatch.setattr(moe_ws, "_ws_gemm", _contract_gemm({id(t.w13): ref.w13, id(t.w2): ref.w2}, seen))
    monkeypatch.setattr(moe_ws, "ZERO_PADDING", zero_pad)
    monkeypatch.setattr(torch, "empty", _nan_empty)
    cfg = dict(WS, BM=bm, WS_ACT=ws_act, WS_HALF=half, **(dict(WS_TAIL=tail) if tail else {}),
               **(dict(WS_WARPS=8, WGN=2, STAGES=2, DW=4) if bm == 512 else {}))
    y = moe_ws.apply_ws(t, x, w.reshape(-1).float(), ids.reshape(-1).contiguous(), m, 4, cfg)
    monkeypatch.undo()
    assert not y.isnan().any() and rel(y, ref.apply(x, w, ids)) < 1e-2
    assert (bm // 2 in seen) == (half == 1) and (bm + tail) in seen    # both kinds of block where WS_HALF is on
    assert (bm // 4 in seen) == (half == 2)                     # WS_HALF 2: the 10-pair blocks on a quarter


@pytest.mark.parametrize("live_rows", [False, True, "tiles"])
def test_ws_nvfp4_w4a4_rounds_both_inputs_and_keeps_padding_out_of_the_scale(live_rows, monkeypatch):
    """NVFP4 W4A4 experts on apply_ws (the GEMMs as _contract_gemm, every other launch the real kernel in Triton's
    interpreter, every fresh float buffer NaN): FC1's input and FC2's are rounded through NVFP4 with dynamic
    per-tensor scales, and WS_ACT asked for still runs the activation in its own launch (its zeros on the padding
    rows; FC1's epilogue would leave NaN there and in the amax): the result within 1e-2 of oracle-emulation and no
    NaN, on 256-pair blocks with WS_HALF. Without the roundings the result is 3-10x further off (checked here).
    With moe_ws.ROUND_LIVE_ROWS FC2's input is rounded on the rows that hold a pair only: the padding rows stay
    NaN there, and the result is the same bits; with moe_ws.ROUND_LIVE_TILES ("tiles") on the 16-row tiles that
    hold a pair only, the same bits too."""
    from oracle_triton import moe_ws

    monkeypatch.setattr(moe_ws, "ROUND_LIVE_ROWS", live_rows is True)
    monkeypatch.setattr(moe_ws, "ROUND_LIVE_TILES", live_rows == "tiles")

    t, ref = moe_pair("nvfp4", 8, 256, 128, 4, "w4a4_nvfp4", "nvfp4", {}, device=DEV)
    m = 150
    x, w, ids = _skewed_call(m)

    def run(round_inputs: bool) -> torch.Tensor:
        with monkeypatch.context() as mp:
            mp.setattr(moe_ws, "_ws_gemm", _contract_gemm({id(t.w13): ref.w13, id(t.w2): ref.w2}, []))
            mp.setattr(moe_ws, "ZERO_PADDING", False)
            if not round_inputs:
                mp.setattr(t, "_round", lambda idx, a: (a, None))
            mp.setattr(torch, "empty", _nan_empty)
            return moe_ws.apply_ws(t, x, w.reshape(-1).float(), ids.reshape(-1).contiguous(), m, 4,
                                   dict(WS, BM=256, WS_ACT=1, WS_HALF=1))

    expect = ref.apply(x, w, ids)
    y = run(True)
    assert not y.isnan().any() and rel(y, expect) < 1e-2, rel(y, expect)
    if live_rows:       # the same bits as rounding every block row
        with monkeypatch.context() as mp:
            mp.setattr(moe_ws, "ROUND_LIVE_ROWS", False)
            mp.setattr(moe_ws, "ROUND_LIVE_TILES", False)
            assert torch.equal(run(True), y)
    assert rel(run(False), expect) > 3 * rel(y, expect)
    assert moe_ws.fused_act(t, dict(WS, WS_ACT=1)) is None          # a dynamic FC2 scale: the activation launch
    t.static[1] = torch.ones(1, device=DEV)                         # a checkpoint's static one: FC1's epilogue
    assert moe_ws.fused_act(t, dict(WS, WS_ACT=1)) == (1, 0.0, 0.0, 0.0)


def test_ws_qact_rounds_fc2s_input_in_fc1s_epilogue(monkeypatch):
    """WS_QACT 2 (NVFP4 W4A4 with static input scales, as a ModelOpt checkpoint carries them): FC1 (as _contract_gemm,
    the rest the real launches in the interpreter, fresh float buffers NaN) gets the activation and FC2's static
    scale (w4_ws's QACT) and no rounding launch runs between the GEMMs; the result is the same bits as the entry
    without WS_QACT (the activation in FC1, then the rounding launch) and within 1e-2 of oracle-emulation with the
    same static scales. WS_ACT off takes no QACT, nor does WS_QACT 1 (the dynamic scales' form: the rounding launch
    runs); the entry check wants WS_ACT."""
    from oracle_triton import moe_ws
    from oracle_triton.formats import check_config, layout_for

    t, ref = moe_pair("nvfp4", 8, 256, 128, 4, "w4a4_nvfp4", "nvfp4", {}, device=DEV,
                      input_scales=(4.5 / 2688, 1.5 / 2688))
    m = 150
    x, w, ids = _skewed_call(m)
    calls: list = []

    def run(cfg: dict) -> torch.Tensor:
        contract = _contract_gemm({id(t.w13): ref.w13, id(t.w2): ref.w2}, [], t.facts)

        def gemm(*a, **kw):
            calls.append(kw.get("qs", a[10] if len(a) > 10 else None))
            return contract(*a, **kw)

        rounds = []
        real_round = t._round
        with monkeypatch.context() as mp:
            mp.setattr(moe_ws, "_ws_gemm", gemm)
            mp.setattr(moe_ws, "ZERO_PADDING", False)
            mp.setattr(t, "_round", lambda idx, a: rounds.append(idx) or real_round(idx, a))
            mp.setattr(moe_ws, "ROUND_LIVE_TILES", False)    # the rounding launch through _round (counted here)
            mp.setattr(torch, "empty", _nan_empty)
            y = moe_ws.apply_ws(t, x, w.reshape(-1).float(), ids.reshape(-1).contiguous(), m, 4, cfg)
        return y, rounds

    calls.clear()
    y, rounds = run(dict(WS, BM=128, WS_ACT=1, WS_HALF=1, WS_TAIL=64, WS_QACT=2))
    assert rounds == [0] and calls[0] is t.static[1] and calls[1] is None     # FC1 rounds FC2's input; no launch
    assert not y.isnan().any() and rel(y, ref.apply(x, w, ids)) < 1e-2, rel(y, ref.apply(x, w, ids))
    calls.clear()
    y0, rounds = run(dict(WS, BM=128, WS_ACT=1, WS_HALF=1, WS_TAIL=64))
    assert rounds == [0, 1] and calls == [None, None] and torch.equal(y0, y)
    calls.clear()
    run(dict(WS, BM=128, WS_HALF=1, WS_QACT=2))                        # no WS_ACT: the launches as before
    assert calls == [None, None]
    calls.clear()
    _, rounds = run(dict(WS, BM=128, WS_ACT=1, WS_HALF=1, WS_QACT=1))  # WS_QACT 1: a static scale's rounding launch
    assert rounds == [0, 1] and calls == [None, None]
    lay = layout_for("nvfp4", 256, 256)
    check_config(dict(WS, WS_ACT=1, WS_QACT=1), lay)
    check_config(dict(WS, WS_ACT=1, WS_QACT=2), lay)
    for bad in (dict(WS, WS_QACT=1), dict(WS, WS_ACT=1, WS_QACT=3)):
        with pytest.raises(ValueError, match="WS_QACT"):
            check_config(bad, lay)


def test_ws_qact_takes_a_dynamic_fc2_amax_in_fc1s_epilogue(monkeypatch):
    """WS_QACT with dynamic activation scales (the Qwen3-235B bench row's form): FC1 (as _contract_gemm, the rest
    the real launches in the interpreter, fresh float buffers NaN) applies the activation and merges the largest
    |value| of the rows holding a pair into a zeroed int32 state (w4_ws's QACT 2); no activation launch and no
    amax over FC2's input run; the rounding launch takes its scale from the state (launch.scale_from_amax), which
    is that amax / (6 x 448) as computed here from FC1's output on the pairs' rows, and leaves the state zero for
    the next call. The result is within 1e-2 of oracle-emulation with no NaN (the padding rows, NaN here, reach
    neither the amax nor the output), on 128 + 64-pair blocks with halves, and the same bits on a second call.
    Without WS_QACT a dynamic FC2 scale keeps the activation launch. moe_ws.ROUND_LIVE_TILES gives the same bits.
    """
    from oracle_triton import launch, moe_ws

    t, ref = moe_pair("nvfp4", 8, 256, 128, 4, "w4a4_nvfp4", "nvfp4", {}, device=DEV)
    m = 150
    x, w, ids = _skewed_call(m)
    cfg = dict(WS, BM=128, WS_ACT=1, WS_HALF=1, WS_TAIL=64, WS_QACT=1)
    seen: dict = {}

    def run() -> torch.Tensor:
        contract = _contract_gemm({id(t.w13): ref.w13, id(t.w2): ref.w2}, [], t.facts)

        def gemm(*a, **kw):
            if len(a) > 8 and a[8] is not None:    # FC1: its output, what it merged, the state it merged into
                contract(*a, **kw)
                seen.update(inter=a[3].clone(), sorted_ids=a[9], blocks=a[4], state=a[10], bits=int(a[10][0]),
                            qact=a[11])
                return None
            return contract(*a, **kw)

        def no_activation(*a, **kw):
            raise AssertionError("the activation launch ran under WS_QACT")

        real_scale = launch.scale_from_amax
        with monkeypatch.context() as mp:
            mp.setattr(moe_ws, "_ws_gemm", gemm)
            mp.setattr(moe_ws, "ZERO_PADDING", False)
            mp.setattr(t, "_activation", no_activation)
            mp.setattr(t, "_act_scale", lambda idx, a: pytest.fail("an amax launch over FC2's input"))
            mp.setattr(t, "_round", lambda idx, a: (launch.quantize_activations(
                a, t.act, launch.tensor_scale(a, 2688.0) if a.numel() <= launch.TENSOR_SCALE_MAX else
                pytest.fail("FC2's input through _round"), t.facts), None))
            mp.setattr(moe_ws, "scale_from_amax", lambda st, div: seen.update(
                scale=real_scale(st, div).clone()) or seen["scale"])
            mp.setattr(torch, "empty", _nan_empty)
            return moe_ws.apply_ws(t, x, w.reshape(-1).float(), ids.reshape(-1).contiguous(), m, 4, cfg)

    y = run()
    assert seen["qact"] == 2 and seen["state"].dtype == torch.int32
    bs = cfg["BM"] + cfg["WS_TAIL"]         # the rows holding a pair: below the sentinel, in a block of an expert
    rows = (seen["sorted_ids"] < m * 4) & (seen["blocks"] >= 0).repeat_interleave(bs)[:seen["sorted_ids"].numel()]
    live = seen["inter"][rows].float()
    assert not live.isnan().any() and seen["inter"].isnan().any()      # NaN padding rows, left out of the amax
    amax = live.abs().max()
    assert seen["bits"] == int(amax.reshape(1).view(torch.int32)[0])
    assert float(seen["scale"]) == float(amax / torch.tensor(2688.0))
    assert int(seen["state"].abs().sum()) == 0                          # zero again for the next call
    expect = ref.apply(x, w, ids)
    assert not y.isnan().any() and rel(y, expect) < 1e-2, rel(y, expect)
    assert torch.equal(run(), y)
    monkeypatch.setattr(moe_ws, "ROUND_LIVE_TILES", True)      # the rounding on the live 16-row tiles: same bits
    assert torch.equal(run(), y)
    assert moe_ws.fused_act(t, dict(WS, WS_ACT=1)) is None             # no WS_QACT: the activation launch
    assert moe_ws.fused_act(t, cfg) == (1, 0.0, 0.0, 0.0)


def test_rounding_the_live_rows_leaves_the_padding_rows_alone(monkeypatch):
    """launch.quantize_activations with row ids (ROUND_LIVE_ROWS' call): the rows whose id is >= 0 get the same
    NVFP4 values as without ids, the others are neither written (a NaN-filled buffer keeps its NaN) nor read (NaN
    there does not reach the rest)."""
    from oracle_triton.formats import ACT_NVFP4
    from oracle_triton.launch import device_facts, quantize_activations

    facts = device_facts(torch.device(DEV))
    a = torch.randn(40, 128, dtype=torch.bfloat16, device=DEV)
    rid = torch.tensor([3, -1, 0, 7] * 10, dtype=torch.int32, device=DEV)
    scale = torch.tensor([0.01], dtype=torch.float32, device=DEV)
    whole = quantize_activations(a, ACT_NVFP4, scale, facts)
    a[rid < 0] = float("nan")
    monkeypatch.setattr(torch, "empty_like", lambda t, **kw: torch.full_like(t, float("nan"), **kw))
    live = quantize_activations(a, ACT_NVFP4, scale, facts, rid)
    keep = rid >= 0
    assert torch.equal(live[keep], whole[keep]) and live[~keep].isnan().all()


def test_rounding_the_live_tiles_skips_the_padding_tiles_whole(monkeypatch):
    """launch.quantize_activations with row ids and rid_tiles (ROUND_LIVE_TILES' call): every row of a 16-row tile
    holding an id >= 0 gets the same NVFP4 values as without ids, padding rows included; the tiles with none are
    not written (the buffer's sentinel stays) and not read (NaN there reaches nothing)."""
    from oracle_triton.formats import ACT_NVFP4
    from oracle_triton.launch import device_facts, quantize_activations

    facts = device_facts(torch.device(DEV))
    a = torch.randn(56, 128, dtype=torch.bfloat16, device=DEV)
    rid = torch.full((56,), -1, dtype=torch.int32, device=DEV)
    rid[3] = 5                          # tile 0: one live row; tile 1 (rows 16-31): none; tile 2: all; tile 3: a tail
    rid[32:48] = 2
    rid[50] = 0
    scale = torch.tensor([0.01], dtype=torch.float32, device=DEV)
    whole = quantize_activations(a, ACT_NVFP4, scale, facts)
    a[16:32] = float("nan")
    monkeypatch.setattr(torch, "empty_like", lambda t, **kw: torch.full_like(t, 12345.0, **kw))
    tiles = quantize_activations(a, ACT_NVFP4, scale, facts, rid, rid_tiles=True)
    dead = torch.zeros(56, dtype=torch.bool, device=DEV)
    dead[16:32] = True
    assert torch.equal(tiles[~dead], whole[~dead]) and bool((tiles[dead] == 12345.0).all())


def test_ws_nvfp4_decode_is_exact_and_the_epilogue_applies_g(monkeypatch):
    """NVFP4 on WS (moe_ws's module docstring): every E2M1 value x every finite E4M3 scale x NV_DECODE_G is a bf16
    number (the decode rounds nothing; the values from the format's table, the scales from torch's float8_e4m3fn),
    the fused decoder's factor (largest scale x NV_DECODE_G) stays under its 2.0, and both launches get g_ptr =
    NV_DECODE_G for every expert, b_ptr = each expert's g / NV_DECODE_G at stride 1 with HAS_BIAS 2, so the epilogue
    restores value x scale x g exactly (a power-of-two factor); an MXFP4 layer keeps its bias (HAS_BIAS 1)."""
    from oracle_triton import fastlaunch, moe_ws

    e2m1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
    e2m1 = torch.cat([e2m1, -e2m1])
    scales = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).double()
    scales = scales[scales.isfinite() & (scales >= 0)]
    decoded = e2m1[:, None] * scales[None, :] * moe_ws.NV_DECODE_G
    assert torch.equal(decoded.to(torch.bfloat16).double(), decoded)
    assert scales.max() * moe_ws.NV_DECODE_G < 2.0
    assert float(torch.log2(torch.tensor(moe_ws.NV_DECODE_G))).is_integer()

    seen: list[dict] = []
    monkeypatch.setattr(fastlaunch, "launch", lambda fn, grid, warps, stream, **kw: seen.append(kw))
    t, _ = moe_pair("nvfp4", 8, 256, 128, 2, "w4a4_nvfp4", "nvfp4", {}, device=DEV)
    blocks = torch.tensor([0, 3, -1], dtype=torch.int32, device=DEV)
    a = torch.randn(3 * 128, 256, dtype=torch.bfloat16, device=DEV)
    y = torch.empty(3 * 128, t.rows, dtype=torch.bfloat16, device=DEV)
    for idx, p in ((0, t.w13), (1, t.w2)):
        moe_ws._ws_gemm(a if idx == 0 else a[:, :128], p, moe_ws._epilogue(t, idx), y, blocks, None, 4, WS)
        launch = seen[-1]
        assert launch["HAS_BIAS"] == 2 and launch["stride_be"] == 1 and launch["ELEM"] == 2
        assert torch.equal(launch["g_ptr"], torch.full((8,), moe_ws.NV_DECODE_G, device=DEV))
        assert torch.equal(launch["b_ptr"] * moe_ws.NV_DECODE_G, p.global_scale.float().reshape(-1))
    assert moe_ws._epilogue(t, 0)[0] is moe_ws._epilogue(t, 0)[0]        # made once a weight
    mx, _ = moe_pair("mxfp4", 8, 256, 128, 2, "w4a16_mx", "bf16", {}, bias=True, device=DEV)
    moe_ws._ws_gemm(a, mx.w13, moe_ws._epilogue(mx, 0), y, blocks, None, 4, WS)
    assert seen[-1]["HAS_BIAS"] == 1 and seen[-1]["b_ptr"] is mx.b13


def test_ws_act_runs_the_activation_in_fc1(monkeypatch):
    """WS_ACT 1 on gpt-oss's swigluoai (interleaved, with its limit) and, with moe_ws.SILU_IN_FC1 (on since R98a;
    off, silu keeps its own launch), on silu (halves, no limit): FC1's launch
    carries (kind, limit, alpha, beta) and writes FC2's input [block rows, I] itself, no activation launch; with
    WS_ACT 0, with activations by cp.async (XTMA 0: that decode loop does not pair rows), on silu with a limit or
    with WT (boxes of whole row ranges) or an intermediate size that half a tile (here 64 rows) does not divide, FC1
    writes its rows [block rows, 2I] and the activation launch runs (fused_act None)."""
    from oracle_triton import moe_ws

    calls = []
    monkeypatch.setattr(moe_ws, "_ws_gemm", lambda a, w, b, y, be, sid, t, cfg, act=None, *rest, **kw:
                        calls.append((tuple(y.shape), act)))
    silu_limit = {"limit": 7.0}
    silu, _ = moe_pair("mxfp4", 8, 256, 128, 2, "w4a16_mx", "bf16", {}, device=DEV)
    monkeypatch.setattr(moe_ws, "SILU_IN_FC1", False)
    assert moe_ws.fused_act(silu, dict(WS, WS_ACT=1)) is None       # silu's FC1 epilogue needs moe_ws.SILU_IN_FC1
    monkeypatch.setattr(moe_ws, "SILU_IN_FC1", True)
    for activation, params, inter, ws_act, fused in (
            ("swigluoai", None, 128, 1, (0, 7.0, 1.702, 1.0)), ("swigluoai", None, 128, 0, None),
            ("silu", None, 128, 1, (1, 0.0, 0.0, 0.0)), ("silu", silu_limit, 128, 1, None),
            ("silu", None, 128, "WT", None), ("silu", None, 160, "W8", None),
            ("swigluoai", None, 128, 2, None)):       # 2: WS_ACT on cp.async activations (XTMA 0)
        t, _ = moe_pair("mxfp4", 8, 256, inter, 2, "w4a16_mx", "bf16", {}, activation=activation, bias=True,
                        activation_params=params or ({"alpha": 1.702, "limit": 7.0} if activation == "swigluoai"
                                                     else None), device=DEV)
        acts = []
        monkeypatch.setattr(t, "_activation", lambda y1, rid, ids_first=False: acts.append(y1.shape) or torch.zeros(
            y1.shape[0], t.inter, dtype=t.dtype, device=DEV))
        x = torch.randn(3, 256, dtype=torch.bfloat16, device=DEV)
        w, ids = routing(3, 8, 2, DEV)
        calls.clear()
        cfg = {2: dict(WS, XTMA=0, DP=1, XCP=1, WS_ACT=1), "WT": dict(WS, WS_ACT=1, WT=8),
               "W8": dict(WS, WS_ACT=1, WS_WARPS=8, MAXNREG=128)}.get(ws_act, dict(WS, WS_ACT=ws_act))
        moe_ws.apply_ws(t, x, w.reshape(-1).float(), ids.reshape(-1).contiguous(), 3, 2, cfg)
        (fc1_shape, act), (fc2_shape, fc2_act) = calls
        assert fc2_act is None and fc2_shape == (6, 256)
        if fused:
            assert act == fused and fc1_shape[1] == t.inter and not acts
        else:
            assert act is None and fc1_shape[1] == t.rows and len(acts) == 1


def test_ws_ok_needs_what_w4_ws_reads():
    """moe_ws.ws_ok: refused off an sm_90 GPU or in the interpreter, for fp16 activations, K dims not multiples of
    the K tile, MXFP4 scales the fused decoder does not cover (moe.fused_ok, at load), NVFP4 experts with biases
    (the epilogue's operand is their global scale), INT4 groups the K tile does not divide and fp32 INT4 scales;
    NVFP4 experts (W4A16 and W4A4) and INT4 ones (zero points or not) otherwise served."""
    from oracle_triton.moe_ws import ws_ok

    t, _ = moe_pair("mxfp4", 8, 256, 128, 2, "w4a16_mx", "bf16", {}, device=DEV)
    assert t.fused_ok
    x = torch.randn(2, 256, dtype=torch.bfloat16, device=DEV)
    on_h100_class = DEV == "cuda" and torch.cuda.get_device_capability() == (9, 0)
    assert ws_ok(t, x) == on_h100_class
    assert not ws_ok(t, x.half())
    assert ws_ok(t, x, 128) == on_h100_class
    odd, _ = moe_pair("mxfp4", 8, 256, 96, 2, "w4a16_mx", "bf16", {}, device=DEV)
    assert not ws_ok(odd, x, 128)
    t._ws_ok = None
    t.fused_ok = False
    assert not ws_ok(t, x)
    for mode, act in (("w4a16_nvfp4", "bf16"), ("w4a4_nvfp4", "nvfp4")):
        nv, _ = moe_pair("nvfp4", 8, 256, 128, 2, mode, act, {}, device=DEV)
        assert ws_ok(nv, x) == on_h100_class and ws_ok(nv, x, 128) == on_h100_class and not ws_ok(nv, x.half())
        biased, _ = moe_pair("nvfp4", 8, 256, 128, 2, mode, act, {}, bias=True, device=DEV)
        assert not ws_ok(biased, x)
    for symmetric in (True, False):     # INT4 in GPTQ's layout, groups of 128: served where w4_ws runs
        i4, _ = moe_pair("int4", 8, 256, 128, 2, "w4a16_int4", "bf16", {}, device=DEV, symmetric=symmetric)
        assert ws_ok(i4, x) == on_h100_class and ws_ok(i4, x, 128) == on_h100_class
        assert not ws_ok(i4, x.half())
        i4._ws_ok = None
        i4.w2.scale = i4.w2.scale.float()           # fp32 group scales: the two-term product would round them
        assert not ws_ok(i4, x)
    narrow, _ = moe_pair("int4", 8, 256, 128, 2, "w4a16_int4", "bf16", {}, device=DEV, group=64)
    assert ws_ok(narrow, x) == on_h100_class and not ws_ok(narrow, x, 128)      # the K tile must divide a group
    tiny, _ = moe_pair("int4", 8, 256, 128, 2, "w4a16_int4", "bf16", {}, device=DEV, group=32)
    assert not ws_ok(tiny, x)


@pytest.mark.parametrize("by_pair,zero_pad,stream", [(False, True, False), (True, True, False), (False, False, False),
                                                     (True, False, False), (False, False, True), (True, True, True)])
def test_gather_rows_puts_each_pairs_row_in_block_order(by_pair, zero_pad, stream):
    """moe_ws.gather_rows_kernel (Triton's interpreter on CPU, or a GPU): block row j holds the row of pair sid[j] (its
    token's with top-k 3, or its own with the router weight on the input); zeros on padding (sid = T, and the ids out
    of range), or with ZERO_PAD off nothing written there; nothing in the rows of a block with no expert (whatever its
    sorted ids hold: no GEMM program reads them); rid[j] the pair's expert id, -1 on padding and those rows; the same
    with the rows stored streaming (STREAM, moe_ws.GATHER_STREAM: a cache hint, not a change of values)."""
    from oracle_triton.moe_ws import GATHER_ROWS, GATHER_COLS, gather_rows_kernel

    topk, t, bm, kdim = 3, 6, 4, 700
    ids = torch.tensor([2, 0, 2, 1, 2, 0], dtype=torch.int32, device=DEV)
    sid = torch.tensor([1, 5, t, t, 3, t, t, t, 0, 2, 4, t, 77, -5, 3, 0], dtype=torch.int32, device=DEV)
    bexp = torch.tensor([0, 1, 2, -1], dtype=torch.int32, device=DEV)
    a = torch.randn(t if by_pair else t // topk, kdim, dtype=torch.bfloat16, device=DEV)
    out = torch.full((16, kdim), float("nan"), dtype=torch.bfloat16, device=DEV)
    rid = torch.full((16,), 99, dtype=torch.int32, device=DEV)
    gather_rows_kernel[(16 // GATHER_ROWS,)](a, sid, bexp, ids, out, rid, t, kdim, a.stride(0), out.stride(0), BM=bm,
                                             TOPK=topk, BY_PAIR=by_pair, ROWS=GATHER_ROWS, COLS=GATHER_COLS,
                                             ZERO_PAD=zero_pad, STREAM=stream)
    out, rid = out.cpu(), rid.cpu()
    for j, p in enumerate(sid.tolist()):
        if j < 12 and 0 <= p < t:
            assert torch.equal(out[j], a[p if by_pair else p // topk].cpu()), j
            assert rid[j] == ids[p], j
        else:
            padding = j < 12 and zero_pad
            assert torch.equal(out[j], torch.zeros(kdim, dtype=torch.bfloat16)) if padding else out[j].isnan().all(), j
            assert rid[j] == -1, j


def test_activation_reading_the_ids_first_gives_the_same_values():
    """w4a4_act_kernel with IDS_FIRST (moe_ws: the rows' ids loaded first, only valid rows read): the same values as
    the default order, zeros on rows whose id is -1 or out of range, whatever those rows hold (NaN here); and
    TritonMoE._activation (XQ 2, SWAP 3 and WS launch it) is that launch with the layer's activation and limits."""
    from oracle_triton.moe_kernels import ACTIVATION_CODES
    from oracle_triton.moe_w4a4 import w4a4_act_kernel

    rows, inter = 6, 96
    t, _ = moe_pair("mxfp4", 8, 256, inter, 2, "w4a16_mx", "bf16", {}, activation="swigluoai",
                    activation_params={"alpha": 1.702, "limit": 7.0}, bias=True, device=DEV)
    y = torch.randn(rows, 2 * inter, dtype=torch.bfloat16, device=DEV)
    y[1] = float("nan")
    ids = torch.tensor([3, -1, 0, 8, 7, 2], dtype=torch.int32, device=DEV)
    outs = []
    for first in (False, True):
        out = torch.empty(rows, inter, dtype=torch.bfloat16, device=DEV)
        w4a4_act_kernel[(-(-rows * inter // 256),)](y, ids, out, rows * inter, 8, inter, y.stride(0), t.limit,
                                                    t.alpha, t.beta, t.lbeta, ACTFN=ACTIVATION_CODES["swigluoai"],
                                                    GATED=True, INTERLEAVED=True, HAS_LIMIT=True, BLOCK=256,
                                                    EXACT_BF16=t.facts["dot_f32"], IDS_FIRST=first)
        outs.append(out.cpu())
    assert torch.equal(outs[0], outs[1])
    assert not outs[1][[0, 2, 4, 5]].eq(0).all(dim=1).any() and outs[1][[1, 3]].eq(0).all()
    for first in (False, True):
        assert torch.equal(t._activation(y, ids, ids_first=first).cpu(), outs[0])
