"""The road a third party takes: a pip-installed distribution with an `oracle.kernels` entry point."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from oracle import KernelConfig, LinearLayer, Platform, select_backend
from oracle.registry import Registry
from oracle.session import reset_registry
from plugin_dist import REGISTER_KERNELS_YAML, pip_install, write_distribution

PLUGIN_YAML = """\
backend: thirdparty
tier: optimized
requires:
  vendor: [nvidia]
  capability: {min: "8.9"}
kernels:
  - name: thirdparty.fp8
    op: linear
    implementation: oracle_thirdparty.kernel:ThirdPartyFP8
    auto_select: false
    modes:
      - {weight: fp8_tensor, activation: fp8, name: w8a8}
    constraints:
      - reason: "K must be a multiple of 16"
        require: {field: K, divisible_by: 16}
"""


def write_plugin(root: Path, name: str, module_body: str) -> Path:
    return write_distribution(root / name, name, "oracle_thirdparty", "thirdparty", {
        "kernels.yaml": PLUGIN_YAML, "plugin.py": module_body,
        "kernel.py": "from oracle.kernel import Kernel\n\nclass ThirdPartyFP8(Kernel):\n"
                     "    def apply(self, x):\n        return ('third party', x)\n"})


GOOD_PLUGIN = REGISTER_KERNELS_YAML


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """pip-install a plugin distribution into a private target folder on sys.path."""
    def install(body: str = GOOD_PLUGIN, name: str = "oracle-thirdparty") -> None:
        src = write_plugin(tmp_path / "src", name, body)
        monkeypatch.syspath_prepend(str(pip_install(src, tmp_path / "site")))
        reset_registry()
    yield install
    for mod in [m for m in sys.modules if m.startswith("oracle_thirdparty")]:
        del sys.modules[mod]
    reset_registry()


def test_entry_point_plugin_is_discovered_and_selected(installed):
    installed()
    registry = Registry.from_entry_points()
    assert "thirdparty.fp8" in registry.by_name
    info = next(p for p in registry.plugins if p.name == "thirdparty")
    assert (info.distribution, info.version, info.kernels) == ("oracle-thirdparty", "0.1", ("thirdparty.fp8",))
    layer = LinearLayer(name="o_proj", in_features=4096, out_features=4096, weight_format="fp8_tensor")
    d = select_backend(layer, Platform.preset("h200"), KernelConfig(linear_backend="ThirdParty"), env={})
    assert (d.status, d.kernel, d.mode) == ("selected", "thirdparty.fp8", "w8a8")
    assert d.instantiate(layer).apply(1) == ("third party", 1)
    # opt-in: automatic selection does not pick it (shipped plugins load first, so a shipped kernel of the
    # same tier wins before it is reached), and where the trace reaches it, it says why
    auto = select_backend(layer, Platform.preset("h200"), env={})
    assert auto.status == "selected" and auto.kernel != "thirdparty.fp8"
    assert all(c.stage == "policy" for c in auto.candidates if c.kernel == "thirdparty.fp8")
    assert [p.name for p in registry.plugins][-1] == "thirdparty"     # after every shipped plugin


def test_plugin_that_fails_to_import_is_recorded(installed):
    installed("raise ImportError('needs libfoo.so')\n")
    registry = Registry.from_entry_points()
    failure = next(f for f in registry.failures if f.plugin == "thirdparty")
    assert failure.stage == "import" and "needs libfoo.so" in failure.message
    assert "thirdparty.fp8" not in registry.by_name


def test_oracle_kernels_shows_plugin_errors(installed, capsys):
    from oracle.cli import main
    installed("raise ImportError('needs libfoo.so')\n")
    assert main(["kernels", "--device", "h200"]) == 0
    out = capsys.readouterr().out
    assert "plugin errors" in out and "thirdparty (import): ImportError: needs libfoo.so" in out
