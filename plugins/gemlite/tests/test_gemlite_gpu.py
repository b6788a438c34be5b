"""On an NVIDIA GPU with gemlite installed: its INT4 (symmetric and with zero points) and FP8
per-channel products against oracle-emulation, and capture/replay. Tolerance 1e-2 relative
Frobenius: gemlite keeps scales and zero points in bf16 and quantizes FP8 activations per token
with its own kernel (a flipped E4M3 code here and there); measured 3-5e-3 on an H200."""
from __future__ import annotations

import pytest
import torch

from oracle import LinearLayer
from oracle.catalog import Mode

pytestmark = pytest.mark.gpu
gemlite = pytest.importorskip("gemlite")
TOL = 1e-2
MODES = {"int4": Mode(weight="int4", activation="bf16", name="w4a16_int4"),
         "fp8_channel": Mode(weight="fp8_channel", activation="fp8", name="w8a8_fp8_channel",
                             params={"activation_granularity": "token"})}


def _pair(fmt, n, k, symmetric=True, bias=False):
    from oracle_emulation.formats import codec_for
    from oracle_emulation.linear import EmulationLinear
    from oracle_gemlite.linear import GemliteLinear

    layer = LinearLayer(name="l", in_features=k, out_features=n, weight_format=fmt,
                        group_size=128 if fmt == "int4" else None, has_bias=bias)
    w = torch.randn(n, k, device="cuda") * 0.05
    q = codec_for(fmt).quantize(w, fmt, group_size=128, symmetric=symmetric) if fmt == "int4" else \
        codec_for(fmt).quantize(w, fmt)
    tensors = {a: b for a, b in q.items() if b is not None}
    if bias:
        tensors["bias"] = torch.randn(n, device="cuda")
    g, e = GemliteLinear(layer, MODES[fmt], None), EmulationLinear(layer, MODES[fmt], None)
    g.process_weights(**tensors)
    e.process_weights(**tensors)
    return g, e


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("fmt,symmetric", [("int4", True), ("int4", False), ("fp8_channel", True)])
def test_agrees_with_emulation_and_replays(fmt, symmetric):
    g, e = _pair(fmt, 1024, 2048, symmetric, bias=True)
    for m in (1, 16, 64):
        x = torch.randn(m, 2048, device="cuda", dtype=torch.bfloat16)
        err = _rel(g.apply(x), e.apply(x))
        assert err < TOL, (fmt, m, err)
    x = torch.randn(16, 2048, device="cuda", dtype=torch.bfloat16)
    eager = g.apply(x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = g.apply(x)
    graph.replay()
    torch.cuda.synchronize()
    assert _rel(out, eager) < 1e-3
