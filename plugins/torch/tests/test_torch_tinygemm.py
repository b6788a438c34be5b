"""torch's tinygemm INT4 as an oracle-torch kernel: numerics against oracle-emulation (through the
CPU build of the same operator), bad input, its declaration through the engine (the `peer` tier
after the project's own kernels), and selection by measurement.

Tolerance: tinygemm stores each group's scale and zero term in bf16 (relative 2**-9 each) and
rounds its output to bf16; the emulation rounds each dequantized weight to bf16 and its output
to bf16. Independent 2**-9 roundings leave a relative Frobenius error of a few 1e-3 (measured
2.6-3.0e-3 here); the bound is 1e-2. A wrong nibble order, group map or zero point gives
errors of order 1 (checked below with a deliberately wrong zero point).
"""
from __future__ import annotations

import json

import pytest
import torch
from oracle_emulation.formats import codec_for
from oracle_emulation.linear import EmulationLinear

from oracle import LinearLayer, Platform, select_backend
from oracle.catalog import Mode
from oracle.errors import TensorError
from oracle.tuning.metadata import _oracle_version
from oracle.tuning.schema import layer_key
from oracle_torch import runtime
from oracle_torch.tinygemm import TorchTinyGemmInt4Linear, inner_k_tiles

TOLERANCE = 1e-2
MODE = Mode(weight="int4", activation="bf16", name="w4a16_int4")
ON_H200 = {"torch": "2.11.0", "triton": "3.6.0"}


def _layer(n, k, group=128, dtype="bfloat16"):
    return LinearLayer(name="model.layers.0.mlp.down_proj", in_features=k, out_features=n,
                       weight_format="int4", group_size=group, dtype=dtype)


def _tensors(n, k, group, symmetric):
    w = torch.randn(n, k) * 0.05
    q = codec_for("int4").quantize(w, "int4", group_size=group, symmetric=symmetric)
    return {name: t for name, t in q.items() if t is not None}


def _pair(n, k, group, symmetric, bias=False):
    layer = _layer(n, k, group)
    tensors = _tensors(n, k, group, symmetric)
    if bias:
        tensors["bias"] = torch.randn(n).to(torch.bfloat16)
    ref = EmulationLinear(layer, MODE, None)
    ref.process_weights(**tensors)
    tiny = TorchTinyGemmInt4Linear(layer, MODE, None)
    tiny.process_weights(**tensors)
    return tiny, ref, tensors


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "zero-points"])
@pytest.mark.parametrize("group,k", [(32, 96), (64, 192), (128, 384), (128, 1024), (256, 512)])
def test_agrees_with_emulation(group, k, symmetric):
    tiny, ref, _ = _pair(64, k, group, symmetric)
    for m in (1, 5, 16):
        x = torch.randn(m, k).to(torch.bfloat16)
        y = tiny.apply(x)
        assert y.dtype == torch.bfloat16 and y.shape == (m, 64)
        assert _rel(y, ref.apply(x)) < TOLERANCE


def test_bias_leading_dims_float_input_and_empty_batch():
    tiny, ref, _ = _pair(48, 256, 64, False, bias=True)
    x = torch.randn(2, 3, 256)
    assert tiny.apply(x).shape == (2, 3, 48)
    assert _rel(tiny.apply(x), ref.apply(x.to(torch.bfloat16))) < TOLERANCE
    assert tiny.apply(torch.randn(0, 256)).shape == (0, 48)


def test_a_wrong_zero_point_is_caught_by_the_comparison():
    """The check above has teeth: zero points off by one give an error of order 1."""
    tiny, ref, tensors = _pair(64, 256, 128, False)
    shifted = dict(tensors, weight_zero_point=tensors["weight_zero_point"] + 0x11111111)
    broken = TorchTinyGemmInt4Linear(_layer(64, 256), MODE, None)
    broken.process_weights(**shifted)
    x = torch.randn(4, 256).to(torch.bfloat16)
    assert _rel(broken.apply(x), ref.apply(x)) > 0.1


def test_inner_k_tiles_is_the_widest_that_divides_k():
    assert [inner_k_tiles(k) for k in (4096, 192, 96)] == [8, 4, 2]
    with pytest.raises(TensorError, match="K divisible by 32"):
        inner_k_tiles(48)


@pytest.mark.parametrize("change,name,fragment", [
    (lambda t: dict(t, weight_scale=t["weight_scale"][:3]), "weight_scale", "group size in"),
    (lambda t: dict(t, weight_zero_point=t["weight_zero_point"][:, :4]), "weight_zero_point", "shape"),
    (lambda t: dict(t, weight=t["weight"].float()), "weight", "int32"),
    (lambda t: dict(t, weight_global_scale=torch.tensor(1.0)), "weight_global_scale", "no global"),
    (lambda t: dict(t, weight_scale=None), "weight_scale", "required"),
])
def test_bad_tensors_are_named(change, name, fragment):
    tensors = _tensors(64, 512, 128, False)
    kernel = TorchTinyGemmInt4Linear(_layer(64, 512), MODE, None)
    with pytest.raises(TensorError) as err:
        kernel.process_weights(**change(tensors))
    assert err.value.tensor == name and fragment in str(err.value)


def test_group_size_must_match_the_layer():
    kernel = TorchTinyGemmInt4Linear(_layer(64, 512, group=64), MODE, None)
    with pytest.raises(TensorError, match="group size 64"):
        kernel.process_weights(**_tensors(64, 512, 128, True))


def test_the_runtime_probe_product_agrees_on_cpu():
    y, ref = runtime._run("int4", 32, 256, 256, torch.device("cpu"))
    assert _rel(y, ref) < runtime.PROBE_TOLERANCE


# ---- the declaration through the engine ------------------------------------------------------

def _tiny(decision):
    return next(c for c in decision.candidates if c.kernel == "torch.linear.int4_tinygemm")


def test_our_kernel_comes_first_and_tinygemm_serves_when_it_is_the_only_one():
    layer = _layer(4096, 4096)
    assert select_backend(layer, Platform.preset("h200", packages=ON_H200)).kernel == "triton.linear.w4"
    d = select_backend(layer, Platform.preset("h200", packages=dict(ON_H200, triton=None)))
    assert d.kernel == "torch.linear.int4_tinygemm" and d.backend == "torch"


@pytest.mark.parametrize("layer,fragment", [
    (_layer(4096, 4096, dtype="float16"), "bfloat16 activations only"),
    (_layer(4096, 4096, group=16), "got group_size=16"),
    (_layer(4096, 4112, group=16), "divisible by 32"),
])
def test_constraints_reject_with_their_reason(layer, fragment):
    d = select_backend(layer, Platform.preset("h200", packages=dict(ON_H200, triton=None)))
    assert d.backend == "emulation"
    c = _tiny(d)
    assert c.stage == "constraint" and any(fragment in r for r in c.reasons)


def test_ampere_is_served_and_sm12x_is_not():
    layer = _layer(4096, 4096)
    assert select_backend(layer, Platform.preset("a100", packages=dict(ON_H200, triton=None))).kernel == \
        "torch.linear.int4_tinygemm"
    d = select_backend(layer, Platform.preset("rtx-pro-6000", packages=dict(ON_H200, triton=None)))
    assert "capability 8.0 to 10.x" in _tiny(d).reason


def test_a_tuning_file_that_measured_tinygemm_faster_selects_it(tmp_path):
    layer = _layer(4096, 4096)
    platform = Platform.preset("h200", packages=ON_H200)
    times = {"triton.linear.w4": 0.030, "torch.linear.int4_tinygemm": 0.020}
    meta = {"vendor": "nvidia", "device_name": "NVIDIA H200", "capability": "9.0", "torch": "2.11.0",
            "triton": "3.6.0", "oracle": _oracle_version(), "created": "2026-12-01T00:00:00Z",
            "updated": "2026-12-01T00:00:00Z"}
    entries = [{"layer_key": layer_key(layer), "kernel": kernel, "backend": kernel.split(".")[0],
                "mode": "w4a16_int4", "activation_format": "bf16", "m": 1, "status": "ok",
                "median_ms": ms, "repeats": 10, "method": "graph"} for kernel, ms in times.items()]
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps({"schema_version": 1, "metadata": meta, "entries": entries}))
    d = select_backend(layer, platform, measurements=[str(path)])
    assert d.kernel == "torch.linear.int4_tinygemm" and d.selected_by == "measured"
    loser = next(c for c in d.candidates if c.kernel == "triton.linear.w4")
    assert loser.verdict == "rejected" and "measured slower" in loser.reason
    times.update({"triton.linear.w4": 0.010})
    for e in entries:
        e["median_ms"] = times[e["kernel"]]
    other = tmp_path / "ours-faster.json"
    other.write_text(json.dumps({"schema_version": 1, "metadata": meta, "entries": entries}))
    assert select_backend(layer, platform, measurements=[str(other)]).kernel == "triton.linear.w4"


def test_oracle_verify_accepts_the_declarations():
    import subprocess
    import sys
    from pathlib import Path

    kernels = Path(__file__).resolve().parents[1] / "oracle_torch" / "kernels.yaml"
    out = subprocess.run([sys.executable, "-m", "oracle.cli", "verify", str(kernels)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    import yaml
    declared = len(yaml.safe_load(kernels.read_text())["kernels"])
    assert f"kernels.yaml: {declared} kernel(s)" in out.stdout, out.stdout     # every declared kernel accepted
