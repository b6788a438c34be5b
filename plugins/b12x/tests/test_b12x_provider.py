"""Which b12x runs: the standalone package, flashinfer-python's embedded copy, or both installed
(oracle_b12x.provider, the one judge of "is b12x here").

Runs in both CI setups: .venv (standalone b12x 1.5.1) and .venv-flashinfer (flashinfer-python
0.7.2 installed after it, whose shim takes over `import b12x`). There, a flashinfer-only install
(`flashinfer-python[b12x]`: no b12x distribution) is made by hiding the b12x distribution's
metadata (flashinfer_only/sitecustomize.py). A broken shim is simulated with a `b12x` package
that fails the way flashinfer's does when flashinfer is gone. Stated platforms (--with-package)
are judged from their stated versions.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oracle import KernelConfig, MoELayer, Platform, select_backend
from oracle_b12x import provider
from oracle_b12x.errors import B12xUnavailableError

ROOT = Path(__file__).resolve().parents[3]
FLASHINFER_PRESENT = importlib.util.find_spec("flashinfer") is not None


def test_active_provider_is_found_from_where_the_module_lives():
    found = provider.active_provider()
    import b12x

    assert Path(b12x.__file__).resolve().parent == Path(found.location)
    if FLASHINFER_PRESENT:       # .venv-flashinfer: the shim won; the b12x distribution is there too
        assert found.name == provider.FLASHINFER and provider.version_ok(provider.FLASHINFER, found.version)
        assert found.version == importlib.metadata.version("flashinfer-python")
        assert "flashinfer" in found.location
        assert found.other_version == importlib.metadata.version("b12x") == "1.5.1"
        assert "b12x 1.5.1 is installed too" in found.describe()      # both, reported as such
    else:
        assert (found.name, found.version, found.other_version) == (provider.STANDALONE, "1.5.1", None)


@pytest.mark.parametrize("name, version, ok", [
    (provider.STANDALONE, "1.5.1", True), (provider.STANDALONE, "1.5.1.post1", True),
    (provider.STANDALONE, "1.6.0", False), (provider.STANDALONE, None, False),
    (provider.FLASHINFER, "0.7.2", True), (provider.FLASHINFER, "0.7.2.post1", True),
    (provider.FLASHINFER, "0.6.9", False), (provider.FLASHINFER, "0.8.0", False),
])
def test_version_range_is_per_provider(name, version, ok):
    p = provider.Provider(name, version, "/somewhere/b12x")
    if ok:
        provider.check_provider_version(p)
        return
    with pytest.raises(B12xUnavailableError, match=rf"{name}|version is unknown"):
        provider.check_provider_version(p)


_NVFP4_MOE = MoELayer(num_experts=32, top_k=4, hidden_size=4096, intermediate_size=1536, weight_format="nvfp4",
                      activation="silu", activation_format="nvfp4")


@pytest.mark.parametrize("stated, only, expected", [
    ({"b12x": "1.5.1"}, False, "standalone b12x 1.5.1 (stated)"),
    ({"b12x": None, "flashinfer-python": "0.7.2.post1"}, False, "b12x embedded in flashinfer-python 0.7.2.post1"),
    ({"b12x": "1.5.1", "flashinfer-python": "0.7.2"}, False, "flashinfer-python 0.7.2 is there too"),
    ({"b12x": "1.4.0", "flashinfer-python": "0.7.2"}, False, "b12x embedded in flashinfer-python 0.7.2"),
    ({"b12x": None, "flashinfer-python": None}, False, "b12x is not installed: neither"),
    ({"b12x": None, "flashinfer-python": "0.6.9"}, False, "needs flashinfer-python>=0.7.2,<0.8"),
    ({"torch": "2.13.0"}, True, "b12x is not installed: neither"),
])
def test_stated_providers_decide_selection_without_a_b12x_package_check(stated, only, expected):
    """A stated machine is judged by its stated providers; a flashinfer-only one serves b12x."""
    platform = Platform.preset("rtx-pro-6000").with_packages({"triton": "3.5.0", **stated}, only=only)
    d = select_backend(_NVFP4_MOE, platform, KernelConfig(moe_backend="b12x"), env={})
    if "not installed" in expected or "needs" in expected:
        assert d.status == "no_kernel"
        reason = d.candidates[0].reason
        assert expected in reason and "package b12x is not installed" not in reason, reason
        assert d.candidates[0].stage == "platform"
    else:
        assert (d.status, d.kernel, d.mode) == ("selected", "b12x.moe", "nvfp4"), d.candidates
        assert any(expected in c.reason for c in d.candidates), d.candidates


def _oracle(args: list[str], shim: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "ORACLE_", "PYTHON"))}
    env["PYTHONPATH"] = str(shim)
    return subprocess.run([sys.executable, "-m", "oracle.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=ROOT)


def test_a_shim_pointing_nowhere_makes_b12x_unavailable_and_nothing_else(tmp_path):
    shim = tmp_path / "b12x"
    shim.mkdir()
    # What flashinfer's b12x/__init__.py does when flashinfer-python is gone.
    (shim / "__init__.py").write_text('raise ImportError("The b12x compatibility package requires flashinfer-python.")\n')
    out = _oracle(["kernels", "--device", "rtx-pro-6000", "--format", "json"], tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    rows = {r["kernel"]: r for r in data["kernels"]}
    b12x_rows = [r for name, r in rows.items() if name.startswith("b12x.")]
    assert b12x_rows and all(not r["available"] for r in b12x_rows)
    checked = [r for r in b12x_rows if r["kernel"] != "b12x.linear.mxfp4"]   # that one may lack flashinfer first
    assert all("requires flashinfer-python" in r["reason"] and "reinstall flashinfer-python" in r["reason"]
               for r in checked), checked[0]["reason"]
    assert rows["emulation.linear"]["available"] and not data["plugin_errors"]
    assert any("requires flashinfer-python" in line for line in data["environment"])
    # explain still runs, says why on the platform line, and serves the layers elsewhere
    out = _oracle(["explain", "--model", "qwen3-8b", "--device", "rtx-pro-6000"], tmp_path)
    assert out.returncode == 0, out.stderr
    platform_line = next(l for l in out.stdout.splitlines() if l.startswith("platform"))
    assert "b12x cannot be used in this environment" in platform_line


def test_stated_b12x_version_describes_the_target_not_this_environment(tmp_path):
    shim = tmp_path / "b12x"
    shim.mkdir()
    (shim / "__init__.py").write_text('raise ImportError("broken on purpose")\n')
    out = _oracle(["kernels", "--device", "rtx-pro-6000", "--with-package", "b12x=1.5.1", "--format", "json"],
                  tmp_path)
    data = json.loads(out.stdout)
    assert len(data["environment"]) == 1
    assert data["environment"][0].startswith("b12x provider: standalone b12x 1.5.1 (stated)")
    assert next(r for r in data["kernels"] if r["kernel"] == "b12x.linear.nvfp4")["available"]


@pytest.mark.skipif(not FLASHINFER_PRESENT, reason="needs flashinfer-python's b12x shim (CI: .venv-flashinfer)")
def test_flashinfer_only_install_serves_b12x():
    """flashinfer-python[b12x] with no b12x distribution: the Qwen3-235B NVFP4 explain of issue #20
    (188 linears to emulation, 94 MoE layers without a kernel, exit 2) now serves every layer: the
    experts with b12x, the linears with FlashInfer's own SM12x GEMM (before native b12x, as in vLLM)."""
    out = _oracle(["explain", "--model", "nvidia-qwen3-235b-a22b-nvfp4", "--device", "rtx-pro-6000",
                   "--moe-backend", "b12x", "--format", "json"], Path(__file__).parent / "flashinfer_only")
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert "b12x embedded in flashinfer-python" in json.dumps(data["platform"])
    quantized = [l for l in data["layers"] if l["status"] != "unquantized"]
    kernels = {(l["op"], l["kernel"]) for l in quantized}
    assert kernels == {("linear", "flashinfer_b12x.linear.nvfp4"), ("moe", "b12x.moe")}, kernels
    assert sum(l["op"] == "moe" for l in quantized) == 94
    probe = subprocess.run([sys.executable, "-c", "import importlib.metadata as m; m.version('b12x')"],
                           env={**os.environ, "PYTHONPATH": str(Path(__file__).parent / "flashinfer_only")},
                           capture_output=True, text=True)
    assert "PackageNotFoundError" in probe.stderr     # the b12x distribution really is gone there
