"""Which b12x runs: the standalone package or flashinfer-python's embedded copy (oracle_b12x.provider).

Runs in both CI setups: .venv (standalone b12x 1.5.1) and .venv-flashinfer (flashinfer-python
0.7.2 installed after it, whose shim takes over `import b12x`). A broken shim is simulated
with a `b12x` package that fails the way flashinfer's does when flashinfer is gone.
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

from oracle_b12x import provider
from oracle_b12x.errors import B12xUnavailableError

ROOT = Path(__file__).resolve().parents[3]
FLASHINFER_PRESENT = importlib.util.find_spec("flashinfer") is not None


def test_active_provider_is_found_from_where_the_module_lives():
    found = provider.active_provider()
    import b12x

    assert Path(b12x.__file__).resolve().parent == Path(found.location)
    if FLASHINFER_PRESENT:       # .venv-flashinfer: the shim won, metadata still says b12x 1.5.1
        assert found.name == provider.FLASHINFER and found.version == "0.7.2"
        assert "flashinfer" in found.location
        assert importlib.metadata.version("b12x") == "1.5.1"
    else:
        assert (found.name, found.version) == (provider.STANDALONE, "1.5.1")


@pytest.mark.parametrize("name, version, ok", [
    (provider.STANDALONE, "1.5.1", True), (provider.STANDALONE, "1.6.0", False), (provider.STANDALONE, None, False),
    (provider.FLASHINFER, "0.7.2", True), (provider.FLASHINFER, "0.6.9", False), (provider.FLASHINFER, "0.8.0", False),
])
def test_version_range_is_per_provider(name, version, ok):
    p = provider.Provider(name, version, "/somewhere/b12x")
    if ok:
        provider.check_provider_version(p)
        return
    with pytest.raises(B12xUnavailableError, match=rf"{name}|version is unknown"):
        provider.check_provider_version(p)


def _oracle(args: list[str], shim: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "ORACLE_"))}
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
    assert data["environment"] == []
    assert next(r for r in data["kernels"] if r["kernel"] == "b12x.linear.nvfp4")["available"]
