"""Older surfaces, second pass: weight blocks, user regexes, model_type, top-k lists, activation parameters,
shipped kernel names, and what `oracle verify` refuses. Each refusal names file and field (or plugin)."""
from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import time
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from hardening_scale import SCALE, bounded
from oracle.cli import main
from oracle.errors import InputError
from oracle.exitcodes import INPUT, NO_KERNEL, OK
from oracle.layer import MoELayer
from oracle.models.matching import NameMatcher
from oracle.registry import Registry
from oracle.saferegex import backtracking_risk

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def explain_mutated(tmp_path: Path, example: str, change, *extra: str) -> tuple[int, str, str]:
    folder = tmp_path / example
    shutil.copytree(EXAMPLES / example, folder)
    cfg = json.loads((folder / "config.json").read_text())
    change(cfg)
    (folder / "config.json").write_text(json.dumps(cfg))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), bounded():
        code = main(["explain", "--model", str(folder), "--device", "h200", *extra])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("block", [[64, 128], [128, 64], [256, 128]])
def test_weight_blocks_other_than_declared_are_refused_by_every_kernel(tmp_path, block):
    code, out, _ = explain_mutated(tmp_path, "qwen3-30b-a3b-fp8",
                                   lambda c: c["quantization_config"].update(weight_block_size=block),
                                   "--format", "json")
    assert code == NO_KERNEL
    layers = [layer for layer in json.loads(out)["layers"] if layer["weight_format"] == "fp8_block"]
    assert layers and all(layer["status"] == "no_kernel" for layer in layers)
    reasons = {c["reason"] for layer in layers for c in layer["candidates"]}
    assert f"mode w8a8_block reads 128x128 weight blocks (its declared weight_block); the checkpoint's blocks " \
           f"are {block[0]}x{block[1]}" in reasons


def test_numeric_model_type_is_refused(tmp_path):
    code, _, err = explain_mutated(tmp_path, "qwen3-8b", lambda c: c.update(model_type=3))
    assert code == INPUT and "config.json: model_type: expected a string" in err


def test_one_element_top_k_list_is_read_as_its_value_everywhere(tmp_path):
    """Read consistently (Hunyuan writes per-layer lists): [8] is 8, like 8 itself; lists that differ refused."""
    _, plain, _ = explain_mutated(tmp_path / "a", "qwen3-30b-a3b-fp8", lambda c: None, "--format", "json")
    code, listed, _ = explain_mutated(tmp_path / "b", "qwen3-30b-a3b-fp8",
                                      lambda c: c.update(num_experts_per_tok=[8]), "--format", "json")
    top = lambda out: {layer["shape"].get("top_k") for layer in json.loads(out)["layers"] if layer["op"] == "moe"}
    assert code == OK and top(listed) == top(plain) == {8}
    code, _, err = explain_mutated(tmp_path / "c", "qwen3-30b-a3b-fp8",
                                   lambda c: c.update(num_experts_per_tok=[8, 4]))
    assert code == INPUT and "num_experts_per_tok" in err


def test_swiglu_parameters_on_relu2_are_refused_before_selection():
    with pytest.raises(ValidationError, match=r"activation_params \['alpha', 'limit'\] do not apply to activation "
                                              r"'relu2_no_mul'; it takes no parameters"):
        MoELayer(num_experts=8, top_k=2, hidden_size=128, intermediate_size=256, weight_format="nvfp4",
                 activation="relu2_no_mul", activation_params={"limit": 7.0, "alpha": 1.702})


def test_swiglu_limit_in_a_relu2_config_is_refused(tmp_path):
    code, _, err = explain_mutated(tmp_path, "qwen3-30b-a3b-fp8",
                                   lambda c: c.update(hidden_act="relu2", swiglu_limit=7.0))
    assert code == INPUT and "swiglu_limit" in err and "expected no swiglu_limit" in err, err


# ---------------------------------------------------------------- user regexes
EVIL = ["(a+)+$", "(a|aa)+$", "(.*)*x", ".*.*.*.*.*.*x", "(x+x+)+y", r"(\w+\.)*\d+$", "((a*)*)*b"]


@pytest.mark.parametrize("pattern", EVIL)
def test_backtracking_patterns_are_refused_with_the_field(tmp_path, pattern):
    start = time.perf_counter()
    code, _, err = explain_mutated(tmp_path, "qwen3-30b-a3b-fp8", lambda c: c["quantization_config"].update(
        modules_to_not_convert=["lm_head", f"re:{pattern}"]))
    assert code == INPUT and "quantization_config.modules_to_not_convert" in err and "refused" in err, err
    assert time.perf_counter() - start < 5


NAMES = st.text(alphabet="ab.x0_", min_size=0, max_size=40)
PATTERN = st.recursive(st.sampled_from(["a", "b", ".", r"\.", "x", r"\d", "[ab]"]),
                       lambda inner: st.one_of(
                           st.tuples(inner, st.sampled_from(["*", "+", "?", "{2,}"])).map("".join),
                           st.tuples(inner, inner).map("".join),
                           st.tuples(inner, inner).map(lambda t: f"({t[0]}|{t[1]})"),
                           inner.map(lambda t: f"({t})")), max_leaves=8)


@settings(max_examples=150 * SCALE, deadline=None)
@given(pattern=PATTERN, name=NAMES)
def test_user_patterns_are_refused_or_match_in_bounded_time(pattern, name):
    """Every generated pattern is either refused or matches a 40-character name (and a 4 KiB one) fast."""
    try:
        matcher = NameMatcher([f"re:{pattern}"], source="config.json", field="ignore")
    except InputError as exc:
        assert str(exc).startswith("config.json: ignore: ") and ("refused" in str(exc) or "invalid" in str(exc))
        assert backtracking_risk(pattern) is not None or "invalid" in str(exc)
        return
    start = time.perf_counter()
    for text in (name, name * 100 + "!"):
        matcher.match(text + "$")
    assert time.perf_counter() - start < 1.0, pattern
    assert bool(matcher.match(name)) == bool(re.match(pattern, name))   # the same meaning as re.match


# ---------------------------------------------------------------- plugins and verify
def _kernels(name: str, backend: str) -> dict:
    return {"backend": backend, "tier": "reference", "kernels": [{
        "name": name, "op": "moe", "implementation": "oracle_emulation.moe:EmulationMoE",
        "modes": [{"weight": "fp8_block", "activation": "bf16", "name": "w8a16_block"}]}]}


class _Plugin:
    def __init__(self, data: dict):
        self.data = data

    @property
    def hooks(self):
        import oracle
        data = self.data

        class Hooks:
            @oracle.hookimpl
            def register_kernels(self, register):
                register(data)
        return Hooks()


def _entry_point(name: str, dist: str, plugin) -> types.SimpleNamespace:
    return types.SimpleNamespace(name=name, dist=types.SimpleNamespace(name=dist, version="1"), load=lambda: plugin)


def test_a_shipped_kernel_name_stays_shipped_and_the_newcomer_is_at_fault(monkeypatch):
    import importlib.metadata
    real = list(importlib.metadata.entry_points(group="oracle.kernels"))
    squatter = _entry_point("aaa-squatter", "aaa-squatter", _Plugin(_kernels("emulation.moe", "squat")).hooks)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [squatter, *real])
    registry = Registry.from_entry_points()
    assert registry.by_name["emulation.moe"].plugin == "emulation"
    failure = next(f for f in registry.failures if "emulation.moe" in f.message)
    assert failure.plugin == "aaa-squatter" and "already declared by plugin emulation" in failure.message
    assert not [f for f in registry.failures if f.plugin == "emulation"]


@pytest.mark.parametrize("obj", [5, print, types.ModuleType("empty"), "oracle_emulation.plugin"])
def test_an_entry_point_object_that_is_no_plugin_is_refused(obj):
    registry = Registry.from_plugins([("notaplugin", obj)])
    failure = next(f for f in registry.failures if f.plugin == "notaplugin")
    assert failure.stage == "register" and "implements no oracle hook" in failure.message
    assert not registry.plugins


@pytest.mark.parametrize("check, needle", [("oracle_emulation.plugin:no_such_check", "has no 'no_such_check'"),
                                           ("no_such_module_xyz:check", "cannot import no_such_module_xyz"),
                                           ("oracle.formats:E4M3_MAX", "not a function")])
def test_verify_refuses_a_runtime_check_that_names_nothing(tmp_path, capsys, check, needle):
    kernels = tmp_path / "kernels.yaml"
    kernels.write_text(f"""\
backend: mine
tier: reference
kernels:
  - name: mine.moe
    op: moe
    implementation: oracle_emulation.moe:EmulationMoE
    requires:
      runtime: {{check: "{check}"}}
    modes: [{{weight: fp8_block, activation: bf16, name: w8a16_block}}]
""")
    assert main(["verify", str(kernels)]) == INPUT
    out = capsys.readouterr().out
    assert "FAIL" in out and "requires.runtime.check" in out and needle in out, out


def test_the_shipped_list_is_every_plugin_of_this_checkout():
    from oracle.registry import SHIPPED_DISTRIBUTIONS
    root = Path(__file__).resolve().parent.parent / "plugins"
    names = {re.search(r'(?m)^name = "([^"]+)"', p.read_text()).group(1) for p in root.glob("*/pyproject.toml")}
    assert names == set(SHIPPED_DISTRIBUTIONS)
