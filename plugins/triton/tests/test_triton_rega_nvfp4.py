"""w4_rega's NVFP4 options (issue 26, 2048x4096 at M = 16): the byte-table decoder (TABLE: each weight exactly
oracle-emulation's bf16(value x s x g), where the default fused factor bf16(s x g x 2**126) rounds the scale
first) and EARLY (PF 0's words issued before the activations' wait, 1, or before their copy, 2). On CPU: the decoder's PTX run by the
bit-level model of test_triton_e2m1_ptx against oracle-emulation's NVFP4 dequantization, and the configs
check_config takes; on an H200: the kernel against emulation and under graph replay."""
from __future__ import annotations

import pytest
import torch

from test_triton_e2m1_ptx import CODES, GLOBALS, _pair, _reference, run_ptx, ulps_off_the_reference


def _scale_word(s_byte: int, g: float) -> int:
    """w4_rega._scale_word's {A, B} in torch: A = bf16(s x g), B = bf16((1.5 s) x g), fp32 products."""
    sv = torch.tensor([s_byte], dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    gt = torch.tensor(g, dtype=torch.float32)
    return (_pair(sv * gt) & 0xFFFF) | (_pair((sv * 1.5) * gt) & 0xFFFF0000)


def _decode_pairs(ptx: str, codes: list[int], factor: int) -> list[int]:
    """Two words of 8 codes (code i at bits 4i..) through a w4_rega decoder ($j / $(j + 4): codes 2j / 2j + 1)
    -> the 16 outputs in k order."""
    out = []
    for word in range(2):
        u = sum(codes[8 * word + i] << (4 * i) for i in range(8))
        o = run_ptx(ptx, {8: u, 9: factor})
        for j in range(4):
            out += [o[j], o[j + 4]]
    return out


@pytest.mark.parametrize("g", GLOBALS)
def test_rega_table_decoder_gives_the_nvfp4_reference_bits(g):
    """The byte-table decoder in w4_rega's A-fragment order (gemm.e2m1_word_ptx_table(a_fragment=True)) with its
    scale word: every code (signs and zeros included) times every finite E4M3 scale is oracle-emulation's bf16
    weight, bit for bit, in the A fragment's pair order."""
    from oracle_triton.gemm import e2m1_word_ptx_table

    ptx = e2m1_word_ptx_table(a_fragment=True)
    for s_byte in range(0x7F):                       # 0x7F is NaN; the sign bit is never set in a scale
        assert _decode_pairs(ptx, CODES, _scale_word(s_byte, g)) == _reference(CODES, s_byte, g), (g, s_byte)


def test_rega_table_decoder_on_mixed_words():
    """Words whose 8 codes differ (the codes of one word in every position, signs mixed) decode to the
    reference's bits: the lookups and the sign gather index by position, not by a repeated code."""
    from oracle_triton.gemm import e2m1_word_ptx_table

    ptx = e2m1_word_ptx_table(a_fragment=True)
    gen = torch.Generator().manual_seed(7)
    for _ in range(200):
        codes = torch.randint(0, 16, (16,), generator=gen).tolist()
        s_byte = int(torch.randint(1, 0x7F, (1,), generator=gen))
        assert _decode_pairs(ptx, codes, _scale_word(s_byte, 0.0123)) == _reference(codes, s_byte, 0.0123)


def test_rega_default_decoder_rounds_nvfp4_scales_twice():
    """The default REGA E2M1 decoder (byte_pairs_ptx, one factor c = bf16(s x g x 2**126)) is the reference's
    on the power-of-two codes and one bf16 ulp off on some 1.5 p codes: what TABLE removes."""
    from oracle_triton.w4_rega import byte_pairs_ptx

    ptx = byte_pairs_ptx(True)
    g = torch.tensor(1.0 / 2688.0, dtype=torch.float32)
    assert ulps_off_the_reference(lambda sv: _decode_pairs(ptx, CODES, _pair(sv * g * 2.0 ** 126)), 1.0 / 2688.0) > 0


def test_rega_nvfp4_options_in_check_config():
    """TABLE on NVFP4 words and EARLY 1 / 2 with PF 0 (any format) are REGA configs check_config takes (and the
    tuned table's keys); TABLE on MXFP4 / INT4, EARLY with PF 1 / 2 and EARLY 3 are refused."""
    from oracle_triton.formats import check_config, layout_for, words_layout
    from oracle_triton.tuned import KEYS

    assert {"TABLE", "EARLY"} <= KEYS
    base = {"REGA": 1, "SPLIT_K": 8, "XT": 4, "PF": 0, "num_warps": 8, "KN": 1}
    check_config({**base, "TABLE": 1, "EARLY": 1}, words_layout("nvfp4", 2048, 4096))
    with pytest.raises(ValueError, match="TABLE"):
        check_config({**base, "TABLE": 1}, words_layout("mxfp4", 2048, 4096))
    with pytest.raises(ValueError, match="TABLE"):
        check_config({**base, "TABLE": 1}, layout_for("int4", 2048, 4096, 128))
    check_config({**base, "EARLY": 2}, layout_for("int4", 2048, 4096, 128))
    with pytest.raises(ValueError, match="EARLY"):
        check_config({**base, "PF": 2, "EARLY": 1}, words_layout("nvfp4", 2048, 4096))
    with pytest.raises(ValueError, match="EARLY"):
        check_config({**base, "EARLY": 3}, words_layout("nvfp4", 2048, 4096))


def test_rega_table2_wait_vec_in_check_config():
    """TABLE 2 (NVFP4), WAIT 1 with PF 0 and VEC 1 (any format) are REGA configs check_config takes and tuned-table
    keys; WAIT with PF 2, WAIT 2, VEC 2 and TABLE 3 are refused."""
    from oracle_triton.formats import check_config, words_layout
    from oracle_triton.tuned import KEYS

    assert {"WAIT", "VEC"} <= KEYS
    base = {"REGA": 1, "SPLIT_K": 8, "XT": 4, "PF": 0, "num_warps": 4, "KN": 1}
    nv, mx = words_layout("nvfp4", 2048, 4096), words_layout("mxfp4", 2048, 4096)
    check_config({**base, "TABLE": 2, "EARLY": 1, "WAIT": 1, "VEC": 1}, nv)
    check_config({**base, "EARLY": 1, "WAIT": 1, "VEC": 1}, mx)
    check_config({**base, "PF": 2, "TABLE": 2, "VEC": 1}, nv)
    for bad in ({"PF": 2, "WAIT": 1}, {"WAIT": 2}, {"VEC": 2}, {"TABLE": 3}):
        with pytest.raises(ValueError, match="TABLE / WAIT / VEC"):
            check_config({**base, **bad}, nv)
    with pytest.raises(ValueError, match="TABLE"):
        check_config({**base, "TABLE": 2}, mx)


#: weights exactly the reference's: only the fp32 sums' order (split K, MMA order) separates TABLE from emulation,
#: which moves an output across a bf16 rounding boundary now and then (each such output 2**-8 off)
TOL_TABLE = 1e-3


@pytest.mark.gpu
def test_rega_nvfp4_table_and_early_match_emulation_and_replay(capsys):
    """NVFP4 through DenseGemm.rega on an H200 (N = 1000: a tile tail; K = 3072; a bias; 20 rows): TABLE within
    1e-3 of emulation (the default decoder's error printed beside it), EARLY 1 and 2 bitwise equal to the same
    config without it (the same arithmetic, the loads issued earlier), PF 0 at 8 warps (6 splits of 4 tiles) and
    4 warps (12 of 2); captured and replayed."""
    from helpers import linear_pair, rel
    from test_triton_gpu import _capture_and_replay

    t, e = linear_pair("nvfp4", 1000, 3072, "w4a16_nvfp4", "bf16", device="cuda", bias=True)
    if not t.gemm.rega_ok(0):
        pytest.skip("w4_rega needs an sm_90 GPU (wgmma) and NVFP4 scales inside the fused decoder's range")
    x = torch.randn(20, 3072, device="cuda", dtype=torch.bfloat16)
    ref = e.apply(x)
    cfg = {"REGA": 1, "SPLIT_K": 6, "XT": 4, "PF": 0, "num_warps": 8, "KN": 1}
    plain = t.gemm(x, 0, None, torch.bfloat16, cfg)
    table = t.gemm(x, 0, None, torch.bfloat16, {**cfg, "TABLE": 1})
    err, err_plain = rel(table, ref), rel(plain, ref)
    with capsys.disabled():
        print(f"\nREGA NVFP4 w8 split 6: TABLE {err:.2e}, default decoder {err_plain:.2e}")
    assert err < TOL_TABLE, (err, err_plain)
    for early in (1, 2):
        assert torch.equal(plain, t.gemm(x, 0, None, torch.bfloat16, {**cfg, "EARLY": early})), early
        assert torch.equal(table, t.gemm(x, 0, None, torch.bfloat16, {**cfg, "TABLE": 1, "EARLY": early})), early
    both = {**cfg, "SPLIT_K": 12, "XT": 2, "num_warps": 4, "TABLE": 1, "EARLY": 2}
    assert rel(t.gemm(x, 0, None, torch.bfloat16, both), ref) < TOL_TABLE
    _capture_and_replay(lambda xx: t.gemm(xx, 0, None, torch.bfloat16, both), x, e.apply)


@pytest.mark.gpu
def test_rega_nvfp4_paired_scale_loads_and_deferred_waits_change_no_bit():
    """TABLE 2 (two scale bytes per 16-bit load), WAIT 1 (each K tile waits for the previous tile's MMAs only) and
    VEC 1 (outputs and partials 4 n per thread) on an H200: bitwise TABLE 1's output (the same scale words, the same
    MMAs and partial sums in the same order) at PF 0 (4 and 8 warps, with EARLY 1) and, for TABLE 2 / VEC, PF 2 (the
    large shapes' entries); MXFP4 with WAIT + VEC bitwise its plain output; within 1e-3 of emulation; the 4-warp
    PF 0 form with all three captured and replayed."""
    from helpers import linear_pair, rel
    from test_triton_gpu import _capture_and_replay

    t, e = linear_pair("nvfp4", 1000, 3072, "w4a16_nvfp4", "bf16", device="cuda", bias=True)
    if not t.gemm.rega_ok(0):
        pytest.skip("w4_rega needs an sm_90 GPU (wgmma) and NVFP4 scales inside the fused decoder's range")
    x = torch.randn(20, 3072, device="cuda", dtype=torch.bfloat16)
    ref = e.apply(x)
    for cfg in ({"REGA": 1, "SPLIT_K": 6, "XT": 4, "PF": 0, "num_warps": 8, "KN": 1, "TABLE": 1},
                {"REGA": 1, "SPLIT_K": 12, "XT": 2, "PF": 0, "num_warps": 4, "KN": 1, "TABLE": 1, "EARLY": 1}):
        table = t.gemm(x, 0, None, torch.bfloat16, cfg)
        assert rel(table, ref) < TOL_TABLE
        for extra in ({"TABLE": 2}, {"WAIT": 1}, {"VEC": 1}, {"TABLE": 2, "WAIT": 1, "VEC": 1}):
            assert torch.equal(table, t.gemm(x, 0, None, torch.bfloat16, {**cfg, **extra})), (cfg, extra)
    pf2 = {"REGA": 1, "SPLIT_K": 4, "XT": 4, "PF": 2, "num_warps": 8, "KN": 1, "TABLE": 1}
    for extra in ({"TABLE": 2}, {"TABLE": 2, "VEC": 1}):
        assert torch.equal(t.gemm(x, 0, None, torch.bfloat16, pf2), t.gemm(x, 0, None, torch.bfloat16, {**pf2, **extra}))
    mx, mx_e = linear_pair("mxfp4", 1000, 3072, "w4a16_mx", "bf16", device="cuda", bias=True)
    mx_cfg = {"REGA": 1, "SPLIT_K": 12, "XT": 2, "PF": 0, "num_warps": 4, "KN": 1, "EARLY": 1}
    assert torch.equal(mx.gemm(x, 0, None, torch.bfloat16, mx_cfg),
                       mx.gemm(x, 0, None, torch.bfloat16, {**mx_cfg, "WAIT": 1, "VEC": 1}))
    assert rel(mx.gemm(x, 0, None, torch.bfloat16, {**mx_cfg, "WAIT": 1, "VEC": 1}), mx_e.apply(x)) < TOL_TABLE
    both = {"REGA": 1, "SPLIT_K": 12, "XT": 2, "PF": 0, "num_warps": 4, "KN": 1, "TABLE": 2, "EARLY": 1, "WAIT": 1,
            "VEC": 1}
    _capture_and_replay(lambda xx: t.gemm(xx, 0, None, torch.bfloat16, both), x, e.apply)


def test_rega_launch_keys_fall_back_to_byte_scale_loads_where_unaligned():
    """w4_rega.launch_keys: TABLE 2 (16-bit scale loads) runs as TABLE 1 where the scale tensor's address or row
    stride is odd; absent keys are 0."""
    from oracle_triton.w4_rega import launch_keys

    assert launch_keys({"REGA": 1}, 256, 256) == {"EARLY": 0, "TABLE": 0, "WAIT": 0, "VEC": 0}
    assert launch_keys({"TABLE": 2, "WAIT": 1, "EARLY": 1, "VEC": 1}, 256, 256) == {"EARLY": 1, "TABLE": 2, "WAIT": 1,
                                                                                "VEC": 1}
    assert launch_keys({"TABLE": 2}, 257, 256)["TABLE"] == 1
    assert launch_keys({"TABLE": 2}, 256, 255)["TABLE"] == 1
    assert launch_keys({"TABLE": 1}, 257, 255)["TABLE"] == 1
