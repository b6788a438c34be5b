"""The plugin's contract with the engine: entry point, lazy imports, declarations, decisions."""
from __future__ import annotations

import importlib.metadata
import importlib.resources
import subprocess
import sys

import pytest

from oracle import EmbeddingLayer, KernelConfig, LinearLayer, MoELayer, Platform, select_backend
from oracle.formats import WEIGHT_FORMATS, is_quantized

NOTE = "emulation dequantizes to BF16: the slow path meant for testing"


def test_entry_point_is_registered():
    eps = importlib.metadata.entry_points(group="oracle.kernels")
    assert any(ep.name == "emulation" and ep.value == "oracle_emulation.plugin" for ep in eps)


def test_kernels_yaml_ships_as_package_data():
    assert importlib.resources.files("oracle_emulation").joinpath("kernels.yaml").is_file()
    assert importlib.resources.files("oracle_emulation.formats").joinpath("iq2_grids.txt").is_file()


def test_plugin_module_and_selection_do_not_import_torch():
    code = ("import sys, oracle, oracle_emulation.plugin\n"
            "from oracle import select_backend, LinearLayer, Platform\n"
            "d = select_backend(LinearLayer(in_features=256, out_features=64, weight_format='nvfp4'), Platform.cpu())\n"
            "assert d.kernel == 'emulation.linear', d.kernel\n"
            "bad = [m for m in ('torch', 'b12x', 'triton', 'flashinfer') if m in sys.modules]\n"
            "print(bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_declarations(emulation_specs):
    assert set(emulation_specs) == {"emulation.linear", "emulation.moe", "emulation.embedding"}
    for spec in emulation_specs.values():
        assert spec.backend == "emulation" and spec.tier == "emulation"
        assert spec.testing_only and spec.note == NOTE
        assert set(spec.requires.packages) == {"torch"}
        assert spec.requires.vendor is None and spec.requires.capability is None
        assert len({m.name for m in spec.modes}) == len(spec.modes)
    quantized = {f for f in WEIGHT_FORMATS if is_quantized(f)}
    assert {m.weight for m in emulation_specs["emulation.linear"].modes} == quantized
    assert {m.weight for m in emulation_specs["emulation.moe"].modes} == quantized


@pytest.mark.parametrize("fmt", [f for f in WEIGHT_FORMATS if is_quantized(f)])
@pytest.mark.parametrize("platform", [Platform.cpu(), Platform.preset("h200"), Platform.preset("rtx-pro-6000")])
def test_every_format_ends_on_emulation_with_the_testing_note(fmt, platform):
    layers = [LinearLayer(in_features=4096, out_features=4096, weight_format=fmt),
              MoELayer(num_experts=32, top_k=4, hidden_size=2048, intermediate_size=1024, weight_format=fmt)]
    for layer in layers:
        decision = select_backend(layer, platform, KernelConfig(linear_backend="emulation", moe_backend="emulation"))
        assert decision.status == "selected" and decision.backend == "emulation", decision.explain()
        assert any(NOTE in n for n in decision.notes)
        assert decision.to_dict()["backend"] == "emulation"


def test_emulation_is_the_automatic_last_resort_on_a_cpu():
    decision = select_backend(LinearLayer(in_features=512, out_features=512, weight_format="iq2_xxs"), Platform.cpu())
    assert decision.backend == "emulation" and decision.mode == "w2a16_iq2_xxs"
    assert decision.candidates[-1].verdict == "selected"


def test_physical_constraints_are_explained():
    decision = select_backend(LinearLayer(in_features=100, out_features=64, weight_format="mxfp4"), Platform.cpu())
    assert decision.status == "no_kernel"
    reasons = [c.reason for c in decision.candidates if c.backend == "emulation"]
    assert any("K = 100 must be divisible by 32" in r for r in reasons)
    rules = [c.rule for c in decision.candidates if c.backend == "emulation"]
    assert all("oracle_emulation/kernels.yaml:" in r for r in rules)


def test_int4_group_size_checked_in_code():
    layer = LinearLayer(in_features=96, out_features=64, weight_format="int4", group_size=64)
    decision = select_backend(layer, Platform.cpu())
    assert decision.status == "no_kernel"
    assert any("INT4 groups of 64 must tile K = 96 exactly" in c.reason for c in decision.candidates)


def test_embedding_mode():
    decision = select_backend(EmbeddingLayer(num_embeddings=1000, embedding_dim=256, weight_format="q8_0"),
                              Platform.cpu())
    assert decision.kernel == "emulation.embedding" and decision.mode == "q8_0_lookup"
