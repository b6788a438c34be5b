"""The tiled FP8 GEMM's written-out promotion (cfg PROMO 1: each K tile's float8 product into a zero accumulator,
then added to the fp32 sum): against oracle-emulation and the dot's own promotion, in Triton's CPU interpreter
(compiled on a GPU machine); its config check; and on an sm_90 GPU on same-sign sums over K = 4096, where a float8
dot that promoted less often than every K tile would be 6.6e-2 off (gemm.fp8_swap_kernel's docstring).

Tolerance as test_triton_dense.py: 1e-2 relative to the emulation (bf16 roundings of the reference).
"""
from __future__ import annotations

import pytest
import torch

from helpers import fp8_tiles, linear_pair, quantize, rel

TOL = 1e-2
DEV = "cuda" if torch.cuda.is_available() else "cpu"



def _positive_pair(n: int, k: int, device: str):
    """A per-channel FP8 layer whose weights are all positive (oracle-triton's and the emulation's)."""
    from oracle import LinearLayer
    from oracle.catalog import Mode
    from oracle_emulation.linear import EmulationLinear
    from oracle_triton.linear import TritonLinear

    layer = LinearLayer(name=f"pos-{n}x{k}", in_features=k, out_features=n, weight_format="fp8_channel")
    mode = Mode(weight="fp8_channel", activation="fp8", name="w8a8_fp8_channel",
                params={"activation_granularity": "token"})
    tensors = quantize("fp8_channel", torch.rand(n, k, device=device) * 0.05 + 0.01)
    t, e = TritonLinear(layer, mode, None), EmulationLinear(layer, mode, None)
    t.process_weights(**tensors)
    e.process_weights(**tensors)
    return t, e


@pytest.mark.slow
@pytest.mark.parametrize("fmt,mode,gran", [("fp8_channel", "w8a8_fp8_channel", "token"),
                                           ("fp8_tensor", "w8a8_fp8_tensor", "tensor")])
def test_promo_matches_emulation_and_the_dots_own(fmt, mode, gran):
    """Partial M, N and K tiles, split-K 1 and 3, a bias: PROMO 1 within 1e-2 of the emulation and within fp32
    summation order of PROMO 0 on the same codes."""
    from oracle_triton.formats import check_config
    from oracle_triton.linear import dynamic_tensor_scale

    t, e = linear_pair(fmt, 96, 352, mode, "fp8", {"activation_granularity": gran}, bias=True, device=DEV)
    x = torch.randn(70, 352, dtype=torch.bfloat16, device=DEV) * 3
    scale = dynamic_tensor_scale(x) if gran == "tensor" else None
    for cfg in (fp8_tiles(64, 32, 1), fp8_tiles(32, 64, 3)):
        check_config({**cfg, "PROMO": 1}, t.gemm.layout)
        y = t.gemm(x, t.act, scale, torch.bfloat16, {**cfg, "PROMO": 1})
        assert rel(y, e.apply(x)) < TOL, cfg
        assert rel(y, t.gemm(x, t.act, scale, torch.bfloat16, cfg)) < 1e-3, cfg


def test_promo_is_refused_where_scales_change_along_k():
    from oracle_triton.formats import check_config, layout_for

    check_config(fp8_tiles(64, 64, 1, PROMO=1), layout_for("fp8_channel", 256, 512))
    for lay in (layout_for("fp8_block", 256, 512), layout_for("int4", 256, 512, 128)):
        with pytest.raises(ValueError, match="PROMO=1"):
            check_config(fp8_tiles(64, 64, 1, PROMO=1), lay)
    with pytest.raises(ValueError, match="PROMO=2"):
        check_config(fp8_tiles(64, 64, 1, PROMO=2), layout_for("fp8_channel", 256, 512))
    with pytest.raises(ValueError, match="tiled GEMM only"):     # a swap entry would drop it silently
        check_config(fp8_tiles(16, 64, 1, SWAP=1, PROMO=1), layout_for("fp8_channel", 256, 512))


def test_promo_is_refused_where_two_accumulators_spill():
    """128 x 128 on 4 warps: 128 fp32 registers a thread for the sum and as many for the promotion's product
    (sm_90 ptxas: 292 bytes of spills; R150 timed it 3.3x slower than on 8 warps). 8 warps or 128 x 64 fit."""
    from oracle_triton.formats import check_config, layout_for

    lay = layout_for("fp8_channel", 256, 512)
    with pytest.raises(ValueError, match="128 fp32 registers a thread"):
        check_config(fp8_tiles(128, 128, 1, PROMO=1), lay)
    check_config(fp8_tiles(128, 128, 1, warps=8, PROMO=1), lay)
    check_config(fp8_tiles(128, 64, 1, PROMO=1), lay)
    check_config(fp8_tiles(128, 128, 1), lay)          # without PROMO one accumulator fits


@pytest.mark.gpu
@pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)),
                    reason="the float8 dot needs sm_89+")
@pytest.mark.parametrize("cfg", [fp8_tiles(128, 64, 1), fp8_tiles(64, 64, 2), fp8_tiles(128, 128, 4, warps=8)])
def test_promo_keeps_same_sign_sums_within_tolerance_on_the_gpu(cfg):
    """256 rows of positive activations times positive weights over K = 4096 (the sums the float8 accumulator
    loses most on): PROMO 1 and 0 both within 1e-2 of the emulation and within 1e-3 of each other; PROMO 1 the
    same bits on a second call and under CUDA-graph replay."""
    t, e = _positive_pair(2048, 4096, "cuda")
    x = torch.rand(256, 4096, device="cuda").to(torch.bfloat16) + 0.1
    ref = e.apply(x)
    y0 = t.gemm(x, t.act, None, torch.bfloat16, cfg)
    y1 = t.gemm(x, t.act, None, torch.bfloat16, {**cfg, "PROMO": 1})
    assert rel(y0, ref) < TOL and rel(y1, ref) < TOL
    assert rel(y1, y0) < 1e-3
    assert torch.equal(t.gemm(x, t.act, None, torch.bfloat16, {**cfg, "PROMO": 1}), y1)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        yg = t.gemm(x, t.act, None, torch.bfloat16, {**cfg, "PROMO": 1})
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(yg, y1)
