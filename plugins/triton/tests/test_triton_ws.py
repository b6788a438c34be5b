"""w4_ws, the warp-specialized many-row 4-bit kernel (issue 26, M >= 64): on CPU, its word decoders' PTX run by
test_triton_e2m1_ptx's bit-level model against hand-computed weights (INT4: the fp32 product (q - z) x s rounded
once to bf16, for fp16 scales; E2M1: the format table's value x scale rounded once, w4_rega's decoder too); the
configs check_config and the tuned table take; the shipped WS entries served only where the kernel runs. On an
H200: test_triton_gpu's test_ws_kernel_matches_emulation_and_replays."""
from __future__ import annotations

import random

import pytest
import torch

from helpers import linear_pair, rel
from test_triton_e2m1_ptx import run_ptx

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _bits(v: torch.Tensor) -> list[int]:
    return [int(h) & 0xFFFF for h in v.to(torch.bfloat16).view(torch.int16)]


def _pairs(x: torch.Tensor) -> int:
    """A bf16 value in both halves of an int32 (the decoders' factor registers)."""
    return _bits(x.reshape(1))[0] * 65537


def _words(codes: list[int]) -> list[int]:
    return [sum(codes[8 * w + i] << (4 * i) for i in range(8)) for w in range(len(codes) // 8)]


def _unpack(out: dict[int, int]) -> list[int]:
    """pairs_ptx's $0..$3 (codes 2j low, 2j + 1 high) -> the 8 weights' bf16 bits in code order."""
    return [(out[j] >> sh) & 0xFFFF for j in range(4) for sh in (0, 16)]


#: fp16 group scales: ordinary, with low bits set (the bf16 split's lo term), tiny and subnormal, large
SCALES = [0.0123, 1.0 / 3.0, 0.000731, 2.0 ** -20, 6.1e-5, 3.0e-6, 0.5, 7.77, 1000.1, 65504.0]


@pytest.mark.parametrize("s", SCALES)
def test_ws_int4_decoder_rounds_the_fp32_product_once(s):
    """w4_ws.pairs_ptx(int4=True): every code q and zero point z with an fp16 scale s given as two bf16 terms
    (hi = bf16(s), lo = bf16(s - hi), as _tile_values builds them) gives bf16((q - z) x s) with the product taken
    exactly (fp32), i.e. the reference's dequantized weight rounded once: bit for bit."""
    from oracle_triton.w4_ws import pairs_ptx

    ptx = pairs_ptx(True)
    sf = torch.tensor(s, dtype=torch.float16).float()
    hi = sf.to(torch.bfloat16).float()
    lo = sf - hi
    assert float(hi + lo.to(torch.bfloat16).float()) == float(sf)          # the split is exact for fp16 scales
    codes = list(range(16))
    for z in range(16):
        got = []
        for w in _words(codes):
            got += _unpack(run_ptx(ptx, {4: w, 5: (0x4300 | z) * 65537, 6: _pairs(hi), 7: _pairs(lo)}))
        want = _bits((torch.tensor(codes, dtype=torch.float32) - z) * sf)
        assert got == want, (s, z)


#: E2M1's 8 magnitudes (OCP MX spec, table of FP4 values); bit 3 of a code is its sign
E2M1_MAGNITUDES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


@pytest.mark.parametrize("e2m1_bytes", [False, True], ids=["w4_ws", "w4_rega"])
def test_e2m1_pair_decoders_round_value_x_scale_once(e2m1_bytes):
    """w4_ws.pairs_ptx(int4=False) and w4_rega.byte_pairs_ptx(True) (one generator, w4_rega.pair_lines; each
    hands the pairs out its own way): with factor c = bf16(2**126 x scale) every code in every position, and
    random words, gives the format table's value x (c x 2**-126) rounded once to bf16, -0 for code 8, in code
    order: MXFP4 (power-of-two) and NVFP4-like factors."""
    from oracle_triton.w4_rega import byte_pairs_ptx
    from oracle_triton.w4_ws import pairs_ptx

    rng = random.Random(7)
    ptx = byte_pairs_ptx(True) if e2m1_bytes else pairs_ptx(False)
    every_code_everywhere = [c * 0x11111111 for c in range(16)] + [0x76543210, 0xFEDCBA98, 0x89ABCDEF, 0x01234567]
    for word in every_code_everywhere + [rng.getrandbits(32) for _ in range(200)]:
        c = torch.tensor(2.0 ** 126 * rng.choice([1.0, 0.25, 2.0 ** -9, 0.37, 1.5 / 448.0])).to(torch.bfloat16)
        scale = float(c) * 2.0 ** -126
        codes = [(word >> (4 * i)) & 15 for i in range(8)]
        want = _bits(torch.tensor([(-1.0 if q & 8 else 1.0) * E2M1_MAGNITUDES[q & 7] * scale for q in codes],
                                  dtype=torch.float64))
        if e2m1_bytes:
            o = run_ptx(ptx, {8: word, 9: _pairs(c)})
            got = [o[j + 4 * i] for j in range(4) for i in range(2)]
        else:
            got = _unpack(run_ptx(ptx, {4: word, 5: _pairs(c)}))
        assert got == want, hex(word)


WS_CFG = {"WS": 1, "num_warps": 8, "BM": 128, "STAGES": 3, "DW": 8, "DREGS": 128, "MAXNREG": 128, "XCP": 1, "BK": 128}


def test_ws_options_in_check_config():
    """The WS configs check_config takes (the shipped entries', the GPU test's) and the ones it refuses: off-list rows,
    decode warps or K tiles, a ring over the shared-memory budget, registers over the register file or under the MMA
    warps' accumulator (ptxas's floor, seen locally for 8 + 16 warps at 80 registers), words prefetched 5 tiles
    ahead or more than 2 without cp.async or TMA activations, MW 2, XCP too deep for the ring, PFENCE 2, TMA
    activations (XTMA) beside cp.async ones or XTMA 3, PP (two MMA warpgroups on their own) without the decode
    warps' TMA, PP 2 or with fewer registers for the MMA warps than the rest, decode partitions (DP) without TMA
    activations, 3 of them, more than the slots or beside PP, a ring of words by TMA (WT) no deeper than the slots,
    over 16, without the MMA warps' TMA activations, beside PP or over the shared-memory budget, a persistent grid
    (PT 1, or 2 with the words two tiles ahead) but with the MMA warps' TMA activations, MW 1, one or two decode
    partitions dividing the slots and no WT,
    INT4 groups the K tile does not divide, a non-word layout."""
    from oracle_triton.formats import check_config, layout_for, words_layout

    i4, mx = layout_for("int4", 8192, 8192, 128), words_layout("mxfp4", 8192, 8192)
    for lay, kn in ((i4, {}), (mx, {"KN": 1}), (words_layout("nvfp4", 8192, 8192), {"KN": 1})):
        check_config({**WS_CFG, **kn}, lay)
        check_config({"WS": 1, "num_warps": 4, "BM": 128, "STAGES": 3, "DW": 4, "DREGS": 168, "MAXNREG": 168, **kn}, lay)
        check_config({"WS": 1, "num_warps": 8, "BM": 64, "STAGES": 6, "DW": 4, "DREGS": 200, "MAXNREG": 168, **kn}, lay)
        check_config({"WS": 1, "num_warps": 4, "BM": 256, "STAGES": 4, "DW": 8, "DREGS": 104, "MAXNREG": 168, "XCP": 2,
                      **kn}, lay)                                         # one warpgroup, 256 rows (R59)
        check_config({"WS": 1, "num_warps": 4, "BM": 128, "STAGES": 4, "DW": 16, "DREGS": 72, "MAXNREG": 96, "XCP": 1,
                      "BK": 128, **kn}, lay)                              # 16 decode warps (R59)
        check_config({**WS_CFG, "WPF": 4, "MW": 0, **kn}, lay)            # words 4 tiles ahead, slots back sooner
        check_config({**WS_CFG, "XCP": 0, "XTMA": 1, "WPF": 3, **kn}, lay)  # activations by TMA (R66)
        check_config({**WS_CFG, "XCP": 0, "XTMA": 2, "PP": 1, **kn}, lay)   # two MMA warpgroups on their own
        check_config({**WS_CFG, "XCP": 0, "XTMA": 1, "DP": 2, **kn}, lay)   # two decode partitions
        one_wg = {"WS": 1, "num_warps": 4, "BM": 256, "STAGES": 4, "DW": 8, "DREGS": 104, "MAXNREG": 168,
                  "XTMA": 1, "DP": 2, **kn}
        for wt in (5, 12, 16):                                            # the words by TMA, rings of 5-16
            check_config({**one_wg, "WT": wt}, lay)
        for bad in ({"WT": 4}, {"WT": 17}, {"WT": 8, "XTMA": 2}, {"WT": 8, "XTMA": 0, "DP": 1, "XCP": 1}):
            with pytest.raises(ValueError, match="WT"):
                check_config({**one_wg, **bad}, lay)
        check_config({**one_wg, "PT": 1}, lay)                          # a persistent program an SM
        check_config({**one_wg, "PT": 1, "DP": 1}, lay)
        check_config({**one_wg, "PT": 2}, lay)                          # + the decode loop unrolled by two trips
        for bad in ({"PT": 3}, {"PT": 2, "WPF": 3}, {"PT": 1, "XTMA": 2}, {"PT": 1, "MW": 0}, {"PT": 1, "DP": 4}, {"PT": 1, "WT": 8},
                    {"PT": 1, "PFENCE": 1}, {"PT": 1, "STAGES": 3}):
            with pytest.raises(ValueError, match="PT"):
                check_config({**one_wg, **bad}, lay)
        with pytest.raises(ValueError, match="shared memory"):          # 5 slots of 256 rows and 6 of words
            check_config({**one_wg, "STAGES": 5, "WT": 6}, lay)
        with pytest.raises(ValueError, match="accumulator"):           # 24 warps leave the wgmma 80 registers
            check_config({**WS_CFG, "DW": 16, "DREGS": 64, "MAXNREG": 80, **kn}, lay)
        with pytest.raises(ValueError, match="accumulator"):           # a 64 x 256 fp32 accumulator is 128 a thread
            check_config({"WS": 1, "num_warps": 4, "BM": 256, "STAGES": 4, "DW": 8, "DREGS": 104, "MAXNREG": 144,
                          **kn}, lay)
        for bad in ({"BM": 96}, {"DW": 3}, {"BK": 256}, {"STAGES": 4}, {"MAXNREG": 136}, {"DREGS": 20},
                    {"XCP": 2}, {"PFENCE": 2}, {"num_warps": 2}, {"WPF": 5}, {"MW": 2}, {"XCP": 0, "WPF": 3},
                    {"XTMA": 1}, {"XCP": 0, "XTMA": 3}, {"XCP": 0, "XTMA": 1, "PP": 1}, {"XCP": 0, "XTMA": 2, "PP": 2},
                    {"XCP": 0, "XTMA": 2, "PP": 1, "DREGS": 96}, {"DP": 2}, {"XCP": 0, "XTMA": 1, "DP": 3},
                    {"XCP": 0, "XTMA": 1, "DP": 4, "STAGES": 2}, {"XCP": 0, "XTMA": 2, "PP": 1, "DP": 2}):
            with pytest.raises(ValueError, match="WS|DREGS|PFENCE|PP|DP"):
                check_config({**WS_CFG, **kn, **bad}, lay)
    with pytest.raises(ValueError, match="WS"):
        check_config(WS_CFG, layout_for("int4", 8192, 8192, 64))           # BK 128 does not divide 64-wide groups
    with pytest.raises(ValueError, match="WS"):
        check_config(WS_CFG, layout_for("mxfp4", 8192, 8192))              # the checkpoint's [N, K/2] bytes


def _launched(monkeypatch) -> list[dict]:
    """fastlaunch.launch replaced by a recorder of its keyword arguments (the host side of a w4_ws launch, on CPU)."""
    from oracle_triton import fastlaunch

    seen: list[dict] = []
    monkeypatch.setattr(fastlaunch, "launch", lambda fn, grid, warps, stream, **kw: seen.append(kw))
    return seen


def test_ws_words_by_tma_reach_the_kernel(monkeypatch):
    """WT (the words by TMA into their own ring): DenseGemm.ws hands w4_ws_kernel WT and a descriptor of the layer's
    own words [K/8, N] (no copy) in [BK/8, 16 x num_warps] boxes, unswizzled, built once per box shape and kept on
    the layer; without WT none; on words a TMA cannot cover (here a base not on 16 bytes) WT 0, the words through
    registers, instead of a failed launch."""
    seen = _launched(monkeypatch)
    t, _ = linear_pair("int4", 1000, 3072, "w4a16_int4", "bf16", symmetric=False, device=DEV)
    x = torch.randn(300, 3072, dtype=torch.bfloat16, device=DEV)
    cfg = {"WS": 1, "num_warps": 4, "BM": 256, "STAGES": 4, "DW": 8, "DREGS": 104, "MAXNREG": 168, "XTMA": 1,
           "DP": 2}
    t.gemm.ws(x, {**cfg, "WT": 10})
    t.gemm.ws(x, {**cfg, "WT": 12})
    t.gemm.ws(x, {**cfg, "WT": 12, "BK": 128})
    t.gemm.ws(x, cfg)
    first, second, wide, plain = seen
    words = t.gemm.weight
    assert words.dtype == torch.int32 and tuple(words.shape) == (3072 // 8, 1000)
    assert first["WT"] == 10 and second["WT"] == 12 and plain["WT"] == 0 and plain["w_desc"] is None
    desc = first["w_desc"]
    assert desc.block_shape == [8, 64] and desc.base.data_ptr() == words.data_ptr()
    assert tuple(desc.shape) == (384, 1000) and desc.layout.swizzle_byte_width == 0
    assert second["w_desc"] is desc and wide["w_desc"].block_shape == [16, 64]       # one a box shape, kept
    shifted = torch.empty(words.numel() + 1, dtype=torch.int32, device=DEV)[1:].view(words.shape)    # a 4-byte-aligned base
    shifted.copy_(words)
    monkeypatch.setattr(t.gemm, "weight", shifted)
    t.gemm.ws(x, {**cfg, "WT": 10})
    assert seen[-1]["WT"] == 0 and seen[-1]["w_desc"] is None


def test_ws_persistent_grid_covers_the_output_tiles(monkeypatch):
    """PT 1: DenseGemm.ws launches w4_ws_kernel with PT 1 on a 1-D grid of min(programs, output tiles) programs
    (launch.pt_programs: one an SM, or PT_PROGRAMS); where the K tiles are fewer than the ring's slots, or without
    PT, the one-tile grid (N / BN, M / BM) with PT 0."""
    from oracle_triton import fastlaunch, launch

    seen: list = []
    monkeypatch.setattr(fastlaunch, "launch", lambda fn, grid, warps, stream, **kw: seen.append((grid, kw)))
    monkeypatch.setattr(launch, "PT_PROGRAMS", 7)
    t, _ = linear_pair("int4", 1000, 3072, "w4a16_int4", "bf16", symmetric=False, device=DEV)
    x = torch.randn(300, 3072, dtype=torch.bfloat16, device=DEV)
    cfg = {"WS": 1, "num_warps": 4, "BM": 256, "STAGES": 4, "DW": 8, "DREGS": 104, "MAXNREG": 168, "XTMA": 1,
           "DP": 2}
    t.gemm.ws(x, {**cfg, "PT": 1})
    t.gemm.ws(x, cfg)
    monkeypatch.setattr(launch, "PT_PROGRAMS", 500)          # more programs than the 16 x 2 output tiles
    t.gemm.ws(x, {**cfg, "PT": 1})
    (pt_grid, pt), (grid, plain), (few_grid, few) = seen
    assert pt_grid == (7, 1, 1) and pt["PT"] == 1
    assert grid == (16, 2, 1) and plain["PT"] == 0
    assert few_grid == (32, 1, 1) and few["PT"] == 1
    assert launch.pt_programs(32, 3, 4, None) == 0            # 3 K tiles, 4 slots: the one-tile grid
    assert launch.pt_programs(32, 48, 4, None) == 32


def test_shipped_ws_entries_serve_only_where_the_kernel_runs():
    """The H200's 256-row entries that are WS configs, on the three large shapes: two MMA warpgroups, 128-deep K tiles,
    the words 3-4 tiles ahead and slots handed back after their own MMA (INT4, R61-R62), or one warpgroup and all
    256 rows a program (R60); since R71-R72 all nine with the decode warps as 2 or 4 partitions and the activations
    by TMA. A WS config serves a layer only where
    w4_ws runs (ws_ok: an sm_90 GPU); elsewhere (this CPU) an explicit WS config takes the shape rules' path, and
    either way the call matches the reference. A shape without an entry keeps the rules' choice."""
    from oracle_triton import tuned

    for mode in ("w4a16_int4", "w4a16_mx", "w4a16_nvfp4"):
        for n, k in ((8192, 8192), (7168, 18432), (36864, 7168)):
            found = tuned.lookup("NVIDIA H200", "dense", mode, n, k, 256)
            assert found is not None and found.get("WS"), found
            if found["num_warps"] == 8:         # two MMA warpgroups, 128 rows (R61-R62)
                assert found["BK"] == 128 and found["WPF"] >= 3 and found["MW"] == 0, found
            else:                               # one warpgroup, all 256 rows a program (R60, R71)
                assert found["BM"] == 256 and found["num_warps"] == 4, found
            assert found["DP"] > 1 and found["XTMA"] and not found["XCP"], found  # decode partitions, TMA (R71-R72)
    t, ref = linear_pair("int4", 256, 512, "w4a16_int4", "bf16", device=DEV)
    g, cfg = t.gemm, {**WS_CFG, "BK": 64}
    assert g.serves(cfg, 256, 0) == g.ws_ok(0)
    if DEV == "cpu":
        assert not g.ws_ok(0)
    x = torch.randn(256, 512, dtype=torch.bfloat16, device=DEV)
    assert rel(g(x, 0, None, torch.bfloat16, cfg), ref.apply(x)) < 1e-2
    assert "WS" not in g.config_for(256, 0) and g.config_for(256, 0) == g.rule_config(256, 0)


def test_ws_entry_serves_only_layers_whose_int4_groups_its_k_tile_divides(monkeypatch):
    """The tuned table is not keyed by INT4 group size: a WS entry with 128-deep K tiles (one scale a tile) must not
    serve a layer with 64-wide groups, even where w4_ws runs (ws_ok forced here); 64-deep tiles may."""
    from oracle_triton.launch import DenseGemm

    monkeypatch.setattr(DenseGemm, "ws_ok", lambda self, act: True)
    t64, _ = linear_pair("int4", 256, 512, "w4a16_int4", "bf16", device=DEV, group=64)
    t128, _ = linear_pair("int4", 256, 512, "w4a16_int4", "bf16", device=DEV, group=128)
    assert not t64.gemm.serves(WS_CFG, 256, 0) and t64.gemm.serves({**WS_CFG, "BK": 64}, 256, 0)
    assert t128.gemm.serves(WS_CFG, 256, 0)
