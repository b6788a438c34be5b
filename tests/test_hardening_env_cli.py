"""Environment values parsed strictly, the exit-code table, valid JSON, bench arguments.

CLI cases run in-process (`oracle.cli.main`); usage errors included (argparse exits via SystemExit).
Bound: each case well under a second.
"""
from __future__ import annotations

import json
import math
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hardening_scale import SCALE
from oracle import MoELayer, Platform, select_backend
from oracle.cli import main
from oracle.envvars import OracleEnvWarning, flag
from oracle.exitcodes import INPUT, INTERNAL, NO_KERNEL, OK, TABLE, USAGE
from oracle.jsonsafe import dumps


def run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse exits by itself on usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def gpt_oss_experts(**kw):
    fields = dict(name="experts", num_experts=32, top_k=4, hidden_size=2880, intermediate_size=2880,
                  weight_format="mxfp4", activation="swigluoai", activation_params={"alpha": 1.702, "limit": 7.0})
    fields.update(kw)
    return MoELayer(**fields)


# ---- environment -----------------------------------------------------------------------------
@pytest.mark.parametrize("value, on, warns", [
    ("1", True, False), ("0", False, False), ("", False, False),
    ("banana", False, True), ("true", False, True), (" 1", False, True), ("1\n", False, True), ("yes", False, True),
])
def test_switch_values_are_documented_values_or_a_warning(value, on, warns):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert flag({"VLLM_B12X_MOE_FP4_FORCE_A16": value}, "VLLM_B12X_MOE_FP4_FORCE_A16") is on
    assert bool([w for w in seen if issubclass(w.category, OracleEnvWarning)]) is warns
    if warns:
        assert "VLLM_B12X_MOE_FP4_FORCE_A16" in str(seen[0].message) and repr(value) in str(seen[0].message)


@given(st.text(max_size=6))
@settings(max_examples=60 * SCALE, deadline=None)
def test_any_switch_value_is_on_only_for_1(value):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert flag({"X": value}, "X") is (value == "1")


def test_unknown_disabled_kernels_warn_with_a_hint(select):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        d = select(gpt_oss_experts(hidden_size=3072), env={"ORACLE_DISABLED_KERNELS": "Toyfast.moe, nosuch"})
    messages = [str(w.message) for w in seen if issubclass(w.category, OracleEnvWarning)]
    assert messages == [
        "ORACLE_DISABLED_KERNELS: no registered kernel is named 'Toyfast.moe', so it disables nothing; "
        "did you mean 'toyfast.moe'?",
        "ORACLE_DISABLED_KERNELS: no registered kernel is named 'nosuch', so it disables nothing"]
    assert d.kernel == "toyfast.moe"  # a wrongly cased name disables nothing, and now says so


def test_cli_prints_env_warnings_as_one_line(global_toy_registry, capsys):
    code, out, err = run(["explain", "--model", "gpt-oss-20b", "--device", "h200",
                          "--env", "VLLM_B12X_MOE_FP4_FORCE_A16=banana"], capsys)
    assert code in (OK, NO_KERNEL)
    assert "warning: VLLM_B12X_MOE_FP4_FORCE_A16='banana' is not a documented value" in err
    assert "Traceback" not in err and "OracleEnvWarning" not in err


def test_planner_check_env_is_read_from_the_callers_env_and_keys_the_cache(monkeypatch):
    from oracle.session import get_registry
    seen = []
    import oracle_b12x.planner_check as pc  # the real planners import b12x; record the call instead
    monkeypatch.setattr(pc, "planner_reason", lambda layer, mode: seen.append(mode.name) or None)
    monkeypatch.delenv("ORACLE_B12X_PLANNER_CHECK", raising=False)
    registry = get_registry()
    assert "ORACLE_B12X_PLANNER_CHECK" in registry.env_keys
    platform = Platform.preset("rtx-pro-6000").with_packages({"b12x": "1.5.1"})
    from oracle import KernelConfig
    config = KernelConfig(moe_backend="b12x")
    layer = MoELayer(name="experts", num_experts=32, top_k=4, hidden_size=4096, intermediate_size=1536,
                     weight_format="mxfp4", activation="silu")
    off = select_backend(layer, platform, config, env={})
    assert seen == []
    on = select_backend(layer, platform, config, env={"ORACLE_B12X_PLANNER_CHECK": "1"})
    assert seen == ["w4a8_mx"], "the hook must see the env the caller passed, not os.environ"
    assert on is not off and off.status == on.status == "selected"  # a different cache entry


# ---- exit codes -------------------------------------------------------------------------------
def test_exit_code_table_is_distinct_and_documented():
    codes = [code for code, _ in TABLE]
    assert len(set(codes)) == len(codes) and USAGE not in (INPUT, NO_KERNEL)
    from pathlib import Path
    guide = (Path(__file__).resolve().parent.parent / "docs" / "user-guide.md").read_text()
    for code, meaning in TABLE:
        assert f"| {code} |" in guide, f"exit code {code} missing from docs/user-guide.md"


@pytest.mark.parametrize("argv", [
    ["explain"], ["explain", "--model"], ["explain", "--model", "x", "--format", "yaml"], ["nosuch"],
    ["bench", "--repeats", "0"], ["bench", "--repeats", "-5"], ["bench", "--repeats", "1e3"], [],
    ["kernels", "--device", "h200", "--detect"],
])
def test_usage_errors_exit_64_not_2(argv, capsys):
    code, out, err = run(argv, capsys)
    assert code == USAGE, (code, err)
    assert "usage error" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["explain", "--model", "qwen3-8b", "--device", ""], "error: --device: empty device name"),
    (["kernels", "--device", "   "], "error: --device: empty device name"),
    (["explain", "--model", "qwen3-8b", "--device", "RTX-PRO-6000x"], "error: --device: unknown device"),
    (["explain", "--model", "qwen3-8b", "--tp", "0"], "error: --tp: expected a positive integer"),
])
def test_bad_values_exit_1_with_one_error(argv, message, capsys):
    code, out, err = run(argv, capsys)
    assert code == INPUT and err.startswith(message), err


def test_unexpected_exception_is_one_line_exit_70(monkeypatch, capsys):
    from oracle.cli import schema
    monkeypatch.setattr(schema, "run", lambda args: 1 / 0)
    monkeypatch.delenv("ORACLE_DEBUG", raising=False)
    code, out, err = run(["schema"], capsys)
    assert code == INTERNAL and err.startswith("internal error: ZeroDivisionError") and "Traceback" not in err


def test_bench_repeats_is_bounded(capsys):
    code, out, err = run(["bench", "--repeats", str(10 ** 9)], capsys)
    assert code == USAGE and "from 1 to 100000000" in err


# ---- JSON --------------------------------------------------------------------------------------
def test_json_helper_never_writes_nan():
    text = dumps({"a": math.nan, "b": [math.inf, -math.inf, 1.5]})
    assert json.loads(text, parse_constant=lambda t: pytest.fail(t)) == {"a": "NaN", "b": ["Infinity", "-Infinity", 1.5]}


@pytest.mark.parametrize("argv", [
    ["explain", "--model", "gpt-oss-20b", "--device", "rtx-pro-6000", "--format", "json"],
    ["kernels", "--device", "h200", "--format", "json"],
    ["policy", "show", "--format", "json"],
])
def test_json_outputs_are_strict_json(argv, capsys):
    code, out, err = run(argv, capsys)
    assert code in (OK, NO_KERNEL), err
    json.loads(out, parse_constant=lambda t: pytest.fail(f"non-JSON token {t}"))


def test_allow_list_names_that_are_no_installed_plugin_warn_with_a_hint():
    from oracle.registry import Registry, load_allow_list

    with pytest.warns(OracleEnvWarning, match=r"ORACLE_LOAD_PLUGINS names 'emulaton'.*did you mean 'emulation'"):
        registry = Registry.from_entry_points(allow=load_allow_list("emulaton"))
    assert registry.plugins == [] and "emulation" in registry.skipped
