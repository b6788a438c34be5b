"""Round trips quantize -> dequantize on random data, against error bounds derived from each format.

Data: Gaussian rows whose magnitudes span 2**-8 .. 2**8 (so both tiny and large blocks
occur) plus a few outliers. Each bound is stated with its reason; `SLACK` absorbs the
float32 arithmetic of scaling (relative 1e-6), never the format's own error.
"""
from __future__ import annotations

import pytest
import torch

from oracle_emulation.formats import e8m0, fp8, ggml_iq2, ggml_q8_0, int4, mxfp, nvfp4

SLACK = 1 + 1e-6


def _data(n: int = 64, k: int = 512) -> torch.Tensor:
    g = torch.Generator().manual_seed(1234)
    w = torch.randn(n, k, generator=g) * torch.exp2(torch.randint(-8, 9, (n, 1), generator=g).float())
    w[torch.randint(0, n, (8,), generator=g), torch.randint(0, k, (8,), generator=g)] *= 50.0
    return w


def _expand(s: torch.Tensor, block: int) -> torch.Tensor:
    return s.repeat_interleave(block, dim=-1)


@pytest.mark.parametrize("fmt", ["fp8_tensor", "fp8_channel", "fp8_block"])
def test_fp8_weight_round_trip(fmt):
    # scale s = amax/448 (fp32), so |w/s| <= 448 and nothing saturates. E4M3 has 3 mantissa
    # bits: a normal value is off by at most half a spacing, 2**-4 relative; a subnormal
    # (|w/s| < 2**-6) by half the subnormal spacing 2**-9, i.e. 2**-10 * s.
    w = _data()
    q = fp8.quantize(w, fmt)
    back = fp8.dequantize(q["weight"], q["weight_scale"], fmt)
    if fmt == "fp8_tensor":
        s = (w.abs().amax() / 448).expand_as(w)
    elif fmt == "fp8_channel":
        s = (w.abs().amax(dim=1, keepdim=True) / 448).expand_as(w)
    else:
        s = (w.unflatten(1, (-1, 128)).unflatten(0, (-1, 64)).abs().amax(dim=(1, 3)) / 448)
        s = s.repeat_interleave(64, 0)[:, :, None].expand(-1, -1, 128).flatten(1)
        s = s.repeat_interleave(1, 0)
    bound = torch.maximum(w.abs() * 2.0 ** -4, s * 2.0 ** -10) * SLACK
    assert bool(((back - w).abs() <= bound).all())


def test_fp8_block_round_trip_with_ragged_edges():
    w = _data(130, 200)
    q = fp8.quantize(w, "fp8_block")
    assert list(q["weight_scale"].shape) == [2, 2]
    back = fp8.dequantize(q["weight"], q["weight_scale"], "fp8_block")
    s = fp8._expand_block_scale(q["weight_scale"], 130, 200)
    assert bool(((back - w).abs() <= torch.maximum(w.abs() * 2.0 ** -4, s * 2.0 ** -10) * SLACK).all())
    # and the stored scales are the block maxima over 448, block by block
    assert q["weight_scale"][1, 1].item() == pytest.approx(w[128:, 128:].abs().max().item() / 448, rel=1e-6)


def test_mxfp8_round_trip():
    # E8M0 scale s = 2**ceil(log2(amax/448)): amax/s <= 448, no saturation; the same E4M3 bound.
    w = _data()
    q = mxfp.quantize(w, "mxfp8")
    back = mxfp.dequantize(q["weight"], q["weight_scale"], "mxfp8")
    s = _expand(e8m0.decode(q["weight_scale"]), 32)
    amax = _expand(w.unflatten(1, (-1, 32)).abs().amax(-1), 32)
    assert bool((s >= amax / 448).all()) and bool((s < 2 * amax / 448).all())   # the ceil rule
    assert bool(((back - w).abs() <= torch.maximum(w.abs() * 2.0 ** -4, s * 2.0 ** -10) * SLACK).all())


def test_mxfp4_round_trip():
    # s = 2**ceil(log2(amax/6)) so amax/s in (3, 6]: nothing saturates. E2M1 spacing is 0.5
    # below 2, 1 in [2, 4), 2 in [4, 6]: half a spacing is <= |v|/4 for |v| >= 1 and 0.25
    # below, so |err| <= max(|w|/4, s/4), and since s < amax/3, |err| <= max(|w|/4, amax/12).
    w = _data()
    q = mxfp.quantize(w, "mxfp4")
    back = mxfp.dequantize(q["weight"], q["weight_scale"], "mxfp4")
    s = _expand(e8m0.decode(q["weight_scale"]), 32)
    amax = _expand(w.unflatten(1, (-1, 32)).abs().amax(-1), 32)
    err = (back - w).abs()
    assert bool((err <= torch.maximum(w.abs() / 4, s / 4) * SLACK).all())
    assert bool((err <= torch.maximum(w.abs() / 4, amax / 12) * SLACK).all())


def test_mxfp4_floor_rounding_saturates_as_the_ocp_rule_says():
    # OCP rule: s = 2**(floor(log2 amax) - 2): amax/s in [4, 8), so values above 6s clip to 6s.
    w = _data()
    q = mxfp.quantize(w, "mxfp4", rounding="floor")
    back = mxfp.dequantize(q["weight"], q["weight_scale"], "mxfp4")
    s = _expand(e8m0.decode(q["weight_scale"]), 32)
    amax = _expand(w.unflatten(1, (-1, 32)).abs().amax(-1), 32)
    assert bool((amax / s >= 4).all()) and bool((amax / s < 8).all())
    clip = (w.abs() - 6 * s).clamp(min=0)
    assert bool(((back - w).abs() <= (torch.maximum(w.abs() / 4, s / 4) + clip) * SLACK).all())


def test_nvfp4_round_trip():
    # Per 16: s = E4M3(amax/6/g) * g. E4M3 rounding of the scale is 2**-4 relative (normal
    # range), so amax/s may reach 6 * (1 + 2**-4) and the largest values may clip to 6s;
    # otherwise the E2M1 bound applies: |err| <= max(|w|/4, s/4) + max(0, |w| - 6s).
    w = _data()
    q = nvfp4.quantize(w)
    g = q["weight_global_scale"]
    assert g.item() == pytest.approx(w.abs().max().item() / (6 * 448), rel=1e-6)
    back = nvfp4.dequantize(q["weight"], q["weight_scale"], g)
    block_s = q["weight_scale"].float() * g
    ideal = w.unflatten(1, (-1, 16)).abs().amax(-1) / 6
    normal = ideal / g >= 2.0 ** -6
    ratio = block_s[normal] / ideal[normal]
    assert bool((ratio <= 1 + 2.0 ** -4).all()) and bool((ratio >= 1 / (1 + 2.0 ** -4)).all())
    s = _expand(block_s, 16)
    clip = (w.abs() - 6 * s).clamp(min=0)
    assert bool(((back - w).abs() <= (torch.maximum(w.abs() / 4, s / 4) + clip) * SLACK).all())
    assert bool((clip <= w.abs() * (1 - 1 / (1 + 2.0 ** -4)) * SLACK).all() or not normal.all())


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("group", [32, 128])
def test_int4_round_trip(symmetric, group):
    # The zero point is an integer offset, so dequantization error is the rounding of w/s
    # alone: |err| <= s/2, with s the stored fp16 scale (the quantizer divides by that same
    # value). No clipping: s is rounded *up* to fp16, so an asymmetric group spans at most
    # 15 steps, a symmetric one at most 7 each side of zero 8.
    w = _data(64, 256)
    q = int4.quantize(w, group_size=group, symmetric=symmetric)
    assert q["weight"].dtype == torch.int32 and list(q["weight"].shape) == [256 // 8, 64]
    back = int4.dequantize(q["weight"], q["weight_scale"], q["weight_zero_point"])
    s = q["weight_scale"].float().repeat_interleave(group, dim=0).t()
    assert bool(((back - w).abs() <= s / 2 * SLACK + 1e-30).all())


def test_q8_0_round_trip():
    # ggml: q = roundf(w / d) with d = amax/127 (|w - q d| <= d/2), stored as fp16 d16, so
    # dequantization adds |q| * |d - d16| <= 127 * |d - d16|.
    w = _data()
    raw = ggml_q8_0.quantize(w)["weight"]
    back = ggml_q8_0.dequantize(raw)
    d = w.unflatten(1, (-1, 32)).abs().amax(-1) / 127
    d16 = d.half().float()
    bound = _expand(d / 2 + 127 * (d - d16).abs(), 32)
    assert bool(((back - w).abs() <= bound * SLACK).all())


@pytest.mark.parametrize("fmt", ["iq2_xs", "iq2_xxs"])
def test_iq2_round_trip_is_no_worse_than_any_codeword(fmt):
    # The quantizer searches all codewords at the stored scale and signs, so each group of 8
    # is at least as close as the same group decoded with codeword 0 (all magnitudes 8),
    # signs and scale unchanged: a bound that holds by construction, checked group by group.
    w = _data(16, 512)
    raw = ggml_iq2.quantize(w, fmt)["weight"]
    back = ggml_iq2.dequantize(raw, fmt)
    zeroed = raw.clone()
    if fmt == "iq2_xxs":
        body = zeroed[..., 2:66].unflatten(-1, (8, 8))
        body[..., 0:4] = 0                                            # grid index bytes
        zeroed[..., 2:66] = body.flatten(-2)
    else:
        zeroed[..., 2:66:2] = 0                                       # low 8 bits of each index
        zeroed[..., 3:66:2] &= 0xFE                                   # index bit 8
    ref = ggml_iq2.dequantize(zeroed, fmt)
    err = ((back - w) ** 2).unflatten(1, (-1, 8)).sum(-1)
    err0 = ((ref - w) ** 2).unflatten(1, (-1, 8)).sum(-1)
    assert bool((err <= err0 * SLACK + 1e-12).all())
    # and overall a 2-bit codebook keeps the relative RMS error well under half
    assert ((back - w).norm() / w.norm()).item() < 0.45


def test_bf16_weights_quantize_like_their_float32_values():
    w = _data().bfloat16()
    for fmt in ("mxfp4", "fp8_block"):
        a = (mxfp if fmt == "mxfp4" else fp8).quantize(w, fmt)
        b = (mxfp if fmt == "mxfp4" else fp8).quantize(w.float(), fmt)
        assert all(torch.equal(a[key].view(torch.uint8) if a[key].dtype == fp8.E4M3 else a[key],
                               b[key].view(torch.uint8) if b[key].dtype == fp8.E4M3 else b[key]) for key in a)
