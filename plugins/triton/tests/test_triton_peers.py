"""gemlite's FP8 W8A8 GEMM declared as a peer (triton.linear.gemlite_fp8): never chosen without a
measurement, chosen by a tuning file exactly where it measured fastest, refused with its reasons.
CPU only: the declarations and the engine; the GPU test (test_triton_gpu.py) checks its numerics."""
from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from oracle import LinearLayer, Platform, select_backend
from oracle.session import get_registry
from oracle.tuning.metadata import _oracle_version
from oracle.tuning.schema import layer_key

GEMLITE = "triton.linear.gemlite_fp8"
ON_H200 = {"torch": "2.11.0", "triton": "3.6.0", "gemlite": "0.6.0.post2"}
META = {"vendor": "nvidia", "device_name": "NVIDIA H200", "capability": "9.0", "torch": "2.11.0",
        "triton": "3.6.0", "created": "2026-12-02T00:00:00Z", "updated": "2026-12-02T00:00:00Z"}


def _fp8(n=8192, k=8192, dtype="bfloat16"):
    return LinearLayer(name="model.layers.0.mlp.down_proj", in_features=k, out_features=n,
                       weight_format="fp8_channel", activation_format="fp8", dtype=dtype)


def _tuning(tmp_path: Path, layer, times: dict[str, float], m: int = 1, name: str = "tuning.json",
            meta: dict | None = None) -> str:
    entries = [{"layer_key": layer_key(layer), "kernel": kernel, "backend": kernel.split(".")[0],
                "mode": "w8a8_fp8_channel", "activation_format": "fp8", "m": m, "status": "ok",
                "median_ms": ms, "repeats": 10, "method": "graph"} for kernel, ms in times.items()]
    path = tmp_path / name
    path.write_text(json.dumps({"schema_version": 1, "metadata": {**META, **(meta or {}), "oracle": _oracle_version()},
                                "entries": entries}))
    return str(path)


def _traced(tmp_path, layer, packages=ON_H200, preset="h200"):
    """The decision with a tuning file (made on that preset's device) that measured only oracle-triton's
    kernel: every candidate is tried and traced (with its rejection reason), the measured one selected."""
    platform = Platform.preset(preset, packages=packages)
    meta = {"device_name": platform.device_name, "capability": f"{platform.capability[0]}.{platform.capability[1]}"}
    d = select_backend(layer, platform, measurements=[_tuning(tmp_path, layer, {"triton.linear.fp8": 0.010},
                                                              name="traced.json", meta=meta)])
    return d, {c.kernel: c for c in d.candidates}


def test_declared_as_a_peer_after_the_projects_kernels(tmp_path):
    spec = next(s for s in get_registry().kernels if s.name == GEMLITE)
    assert spec.tier == "peer" and spec.backend == "triton"
    d = select_backend(_fp8(), Platform.preset("h200", packages=ON_H200))
    assert d.kernel != GEMLITE and d.selected_by == "policy"         # never without a measurement
    d, _ = _traced(tmp_path, _fp8())
    names = [c.kernel for c in d.candidates]
    assert names.index(GEMLITE) > names.index("triton.linear.fp8")
    assert d.kernel == "triton.linear.fp8"        # measured, where gemlite was not: not picked blind


def _candidates(tmp_path):
    return [k for k, c in _traced(tmp_path, _fp8())[1].items() if c.verdict != "rejected" or c.stage == "measurement"]


@pytest.mark.parametrize("order", range(6))
def test_a_tuning_file_picks_the_fastest_measured_candidate_peers_included(tmp_path, order):
    """Every ranking of the three FP8 per-channel kernels that serve the layer (oracle-torch's
    cuBLASLt, oracle-triton's, gemlite's): the selection is the one measured fastest."""
    layer = _fp8()
    served = [k for k in ("torch.linear.fp8_channel", "triton.linear.fp8", GEMLITE) if k in _candidates(tmp_path)]
    assert served == ["torch.linear.fp8_channel", "triton.linear.fp8", GEMLITE]
    ranking = list(itertools.permutations(served))[order % len(list(itertools.permutations(served)))]
    times = {kernel: 0.010 * (i + 1) for i, kernel in enumerate(ranking)}
    d = select_backend(layer, Platform.preset("h200", packages=ON_H200), measurements=[_tuning(tmp_path, layer, times)])
    assert d.kernel == ranking[0] and d.selected_by == "measured", (times, d.kernel)


def test_without_gemlite_installed_the_peer_says_how_to_install_it(tmp_path):
    c = _traced(tmp_path, _fp8(), packages={"torch": "2.11.0", "triton": "3.6.0"})[1][GEMLITE]
    assert c.verdict == "rejected" and "gemlite" in c.reason, c.reason


@pytest.mark.parametrize("layer,fragment", [(_fp8(dtype="float16"), "bfloat16"), (_fp8(n=576), "multiples of 128")])
def test_constraints_reject_with_their_reason(tmp_path, layer, fragment):
    c = _traced(tmp_path, layer)[1][GEMLITE]
    assert c.verdict == "rejected" and fragment in c.reason, c.reason


def test_ada_is_the_oldest_capability_served(tmp_path):
    c = _traced(tmp_path, _fp8(), preset="a100")[1][GEMLITE]
    assert c.verdict == "rejected" and "capability 8.9" in c.reason, c.reason


def test_oracle_verify_accepts_the_declarations():
    kernels = Path(__file__).resolve().parents[1] / "oracle_triton" / "kernels.yaml"
    out = subprocess.run([sys.executable, "-m", "oracle.cli", "verify", str(kernels)], capture_output=True, text=True)
    import yaml
    declared = yaml.safe_load(kernels.read_text())["kernels"]
    assert GEMLITE in [k["name"] for k in declared]
    assert f"{kernels.name}: {len(declared)} kernel(s)" in out.stdout, out.stdout + out.stderr   # every one accepted
