"""The one-tile 4-bit GEMV (cfg W4ROW 1, w4_rowgemv: each program's [BLOCK_K / 8, BLOCK_N] words in one load) for
weights in GPTQ's [K/8, N] word layout: INT4 (symmetric and with zero points) and MXFP4 / NVFP4 repacked at load,
against oracle-emulation in Triton's CPU interpreter (the integer decoders, DECODE 0; compiled on a GPU machine),
its config checks on the host, and on a GPU with the word decoders (DECODE 3; HX 1: INT4's products in packed
f16), a launch plan and graph replay.

Tolerance as test_triton_gemv.py (1e-2 relative Frobenius): the kernel scales per-group partial sums of exact
fp32 products where the reference rounds each dequantized weight to bf16 (relative 2**-9 per weight); a wrong
code, zero point, scale or K range gives errors of order 1.
"""
from __future__ import annotations

import pytest
import torch

from helpers import linear_pair, rel

TOL = 1e-2
DEV = "cuda" if torch.cuda.is_available() else "cpu"
FORMATS = [("int4", "w4a16_int4", True), ("int4", "w4a16_int4", False), ("mxfp4", "w4a16_mx", False),
           ("nvfp4", "w4a16_nvfp4", False)]


def _cfg(bn: int, bk: int, split: int, warps: int, decode: int = 0, **extra: int) -> dict[str, int]:
    return {"W4ROW": 1, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "DECODE": decode, "num_warps": warps,
            "num_stages": 1, **extra}


@pytest.mark.slow
@pytest.mark.parametrize("fmt,mode,symmetric", FORMATS)
def test_tile_gemv_matches_emulation(fmt, mode, symmetric):
    """N = 96 (not a multiple of 64: masked columns), K = 640 (a partial last K tile at 256 and 1024, five whole
    ones at 128), the whole K in one program (split 1) or split 3 / 5 (the slices summed in a fixed order), a
    bias; within float-summation order of the shipped GEMV on the same weights."""
    from oracle_triton.formats import check_config
    from oracle_triton.launch import gemv_config

    n, k = 96, 640
    t, e = linear_pair(fmt, n, k, mode, "bf16", bias=True, device=DEV, symmetric=symmetric)
    assert t.gemm.layout.pack == 8                      # GPTQ's words, or E2M1 repacked at load
    x = torch.randn(1, k, dtype=torch.bfloat16, device=DEV) * 3
    ref = e.apply(x)
    lay = t.gemm.layout
    gemv = t.gemm(x, 0, None, torch.bfloat16,
                  {**gemv_config(n, k, 8, lay.elem, lay.group, words=lay.elem != 3), "DECODE": 0})
    for bn, bk, split, warps in ((8, 1024, 1, 4), (4, 1024, 1, 2), (32, 128, 5, 4), (64, 256, 3, 4), (16, 1024, 1, 8)):
        cfg = _cfg(bn, bk, split, warps, EVICT=1, KN=int(lay.elem != 3))
        check_config(cfg, lay)
        assert t.gemm.serves(cfg, 1, 0) and not t.gemm.serves(cfg, 2, 0)
        y = t.gemm(x, 0, None, torch.bfloat16, cfg)
        assert y.shape == (1, n) and y.dtype == torch.bfloat16
        assert rel(y, ref) < TOL, (bn, bk, split)
        assert rel(y, gemv) < 2e-3, (bn, bk, split)
    x0 = torch.zeros(1, k, dtype=torch.bfloat16, device=DEV)          # a zero row: the output is the bias
    assert torch.equal(t.gemm(x0, 0, None, torch.bfloat16, _cfg(8, 1024, 1, 4)), e.apply(x0))


def test_tile_gemv_config_checks():
    """A W4ROW entry serves one row of layer-dtype activations on words in the [K/8, N] layout whose K its tiles
    cover exactly (SPLIT_K = cdiv(K, BLOCK_K)); any other split, layout or tile is refused by serves (a tuned
    entry falls back to the rules) and raises when forced."""
    from oracle_triton.formats import check_config

    t, _ = linear_pair("int4", 64, 512, "w4a16_int4", "bf16", device=DEV)
    good, bad = _cfg(4, 512, 1, 4), _cfg(4, 256, 1, 4)
    assert t.gemm.serves(good, 1, 0) and t.gemm.serves(_cfg(16, 256, 2, 4), 1, 0)
    assert not t.gemm.serves(good, 2, 0) and not t.gemm.serves(bad, 1, 0)
    with pytest.raises(ValueError, match="SPLIT_K = cdiv"):
        t.gemm(torch.randn(1, 512, dtype=torch.bfloat16, device=DEV), 0, None, torch.bfloat16, bad)
    for wrong in (_cfg(3, 512, 1, 4), _cfg(4, 64, 8, 4), _cfg(4, 384, 2, 4), _cfg(4, 512, 1, 4, decode=2)):
        with pytest.raises(ValueError, match="one-tile 4-bit GEMV"):
            check_config(wrong, t.gemm.layout)
    check_config(_cfg(4, 512, 1, 4, MAXNREG=32), t.gemm.layout)
    check_config(_cfg(4, 512, 1, 4, 3, HX=1), t.gemm.layout)
    with pytest.raises(ValueError, match="packed f16"):
        check_config(_cfg(4, 512, 1, 4, 0, HX=1), t.gemm.layout)         # HX: the compiled word decoder only
    with pytest.raises(ValueError, match="register cap"):
        check_config(_cfg(4, 512, 1, 4, MAXNREG=16), t.gemm.layout)
    fp8, _ = linear_pair("fp8_channel", 64, 512, "w8a16_fp8_channel", "bf16", device=DEV)
    assert not fp8.gemm.serves(good, 1, 0)
    with pytest.raises(ValueError, match="GPTQ's"):
        check_config(good, fp8.gemm.layout)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt,mode,symmetric", FORMATS)
def test_tile_gemv_on_gpu(fmt, mode, symmetric):
    """On the GPU, the word decoders (DECODE 3, as the tuned entries run) at 2048x4096, the whole K per program
    (4 and 16 columns, 16 warps; INT4 also in packed f16, 16 and 32 warps) and split 2: near the reference and
    near the integer decoders' result; through a tuned choice, the launch plan (the second eager call) replays
    the same bits, and a captured graph replays them."""
    from test_triton_gpu import _capture_and_replay

    t, e = linear_pair(fmt, 2048, 4096, mode, "bf16", device="cuda", bias=True, symmetric=symmetric)
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    ref = e.apply(x)
    exact = t.gemm(x, 0, None, torch.bfloat16, _cfg(4, 4096, 1, 16))
    assert rel(exact, ref) < TOL
    hx = [_cfg(16, 4096, 1, 16, 3, EVICT=1, HX=1), _cfg(16, 4096, 1, 32, 3, EVICT=1, HX=1)] if fmt == "int4" else []
    for cfg in [_cfg(4, 4096, 1, 16, 3, EVICT=1), _cfg(16, 4096, 1, 16, 3, EVICT=1), _cfg(16, 2048, 2, 8, 3, EVICT=1),
                _cfg(4, 4096, 1, 16, 3, EVICT=1, MAXNREG=32)] + hx:
        y = t.gemm(x, 0, None, torch.bfloat16, cfg)
        assert rel(y, ref) < TOL, cfg
        assert rel(y, exact) < 2e-3, cfg                # HX: each word's two f16 lanes round to 11 bits
    if fmt == "int4":           # HX's f16 lanes: activations up to 16384 (x 2**-4 inside) stay finite
        big = x.clone()
        big[0, :64] = 16384.0
        y = t.gemm(big, 0, None, torch.bfloat16, hx[0])
        assert torch.isfinite(y).all() and rel(y, e.apply(big)) < TOL
    cfg = _cfg(4, 4096, 1, 16, 3, EVICT=1, MAXNREG=32)        # ptxas's register cap: 4 programs of 16 warps an SM
    t.gemm._configs[(1, 0)] = cfg
    t.apply(x)
    assert torch.equal(t.apply(x), t.gemm(x, 0, None, torch.bfloat16, cfg))      # the plan's replay
    _capture_and_replay(lambda xx: t.gemm(xx, 0, None, torch.bfloat16, cfg), x, e.apply)
