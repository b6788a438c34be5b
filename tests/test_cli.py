"""The `oracle` command (kernels, policy show, schema, verify, bench) and its error handling."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from oracle.cli import main


def run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_kernels_lists_availability_per_device(global_toy_registry, capsys):
    code, out, _ = run(["kernels", "--device", "a100"], capsys)
    assert code == 0
    assert "platform: NVIDIA A100-SXM4-80GB, SM80 (capability 8.0), simulated" in out
    assert "toyfast.moe  backend=toyfast tier=optimized op=moe (auto)" in out
    assert "unavailable: toyfast needs Hopper or newer; NVIDIA A100-SXM4-80GB is SM80 (" in out
    assert "toyfast.nvfp4moe" in out and "(explicit only)" in out
    assert "[testing only]" in out


def test_kernels_json(global_toy_registry, capsys):
    code, out, _ = run(["kernels", "--device", "h200", "--format", "json"], capsys)
    data = json.loads(out)
    by_name = {k["kernel"]: k for k in data["kernels"]}
    assert by_name["toyfast.moe"]["available"] is True and by_name["toyfast.moe"]["tier"] == "optimized"
    assert data["plugin_errors"] == []


def test_list_devices(capsys):
    code, out, _ = run(["kernels", "--list-devices"], capsys)
    assert code == 0 and "rtx-pro-6000" in out and "dgx-spark" in out and "SM121" in out


def test_policy_show_prints_sources(global_toy_registry, capsys, tmp_path):
    user = tmp_path / "u.yaml"
    user.write_text("on_unsupported: fallback\n")
    code, out, _ = run(["policy", "show", "--policy", str(user), "--device", "rtx-pro-6000"], capsys)
    assert code == 0
    assert "policies/default.yaml < " in out
    line = next(l for l in out.splitlines() if l.strip().startswith("on_unsupported"))
    assert "fallback" in line and f"{user}:1" in line
    assert "platform default for this device: none" in out


def test_policy_show_json(global_toy_registry, capsys):
    code, out, _ = run(["policy", "show", "--format", "json"], capsys)
    values = {v["key"]: v for v in json.loads(out)["values"]}
    assert values["on_unsupported"]["value"] == "error"
    assert values["on_unsupported"]["source"].startswith("policies/default.yaml:")


def test_schema(capsys):
    code, out, _ = run(["schema", "policy"], capsys)
    assert code == 0 and "on_unsupported" in json.loads(out)["properties"]
    code, out, _ = run(["schema", "kernels"], capsys)
    assert "modes" in json.loads(out)["kernel"]["properties"]


def test_verify_good_and_bad_files(global_toy_registry, capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kernels:\n  - name: x\n    op: linear\n")
    code, out, _ = run(["verify", "tests/fixtures/toy_fallback.yaml", "policies/default.yaml", str(bad)], capsys)
    assert code == 1
    assert "ok   tests/fixtures/toy_fallback.yaml: 3 kernel(s)" in out
    assert "ok   policies/default.yaml: policy" in out
    assert f"FAIL {bad}:" in out
    # verify imports every implementation: the toy plugin's toy_impl module does not exist
    assert "FAIL tests/fixtures/toy_kernels.yaml:7: kernel toyfast.moe: cannot import toy_impl:ToyMoE" in out
    assert "4 problem(s)" in out


@pytest.mark.parametrize("args, message", [
    (["kernels", "--device", "rtx-9999"], "error: --device: unknown device 'rtx-9999'"),
    (["policy", "show", "--policy", "missing.yaml"], "error: missing.yaml: file not found"),
    (["kernels", "--with-package", "=1"], "error: --with-package"),
])
def test_bad_input_is_one_clear_line_and_exit_1(global_toy_registry, capsys, args, message):
    code, out, err = run(args, capsys)
    assert code == 1 and err.startswith(message) and "Traceback" not in err


def test_console_script_runs_without_traceback(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("on_unsupported: [\n")
    proc = subprocess.run([sys.executable, "-m", "oracle.cli", "policy", "show", "--policy", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: ") and "invalid YAML" in proc.stderr and "Traceback" not in proc.stderr


def test_plugin_logs_stay_off_stdout_json(capsys, monkeypatch):
    """A plugin's structlog event during selection (e.g. oracle-triton's probe warnings) goes to stderr, so
    `explain --format json` prints JSON only (the GPU check found a probe's log line in front of it)."""
    import structlog

    import oracle.engine

    structlog.reset_defaults()   # as in a fresh process: unconfigured structlog prints on stdout
    real = oracle.engine.check_requirements

    def logging_check(spec, platform, **kwargs):
        structlog.get_logger("a_plugin").warning("probe_noise", kernel=spec.name)
        return real(spec, platform, **kwargs)

    monkeypatch.setattr(oracle.engine, "check_requirements", logging_check)
    try:
        code, out, err = run(["explain", "--model", "qwen3-30b-a3b-fp8", "--device", "h200", "--format", "json"],
                             capsys)
    finally:
        structlog.reset_defaults()
    assert code == 0
    assert json.loads(out)["summary"]
    assert "probe_noise" in err and "probe_noise" not in out
