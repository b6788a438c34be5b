"""YAML and reason templates under hostile input: bounded, shared aliases, one clear error each.

Bound: every case here finishes in well under a second (the bomb is refused in milliseconds;
the property tests bound each case by hardening_scale.CASE_BOUND_S, 5 s).
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hardening_scale import SCALE, bounded
from oracle.catalog import load_kernel_file
from oracle.cli import main
from oracle.errors import PolicyError
from oracle.layer import MoELayer
from oracle.rules import compile_rules
from oracle.sources import MAX_YAML_DEPTH, load_yaml_file, load_yaml_text

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_YAML = [ROOT / "policies" / "default.yaml", ROOT / "plugins" / "b12x" / "oracle_b12x" / "kernels.yaml",
                ROOT / "plugins" / "emulation" / "oracle_emulation" / "kernels.yaml",
                ROOT / "tests" / "fixtures" / "toy_kernels.yaml"]
BOMB = "\n".join(["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
                 + [f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi")])


def test_billion_laughs_is_refused_fast_by_verify_and_explain(global_toy_registry, tmp_path, capsys):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB + "\non_unsupported: error\n")
    start = time.perf_counter()
    with pytest.raises(PolicyError, match="more than 100000 values"):
        load_yaml_file(bomb)
    assert time.perf_counter() - start < 0.5  # yaml.safe_load itself takes milliseconds; expanding, forever
    assert main(["verify", str(bomb)]) == 1
    assert main(["explain", "--model", "qwen3-8b", "--device", "h200", "--policy", str(bomb)]) == 1
    captured = capsys.readouterr()
    assert "bomb.yaml" in captured.out and "more than 100000 values" in captured.out
    assert "error: " in captured.err and "bomb.yaml" in captured.err and "Traceback" not in captured.err


def test_aliases_keep_pyyaml_meaning_without_copies():
    data = load_yaml_text("base: &b {x: 1, y: [1, 2]}\none: *b\ntwo: *b\n", "t.yaml")
    assert data == yaml.safe_load("base: &b {x: 1, y: [1, 2]}\none: *b\ntwo: *b\n")
    assert data["one"] is data["base"] and data["two"] is data["base"]   # shared, as PyYAML does
    assert data.where("two") == "t.yaml:3" and data["base"].where("y") == "t.yaml:1"


@pytest.mark.parametrize("text, message, line", [
    ("a: &a [*a]\n", "recursive data", 1),
    ("x: 1\na: &a {b: *a}\n", "recursive data", 2),
    ("[" * (MAX_YAML_DEPTH + 5) + "]" * (MAX_YAML_DEPTH + 5), f"nested deeper than {MAX_YAML_DEPTH}", 1),
    ("a: 1\nb: \x00\n", "unacceptable character '\\x00'", 2),
    ("a: 1\na: 2\n", "duplicate key 'a'", 2),
    ("a: !!python/object:os.system {}\n", "is not allowed (plain data only)", 1),
    ("a: !!python/name:os.system x\n", "could not determine a constructor", 1),
])
def test_malformed_yaml_is_one_error_with_file_and_line(text, message, line):
    with pytest.raises(PolicyError) as err:
        load_yaml_text(text, "p.yaml")
    assert message in str(err.value) and str(err.value).startswith(f"p.yaml:{line}:"), str(err.value)


def test_very_deep_nesting_beyond_the_parser_stack_is_an_error():
    with pytest.raises(PolicyError, match="nested deeper"):
        load_yaml_text("[" * 5000 + "]" * 5000, "deep.yaml")


def rules(text: str, op: str = "moe"):
    return compile_rules(load_yaml_text(text, "r.yaml"), op, "kernel t")


@pytest.mark.parametrize("reason, message", [
    ("needs { hidden_size", "is not a valid template"),
    ("needs } here", "is not a valid template"),
    ("{sm:d} is too old", "unknown field {sm}"),
    ("dtype {dtype:d} is wrong", "does not apply to a str"),
    ("positional {} placeholder", "positional placeholder"),
    ("index {top_k[0]}", "unknown field {top_k[0]}"),
    ("conversion {top_k!x}", "unknown conversion !x"),
])
def test_bad_reason_templates_fail_at_load_naming_the_line(reason, message):
    with pytest.raises(PolicyError) as err:
        rules(f"- id: first\n  reason: {reason!r}\n  require: {{field: top_k, range: {{max: 8}}}}\n")
    assert message in str(err.value) and str(err.value).startswith("r.yaml:1")


def test_activation_params_and_format_specs_render():
    (rule,) = rules("- reason: 'limit {activation_params.limit:.1f} with {top_k:d} experts and {dtype!r}'\n"
                    "  require: {field: top_k, range: {max: 2}}\n")
    layer = MoELayer(num_experts=8, top_k=4, hidden_size=256, intermediate_size=256, weight_format="mxfp4",
                     activation="swigluoai", activation_params={"limit": 7})
    assert rule.render(layer.rule_fields()) == "limit 7.0 with 4 experts and 'bfloat16'"
    unset = MoELayer(num_experts=8, top_k=4, hidden_size=256, intermediate_size=256, weight_format="mxfp4")
    assert rule.render(unset.rule_fields()) == "limit {activation_params.limit} with 4 experts and 'bfloat16'"


def test_requirement_reason_format_spec_checked_at_load():
    raw = load_yaml_text("backend: k\nrequires:\n  capability: {family: [9], reason: '{sm:d} too old'}\n"
                         "kernels:\n  - {name: k.x, op: linear, implementation: 'oracle.kernel:Kernel',\n"
                         "     modes: [{weight: fp8_tensor, activation: fp8, name: m}]}\n", "k.yaml")
    with pytest.raises(PolicyError, match=r"k.yaml:3.*does not apply to a str"):
        load_kernel_file(raw, plugin="t", what="k.yaml")


# ---- property: any mutation of a shipped YAML file loads or fails with one PolicyError at the file
_CASES = {"yaml_mutations": 0, "yaml_refused": 0}


@st.composite
def mutated_yaml(draw):
    path = draw(st.sampled_from(SHIPPED_YAML))
    lines = path.read_text().splitlines()
    i = draw(st.integers(0, len(lines) - 1))
    junk = draw(st.sampled_from(["{", "}", "[", "&a", "*a", "*zz", "\x00", "\t", ": :", "- ", "!!binary x",
                                 "<<: *a", "'", '"', "{x}", "{sm:d}", "NaN", ".inf", "~", "\ud800"]))
    at = draw(st.integers(0, len(lines[i])))
    lines[i] = lines[i][:at] + junk + lines[i][at:]
    return path, "\n".join(lines)


@settings(max_examples=80 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_yaml())
def test_mutated_shipped_yaml_never_tracebacks(case):
    path, text = case
    _CASES["yaml_mutations"] += 1
    try:
        with bounded():
            data = load_yaml_text(text, path.name)
            if isinstance(data, dict) and "kernels" in data:
                load_kernel_file(data, plugin="fuzz", what=path.name)
    except PolicyError as exc:
        _CASES["yaml_refused"] += 1
        assert str(exc).startswith(path.name), str(exc)


@pytest.mark.parametrize("name, text, message", [
    ("brace.yaml", "backend: k\nkernels:\n  - name: k.x\n    op: linear\n    implementation: 'oracle.kernel:Kernel'\n"
                   "    modes: [{weight: fp8_tensor, activation: fp8, name: m}]\n"
                   "    constraints:\n      - reason: 'K { must be even'\n        require: {field: K, divisible_by: 2}\n",
     "brace.yaml:8: kernel k.x: reason 'K { must be even' is not a valid template"),
    ("nul.yaml", "on_unsupported: error\nbackends: {moe: \x00}\n", "nul.yaml:2: invalid YAML: unacceptable character"),
    ("exit.yaml", "backend: k\nkernels:\n  - name: k.x\n    op: linear\n    implementation: 'zoo_exit_at_import:K'\n"
                  "    modes: [{weight: fp8_tensor, activation: fp8, name: m}]\n",
     "exit.yaml:3: kernel k.x: cannot import zoo_exit_at_import:K: SystemExit: 0"),
])
def test_verify_reports_each_bad_file_in_one_line(global_toy_registry, tmp_path, capsys, monkeypatch, name, text,
                                                  message):
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "plugin_zoo"))
    path = tmp_path / name
    path.write_text(text)
    monkeypatch.chdir(tmp_path)
    assert main(["verify", name]) == 1
    out = capsys.readouterr().out
    assert f"FAIL {message}" in out, out


# ---- property: structured mutations of shipped kernels files (any leaf, any value) ---------------
KERNEL_FILES = [p for p in SHIPPED_YAML if p.name != "default.yaml"]
leaf_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 1 << 40) | st.floats(allow_nan=True)
    | st.sampled_from(["{", "{sm:d}", "{dtype:d}", "{activation_params.limit}", "{}", "B12X", "mxfp5", "moe",
                       "oracle.kernel:Kernel", "nope:Nope", ">=1.5.1", "not a range", "12.0", "sm120", ""]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["field", "equals", "in", "range", "min", "all", "not", "reason", "require", "when",
                         "weight", "activation", "name", "family", "version"]), inner, max_size=3),
    max_leaves=6)


def _kernel_leaves(value, path=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield path + (k,)
            yield from _kernel_leaves(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield path + (i,)
            yield from _kernel_leaves(v, path + (i,))


_KERNEL_DATA = {p: yaml.safe_load(p.read_text()) for p in KERNEL_FILES}


@settings(max_examples=80 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(KERNEL_FILES), st.data())
def test_structurally_mutated_kernel_files_never_traceback(path, data):
    import copy
    doc = copy.deepcopy(_KERNEL_DATA[path])
    leaves = sorted(_kernel_leaves(doc), key=str)
    where_ = data.draw(st.sampled_from(leaves))
    node = doc
    for key in where_[:-1]:
        node = node[key]
    node[where_[-1]] = data.draw(leaf_values)
    text = yaml.safe_dump(doc, allow_unicode=True)
    _CASES["kernel_files"] = _CASES.get("kernel_files", 0) + 1
    try:
        with bounded():
            load_kernel_file(load_yaml_text(text, path.name), plugin="fuzz", what=path.name)
    except PolicyError as exc:
        _CASES["kernel_files_refused"] = _CASES.get("kernel_files_refused", 0) + 1
        assert str(exc).startswith(path.name) or f"{path.name}:" in str(exc), str(exc)
