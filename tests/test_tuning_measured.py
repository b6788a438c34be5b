"""End to end on CPU: a third-party plugin's two kernels are tuned and the faster one wins by measurement."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import oracle
from oracle import LinearLayer, Platform, select_backend
from oracle.cli import main
from oracle.session import reset_registry

from tuning_plugin import install, tiny_model

@pytest.fixture(scope="module")
def racer(tmp_path_factory):
    """The plugin installed through its entry point, and a tiny FP8-block model."""
    root = tmp_path_factory.mktemp("racer")
    site = install(root)
    sys.path.insert(0, str(site))
    reset_registry()
    oracle.reload()
    yield {"site": site, "model": tiny_model(root)}
    sys.path.remove(str(site))
    for mod in [m for m in sys.modules if m.startswith("oracle_racer")]:
        del sys.modules[mod]
    reset_registry()
    oracle.reload()


@pytest.fixture(scope="module")
def tuned(racer, tmp_path_factory) -> Path:
    """One tuning file with racer.alpha slow, copied by tests that only read or damage it."""
    out = tmp_path_factory.mktemp("tuned") / "alpha-slow.json"
    os.environ["RACER_SLOW"] = "alpha"
    try:
        assert tune(racer, out) == 0
    finally:
        del os.environ["RACER_SLOW"]
    return out


def copy_of(tuned: Path, tmp_path: Path) -> Path:
    out = tmp_path / "t.json"
    out.write_text(tuned.read_text())
    return out


def tune(racer, out: Path, *extra: str) -> int:
    return main(["tune", "--model", str(racer["model"]), "--out", str(out), "--m", "1,2", "--backend", "racer",
                 "--repeats", "3", "--progress", "off", *extra])


def explain(racer, capsys, *files: Path, fmt: str = "json") -> tuple[int, object, str]:
    oracle.reload()
    capsys.readouterr()  # what tune printed
    args = ["explain", "--model", str(racer["model"]), "--format", fmt]
    for f in files:
        args += ["--measurements", str(f)]
    code = main(args)
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if fmt == "json" and code != 1 else captured.out), captured.err


def qkv(report) -> dict:
    return next(layer for layer in report["layers"] if layer["name"].endswith("layers.0.self_attn.qkv_proj"))


@pytest.mark.parametrize("slow, fast", [("alpha", "racer.beta"), ("beta", "racer.alpha")])
def test_faster_kernel_wins_by_measurement(racer, tmp_path, capsys, monkeypatch, slow, fast):
    monkeypatch.setenv("RACER_SLOW", slow)
    out = tmp_path / "tuning.json"
    assert tune(racer, out) == 0
    data = json.loads(out.read_text())
    kernels = {e["kernel"] for e in data["entries"]}
    assert {"racer.alpha", "racer.beta", "racer.gamma"} <= kernels
    slow_ms = [e["median_ms"] for e in data["entries"] if e["kernel"] == f"racer.{slow}"]
    assert min(slow_ms) >= 25.0                       # the sleep is really measured
    gamma = [e for e in data["entries"] if e["kernel"] == "racer.gamma"]
    assert gamma and all(e["status"] == "failed" and "racer.gamma cannot do this" in e["error"] for e in gamma)

    code, report, _ = explain(racer, capsys, out)
    assert code == 0
    layer = qkv(report)
    assert (layer["kernel"], layer["selected_by"]) == (fast, "measured")
    by_name = {c["kernel"]: c for c in layer["candidates"]}
    assert by_name[f"racer.{slow}"]["stage"] == "measurement" and "slower" in by_name[f"racer.{slow}"]["reason"]
    assert "failed during tuning" in by_name["racer.gamma"]["reason"]
    table = report["measurements"][by_name[fast]["measured_ref"]]   # figures written once, referenced
    assert (table["kernel"], [m["m"] for m in table["measured"]]) == (fast, [1, 2])
    assert table["measured"][0]["method"] == "eager"

    code, text, _ = explain(racer, capsys, out, fmt="text")
    assert f"measured: {fast} " in text and "fastest measured of 2" in text and "@M=1 (eager)" in text

    # without measurements the policy order stands: alpha comes first in the plugin's file
    code, report, _ = explain(racer, capsys)
    assert (qkv(report)["kernel"], qkv(report)["selected_by"]) == ("racer.alpha", "policy")


def test_explicit_backend_wins_and_engine_api_and_reload(racer, tuned, tmp_path, monkeypatch):
    out = copy_of(tuned, tmp_path)
    layer = LinearLayer(name="q", in_features=256, out_features=512, weight_format="fp8_block",
                        activation_format="fp8", group_size=128, activation_scale="dynamic_group",
                        weight_block=(128, 128))   # as the front end derives tiny-fp8's qkv_proj
    cpu = Platform.detect()
    oracle.reload()
    d = select_backend(layer, cpu, env={}, measurements=str(out))
    assert (d.kernel, d.selected_by) == ("racer.beta", "measured")
    explicit = select_backend(layer, cpu, oracle.KernelConfig(linear_backend="emulation"), env={},
                              measurements=str(out))
    assert (explicit.kernel, explicit.selected_by) == ("emulation.linear", "explicit")
    # the explicitly requested backend's first kernel wins though it is the slower one, figures shown
    slow = select_backend(layer, cpu, oracle.KernelConfig(linear_backend="racer"), env={}, measurements=str(out))
    assert (slow.kernel, slow.selected_by) == ("racer.alpha", "explicit")
    assert [m for m, _, _ in slow.candidates[-1].timings] == [1, 2]
    # the environment variable; a re-tuned file is read only after oracle.reload()
    env = {"ORACLE_MEASUREMENTS": str(out)}
    assert select_backend(layer, cpu, env=env).kernel == "racer.beta"
    monkeypatch.setenv("RACER_SLOW", "beta")
    assert tune(racer, out) == 0
    assert select_backend(layer, cpu, env=env).kernel == "racer.beta"      # cached until asked
    oracle.reload()
    assert select_backend(layer, cpu, env=env).kernel == "racer.alpha"


def test_stale_metadata_is_ignored_with_a_warning(racer, tuned, tmp_path, capsys):
    out = copy_of(tuned, tmp_path)
    data = json.loads(out.read_text())
    data["metadata"]["torch"] = "1.0.0"
    out.write_text(json.dumps(data))
    code, report, err = explain(racer, capsys, out)
    assert code == 0
    assert "warning: measurements" in err and "ignored" in err and "torch: file 1.0.0, here" in err
    assert (qkv(report)["kernel"], qkv(report)["selected_by"]) == ("racer.alpha", "policy")


@pytest.mark.parametrize("damage, field", [
    (lambda d: d["entries"][0].update(median_ms="fast"), "entries.0.median_ms"),
    (lambda d: d.pop("metadata"), "metadata"),
    (lambda d: d.update(schema_version=7), "schema_version"),
])
def test_corrupt_file_is_exit_1_naming_file_and_field(racer, tuned, tmp_path, capsys, damage, field):
    out = copy_of(tuned, tmp_path)
    data = json.loads(out.read_text())
    damage(data)
    out.write_text(json.dumps(data))
    code, _, err = explain(racer, capsys, out, fmt="text")
    assert code == 1 and str(out) in err and field in err and "Traceback" not in err
    # tune refuses to merge into it too, before timing anything, and leaves it as it was
    before = out.read_text()
    assert tune(racer, out) == 1
    assert out.read_text() == before


def test_not_json_is_exit_1(racer, tmp_path, capsys):
    out = tmp_path / "t.json"
    out.write_text('{"schema_version": 1, "metadata": ')
    code, _, err = explain(racer, capsys, out, fmt="text")
    assert code == 1 and str(out) in err and "not valid JSON at line 1" in err


@pytest.mark.parametrize("how, text", [("shape", "returned shape [1, 513], expected [1, 512]"),
                                       ("oom", "out of memory")])
def test_misbehaving_kernel_is_a_recorded_failure(racer, tmp_path, monkeypatch, how, text):
    monkeypatch.setenv("RACER_GAMMA", how)
    out = tmp_path / "t.json"
    assert tune(racer, out) == 0
    gamma = [e for e in json.loads(out.read_text())["entries"] if e["kernel"] == "racer.gamma"]
    assert {e["m"] for e in gamma} == {1, 2} and all(e["status"] == "failed" for e in gamma)
    assert text in gamma[0]["error"]
    others = [e for e in json.loads(out.read_text())["entries"] if e["kernel"] != "racer.gamma"]
    assert others and all(e["status"] == "ok" for e in others)


def test_interrupted_run_leaves_the_file_untouched(racer, tuned, tmp_path, monkeypatch, capsys):
    out = copy_of(tuned, tmp_path)
    before = out.read_text()
    monkeypatch.setenv("RACER_GAMMA", "interrupt")
    assert tune(racer, out) == 130
    assert out.read_text() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_two_concurrent_tunes_keep_both_entries(racer, tmp_path):
    out = tmp_path / "shared.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(racer["site"]), os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, "-m", "oracle.cli", "tune", "--model", str(racer["model"]),
                               "--out", str(out), "--m", m, "--backend", "racer", "--repeats", "3"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for m in ("1", "8")]
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
    entries = json.loads(out.read_text())["entries"]
    assert {e["m"] for e in entries} == {1, 8}
    assert len(entries) == 4 * 3 * 2   # 4 distinct layers x 3 kernels x 2 Ms


def test_testing_only_kernels_do_not_win_by_measurement_by_default(racer, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RACER_SLOW", "alpha")
    out = tmp_path / "t.json"
    assert main(["tune", "--model", str(racer["model"]), "--out", str(out), "--m", "1", "--repeats", "2",
                 "--progress", "off", "--backend", "emulation"]) == 0
    code, report, _ = explain(racer, capsys, out)
    layer = qkv(report)
    # emulation is measured but held back: nothing else measured, so the policy order stands
    assert (layer["kernel"], layer["selected_by"]) == ("racer.alpha", "policy")
    policy = tmp_path / "p.yaml"
    policy.write_text("measurements:\n  allow_testing_only: true\n")
    oracle.reload()
    capsys.readouterr()
    assert main(["explain", "--model", str(racer["model"]), "--format", "json", "--policy", str(policy),
                 "--measurements", str(out)]) == 0
    layer = qkv(json.loads(capsys.readouterr().out))
    assert (layer["kernel"], layer["selected_by"]) == ("emulation.linear", "measured")


def test_tuning_into_a_stale_file_drops_its_entries_with_a_warning(racer, tuned, tmp_path, capsys):
    out = copy_of(tuned, tmp_path)
    data = json.loads(out.read_text())
    data["metadata"]["capability"] = "9.0"
    data["entries"][0]["layer_key"] = "stale"
    out.write_text(json.dumps(data))
    assert tune(racer, out, "--m", "4") == 0
    assert "existing entries dropped, measured elsewhere (capability: file 9.0, here none)" in capsys.readouterr().err
    kept = json.loads(out.read_text())
    assert {e["m"] for e in kept["entries"]} == {4} and kept["metadata"]["capability"] is None
