"""ORACLE_EMULATION_WEIGHTS=packed: the emulation keeps the checkpoint tensors and dequantizes inside
each call. Results must be bit for bit the resident mode's (the same functions run, later), while
what stays in memory between calls is the checkpoint's bytes, not a BF16 matrix."""
from __future__ import annotations

import pytest
import torch
from emulation_helpers import LINEAR_MODES, MOE_MODES, linear_tensors, load_specs, mode_of, moe_tensors, quantize

from oracle import LinearLayer, MoELayer
from oracle_emulation.linear import EmulationLinear
from oracle_emulation.moe import EmulationMoE
from oracle_emulation.weights import WEIGHTS_ENV

SPECS = load_specs()


def _linear(fmt, act, mode_env, monkeypatch, n=64, k=256):
    monkeypatch.setenv(WEIGHTS_ENV, mode_env)
    layer = LinearLayer(name="m", in_features=k, out_features=n, weight_format=fmt)
    spec = SPECS["emulation.linear"]
    kernel = EmulationLinear(layer, mode_of(spec, fmt, act), spec)
    torch.manual_seed(0)
    kernel.process_weights(**linear_tensors(quantize(torch.randn(n, k) * 0.05, fmt)), bias=torch.randn(n))
    return kernel


@pytest.mark.parametrize("fmt,act", LINEAR_MODES)
def test_linear_packed_equals_resident(fmt, act, monkeypatch):
    resident = _linear(fmt, act, "resident", monkeypatch)
    packed = _linear(fmt, act, "packed", monkeypatch)
    x = torch.randn(3, 256).to(torch.bfloat16)
    assert torch.equal(packed.apply(x), resident.apply(x))
    assert torch.equal(packed.weight, resident.weight)
    assert packed.stored.resident_bytes() < resident.stored.resident_bytes()


@pytest.mark.parametrize("fmt,act", [m for m in MOE_MODES if m[0] in ("mxfp4", "fp8_block", "int4")])
def test_moe_packed_equals_resident(fmt, act, monkeypatch):
    e, h, i = 4, 128, 128
    layer = MoELayer(name="experts", num_experts=e, top_k=2, hidden_size=h, intermediate_size=i, weight_format=fmt,
                     group_size=32 if fmt == "int4" else None)
    spec = SPECS["emulation.moe"]
    torch.manual_seed(0)
    tensors = moe_tensors(quantize(torch.randn(e, 2 * i, h) * 0.05, fmt), quantize(torch.randn(e, h, i) * 0.05, fmt))
    out = []
    for env in ("resident", "packed"):
        monkeypatch.setenv(WEIGHTS_ENV, env)
        kernel = EmulationMoE(layer, mode_of(spec, fmt, act), spec)
        kernel.process_weights(**tensors)
        x = torch.randn(5, h, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
        ids = torch.tensor([[0, 1], [2, 3], [1, 2], [3, 0], [0, 2]])
        out.append((kernel.apply(x, torch.full((5, 2), 0.5), ids), kernel.w13, kernel.stored13.resident_bytes()))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
    assert out[1][2] < out[0][2]


def test_an_unknown_value_warns_and_keeps_weights_resident(monkeypatch):
    with pytest.warns(UserWarning, match="ORACLE_EMULATION_WEIGHTS='lean' is not one of resident, packed"):
        kernel = _linear("fp8_channel", "bf16", "lean", monkeypatch)
    assert kernel.stored.mode == "resident"


def test_packed_mode_still_refuses_bad_tensors_at_load(monkeypatch):
    """Validation happens in process_weights in both modes (one dequantization there), not at the first call."""
    monkeypatch.setenv(WEIGHTS_ENV, "packed")
    layer = LinearLayer(name="m", in_features=256, out_features=64, weight_format="fp8_channel")
    spec = SPECS["emulation.linear"]
    kernel = EmulationLinear(layer, mode_of(spec, "fp8_channel", "bf16"), spec)
    q = linear_tensors(quantize(torch.randn(64, 256), "fp8_channel"))
    q["weight_scale"] = torch.full_like(q["weight_scale"], float("nan"))
    with pytest.raises(Exception, match="weight_scale"):
        kernel.process_weights(**q)
