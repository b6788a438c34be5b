"""FP8 W8A8 one-row GEMV with each program's weight tile in one load (cfg ROWGEMV 3, fp8_rowgemv):
against oracle-emulation in Triton's CPU interpreter (compiled on a GPU machine), its config checks on
the host, and on an H200-class GPU with programmatic dependent launch, a launch plan and graph replay.

Tolerance as test_triton_dense.py: both sides multiply the same E4M3 codes; the reference rounds to
bf16 where the kernel sums exact fp32 products, so 1e-2 relative (a wrong code, scale or K range
gives errors of order 1).
"""
from __future__ import annotations

import pytest
import torch

from helpers import linear_pair, rel, torch_token_codes

TOL = 1e-2
DEV = "cuda" if torch.cuda.is_available() else "cpu"
SWAP = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4, "num_stages": 2}


def _cfg(bn: int, bk: int, split: int, warps: int, **extra: int) -> dict[str, int]:
    return {"ROWGEMV": 3, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": warps, "num_stages": 1,
            **extra}


@pytest.mark.slow
@pytest.mark.parametrize("fmt,mode,gran", [("fp8_channel", "w8a8_fp8_channel", "token"),
                                           ("fp8_tensor", "w8a8_fp8_tensor", "tensor")])
def test_tile_gemv_matches_emulation(fmt, mode, gran):
    """Rows not a multiple of BLOCK_N, a partial last K tile, split-K up to 5, a bias; the row's codes
    from the quantizer (QUANT_IN 0; ROWQ 1 or 128: fp8_rowgemv's own) or rounded by every program from the whole
    row's amax (QUANT_IN 1, the amax in the last K tile); within float-summation order of the swap GEMM
    on the same codes."""
    from oracle_triton.formats import check_config
    from oracle_triton.linear import dynamic_tensor_scale

    t, e = linear_pair(fmt, 90, 320, mode, "fp8", {"activation_granularity": gran}, bias=True, device=DEV)
    assert t.gemm.row_gemv_ok(t.act)
    x = torch.randn(1, 320, dtype=torch.bfloat16, device=DEV) * 3
    x[0, 300] = 40.0
    scale = dynamic_tensor_scale(x) if gran == "tensor" else None
    swap = t.gemm(x, t.act, scale, torch.bfloat16, SWAP)
    for bn, bk, split, warps, quant_in, rowq in (
            (4, 128, 3, 1, 0, 0), (2, 512, 1, 2, 1, 0), (8, 64, 5, 4, 1, 0), (16, 256, 2, 4, 0, 1),
            (2, 512, 1, 2, 0, 1), (4, 128, 3, 2, 0, 128)):
        cfg = _cfg(bn, bk, split, warps, QUANT_IN=quant_in, EVICT=1, ROWQ=rowq)
        check_config(cfg, t.gemm.layout)
        y = t.gemm(x, t.act, scale, torch.bfloat16, cfg)
        assert y.shape == (1, 90) and y.dtype == torch.bfloat16
        assert rel(y, e.apply(x)) < TOL, (bn, bk, split, quant_in)
        assert rel(y, swap) < 1e-2, (bn, bk, split, quant_in)
    x0 = torch.zeros(1, 320, dtype=torch.bfloat16, device=DEV)     # a zero row: scale 1, output the bias
    s0 = dynamic_tensor_scale(x0) if gran == "tensor" else None
    for quant_in in (0, 1):
        y0 = t.gemm(x0, t.act, s0, torch.bfloat16, _cfg(4, 128, 3, 1, QUANT_IN=quant_in))
        assert rel(y0, e.apply(x0)) < TOL


@pytest.mark.slow
def test_row_codes_are_the_quantizers(monkeypatch):
    """fp8_rowgemv.row_codes_kernel (cfg ROWQ 1) and split_codes_kernel (ROWQ CHUNK: 128-wide programs, the
    last one partial; the row's amax in one load or, with 128-wide amax loads, in three, the last partial)
    write torch's float8_e4m3fn cast of x / (amax / 448) and those scales, as act_qdq_kernel does
    (launch.TOKEN_ROW_CODES off), for one row or several: K not a power of two, an amax of either sign (in the
    last chunk or the first), values that round to zero, a zero row; so the swap GEMM's product on them (ROWQ
    of a swap entry) is bit for bit."""
    from oracle_triton import launch
    from oracle_triton.formats import ACT_TOKEN
    from oracle_triton.launch import quantize_activation_codes

    t, _ = linear_pair("fp8_channel", 64, 320, "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
                       device=DEV)
    x = torch.randn(3, 320, dtype=torch.bfloat16, device=DEV) * 3
    x[0, 7], x[1, 300], x[1, 5], x[1, 310] = -50.0, 1e-6, -1e-6, 45.0
    x[2] = 0.0
    for amax_k in (4096, 128):
        monkeypatch.setattr(launch, "ROWQ_SPLIT_AMAX_K", amax_k)
        for rows in (x[0:1], x[1:2], x[2:3], x):
            monkeypatch.setattr(launch, "TOKEN_ROW_CODES", False)
            want, ws = quantize_activation_codes(rows, ACT_TOKEN, None, t.gemm.facts)
            monkeypatch.setattr(launch, "TOKEN_ROW_CODES", True)
            ref, ref_s = torch_token_codes(rows)
            assert torch.equal(want.view(torch.uint8), ref) and torch.equal(ws, ref_s)
            for rowq in (1, 128, 256) if amax_k == 4096 else (128,):
                got, gs = launch.token_codes(rows, t.gemm.facts, False, rowq)
                assert torch.equal(got, want.view(torch.uint8)), (rows.shape, rowq, amax_k)
                assert torch.equal(gs, ws), (rows.shape, rowq, amax_k)
    swap = {**SWAP, "SPLIT_K": 2}                    # the swap GEMM on either quantizer's codes: the same bits
    tiled = {k: v for k, v in swap.items() if k != "SWAP"}    # and the tiled GEMM of many rows (wgemm_kernel)
    for cfg in (swap, tiled):
        want = t.gemm(x, t.act, None, torch.bfloat16, cfg)
        for rowq in (1, 128):
            assert torch.equal(t.gemm(x, t.act, None, torch.bfloat16, {**cfg, "ROWQ": rowq}), want), (cfg, rowq)


def test_tile_gemv_config_checks():
    """A ROWGEMV 3 entry serves one row whose K its tiles cover exactly (SPLIT_K = cdiv(K, BLOCK_K)); any other
    split, and any other ROWGEMV (1 and 2, fp8_gemv, were removed), is refused by serves (a tuned entry falls
    back to the rules) and by the config check, and raises when forced.
    A ROWQ that is neither 0, 1 nor a power-of-two chunk of at least 128 is refused by the config check and
    raises when forced."""
    from oracle_triton.formats import check_config

    t, _ = linear_pair("fp8_channel", 64, 320, "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
                       device=DEV)
    good, bad = _cfg(4, 128, 3, 4), _cfg(4, 128, 2, 4)
    assert t.gemm.serves(good, 1, t.act) and not t.gemm.serves(good, 2, t.act)
    assert not t.gemm.serves(bad, 1, t.act)
    assert t.gemm.serves(_cfg(4, 512, 1, 4), 1, t.act)
    old = {**_cfg(4, 128, 3, 4), "ROWGEMV": 1}
    assert not t.gemm.serves(old, 1, t.act)
    with pytest.raises(ValueError, match="ROWGEMV=1"):
        check_config(old, t.gemm.layout)
    with pytest.raises(ValueError, match="ROWGEMV=1"):
        t.gemm(torch.randn(1, 320, dtype=torch.bfloat16, device=DEV), t.act, None, torch.bfloat16, old)
    for rowq in (2, 64, 384):           # ROWQ: 0, 1 or a power-of-two row chunk >= 128
        with pytest.raises(ValueError, match="ROWQ="):
            check_config({**SWAP, "ROWQ": rowq}, t.gemm.layout)
        with pytest.raises(ValueError, match="ROWQ="):
            t.gemm(torch.randn(2, 320, dtype=torch.bfloat16, device=DEV), t.act, None, torch.bfloat16, {**SWAP, "ROWQ": rowq})
    check_config({**SWAP, "ROWQ": 2048}, t.gemm.layout)
    with pytest.raises(ValueError, match="SPLIT_K = cdiv"):
        t.gemm.fp8_tile_gemv(torch.randn(1, 320, dtype=torch.bfloat16, device=DEV), t.act, None, torch.bfloat16, bad)
    with pytest.raises(ValueError, match="ROWGEMV serves one row"):
        t.gemm(torch.randn(2, 320, dtype=torch.bfloat16, device=DEV), t.act, None, torch.bfloat16, good)


@pytest.mark.gpu
def test_tile_gemv_pdl_plans_and_replays():
    """On the GPU (hardware E4M3 conversions): the quantizer's codes with and without programmatic dependent
    launch, from any quantizer (ROWQ), give the same bits; the one-launch form (each program rounding the row)
    agrees to float order;
    each near the reference, in a launch plan (the second eager call) and captured and replayed."""
    t, e = linear_pair("fp8_channel", 1536, 4096, "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
                       device="cuda", bias=True)
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    ref = e.apply(x)
    plain = _cfg(2, 4096, 1, 8, PDL=0)
    want = t.gemm(x, t.act, None, torch.bfloat16, plain)
    assert rel(want, ref) < TOL
    assert torch.equal(t.gemm(x, t.act, None, torch.bfloat16, _cfg(2, 4096, 1, 8, PDL=1, EVICT=1)), want)
    assert torch.equal(t.gemm(x, t.act, None, torch.bfloat16, _cfg(2, 4096, 1, 8, PDL=1, ROWQ=1)), want)
    assert torch.equal(t.gemm(x, t.act, None, torch.bfloat16, _cfg(2, 4096, 1, 8, PDL=1, ROWQ=1024)), want)
    split = _cfg(4, 2048, 2, 8, PDL=1)          # two K slices summed in a fixed order: another float order
    assert rel(t.gemm(x, t.act, None, torch.bfloat16, split), ref) < TOL
    one = _cfg(8, 4096, 1, 8, QUANT_IN=1)
    assert rel(t.gemm(x, t.act, None, torch.bfloat16, one), want) < 1e-3
    cfg = _cfg(2, 4096, 1, 8, PDL=1, EVICT=1, ROWQ=1)
    _served_as_entry(t, e, x, cfg, t.gemm(x, t.act, None, torch.bfloat16, cfg))


@pytest.mark.gpu
def test_split_row_codes_on_the_gpu():
    """On the GPU (hardware E4M3 conversion, quotients from the scale's reciprocal; 4 to 9 programs per row):
    split_codes_kernel (cfg ROWQ CHUNK) writes quantize_activation_codes' bytes and scales, torch's float8 cast's,
    for 16 rows of K = 18432 (the amax in nine 2048-wide loads) and 8192 (four), amaxes in a row's first and last
    values; the swap GEMM on them, chained by PDL, gives the bits of the swap GEMM on the quantizer's codes, near
    the reference, through the layer call and its launch plan, and captured and replayed."""
    from oracle_triton import launch
    from oracle_triton.formats import ACT_TOKEN
    from oracle_triton.launch import quantize_activation_codes

    for k, chunk in ((18432, 2048), (8192, 1024), (8192, 2048)):
        t, e = linear_pair("fp8_channel", 512, k, "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
                           device="cuda", bias=True)
        x = torch.randn(16, k, device="cuda", dtype=torch.bfloat16) * 2
        x[3, k - 1], x[5, 0], x[7] = -70.0, 55.0, 0.0
        want, ws = quantize_activation_codes(x, ACT_TOKEN, None, t.gemm.facts)
        got, gs = launch.token_codes(x, t.gemm.facts, False, chunk)
        assert torch.equal(got, want.view(torch.uint8)) and torch.equal(gs, ws), (k, chunk)
        ref, ref_s = torch_token_codes(x)
        assert torch.equal(got, ref) and torch.equal(gs, ref_s), (k, chunk)
        swap = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "SPLIT_K": 2, "num_warps": 4,
                "num_stages": 3}
        base = t.gemm(x, t.act, None, torch.bfloat16, swap)
        assert rel(base, e.apply(x)) < TOL
        cfg = {**swap, "ROWQ": chunk, "PDL": 1}
        assert torch.equal(t.gemm(x, t.act, None, torch.bfloat16, cfg), base), (k, chunk)
    _served_as_entry(t, e, x, cfg, base)


@pytest.mark.gpu
def test_tiled_gemm_on_row_codes_with_pdl():
    """On the GPU: the tiled FP8 GEMM of many rows (gemm.wgemm_kernel; 64x64 and 128x128 tiles, split-K 1 and 4)
    on fp8_rowgemv's row quantizers (cfg ROWQ 1 and 2048) chained by PDL (cfg PDL: wgemm_kernel GDC) gives the
    bits of the same tiles on quantize_activation_codes' codes without PDL, near the reference: 256 rows with
    a zero row and large values in a row's first and last places, a bias and N not a multiple of the tile;
    then as a tuned entry through the layer call, its launch plan's replay, and captured and replayed."""
    t, e = linear_pair("fp8_channel", 1000, 4096, "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
                       device="cuda", bias=True)
    x = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16) * 2
    x[3, 4095], x[5, 0], x[7] = -70.0, 55.0, 0.0
    for tiles in ({"BLOCK_M": 64, "BLOCK_N": 64, "SPLIT_K": 1, "num_warps": 4, "num_stages": 4},
                  {"BLOCK_M": 128, "BLOCK_N": 128, "SPLIT_K": 4, "num_warps": 8, "num_stages": 3}):
        cfg0 = {**tiles, "BLOCK_K": 128, "GROUP_M": 8, "FULL_TILE": 0, "COOP": 0}
        base = t.gemm(x, t.act, None, torch.bfloat16, cfg0)
        assert rel(base, e.apply(x)) < TOL
        for rowq in (1, 2048):
            cfg = {**cfg0, "ROWQ": rowq, "PDL": 1}
            assert torch.equal(t.gemm(x, t.act, None, torch.bfloat16, cfg), base), (tiles, rowq)
    _served_as_entry(t, e, x, cfg, base)


def _served_as_entry(t, e, x, cfg, want):
    """cfg as the layer's tuned entry for x's row count: the layer call, then its launch plan's replay, bit for bit
    `want`; and the GEMM captured in a CUDA graph and replayed (test_triton_gpu._capture_and_replay)."""
    from test_triton_gpu import _capture_and_replay

    t.gemm._configs[(x.shape[0], t.act)] = cfg
    t.apply(x)
    assert torch.equal(t.apply(x), want)
    _capture_and_replay(lambda xx: t.gemm(xx, t.act, None, torch.bfloat16, cfg), x, e.apply)


@pytest.mark.parametrize("k,m,chunk", [(320, 3, 1), (16512, 2, 4096), (16512, 3, 0)])
def test_per_token_codes_take_the_row_kernels_where_the_rules_say(k, m, chunk, monkeypatch):
    """launch.quantize_activation_codes per token: rows up to ONE_TILE_MAX_K wide from row_codes_kernel, wider
    ones from split_codes_kernel in TOKEN_SPLIT_CHUNK-wide programs up to TOKEN_SPLIT_MAX_ROWS rows and from
    act_qdq_kernel's two passes above (chunk 0); either way torch's float8 cast's bytes and scales."""
    from oracle_triton import fastlaunch, launch
    from oracle_triton.formats import ACT_TOKEN

    launched: list = []
    real = fastlaunch.launch

    def spy(fn, grid, warps, *args, **kw):
        launched.append((getattr(fn, "__name__", str(fn)), kw.get("CHUNK")))
        return real(fn, grid, warps, *args, **kw)
    monkeypatch.setattr(fastlaunch, "launch", spy)
    monkeypatch.setattr(launch, "TOKEN_SPLIT_MAX_ROWS", 2)         # 256 ships; the interpreter takes few rows
    x = torch.randn(m, k, dtype=torch.bfloat16, device=DEV) * 3
    codes, scales = launch.quantize_activation_codes(x, ACT_TOKEN, None, launch.device_facts(x.device))
    want = {1: ("row_codes_kernel", None), 4096: ("split_codes_kernel", 4096), 0: ("act_qdq_kernel", None)}[chunk]
    assert launched == [want]
    ref, ref_s = torch_token_codes(x)
    assert torch.equal(codes.view(torch.uint8), ref) and torch.equal(scales, ref_s)
