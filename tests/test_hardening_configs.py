"""Mutated real configs (the shipped examples) through `oracle explain`, in-process.

Every case: exit 0, 1 or 2 per the table (never 70, never a traceback); a refusal is one
`error:` line naming the file; `--format json` output parses with a strict parser (no NaN).
Bound: each case under hardening_scale.CASE_BOUND_S (5 s). A mutated model_type sends explain to
transformers (oracle.models.meta), whose one-time import takes seconds (20 s on a loaded 2-core
machine); the module fixture `transformers_warm` pays it once, untimed, so every case is held to the bound.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hardening_scale import SCALE, bounded
from oracle.cli import main
from oracle.exitcodes import INPUT, NO_KERNEL, OK

EXAMPLES = sorted(p for p in (Path(__file__).resolve().parent.parent / "examples").iterdir() if p.is_dir())
_CASES = {"configs": 0, "exit_0": 0, "exit_1": 0, "exit_2": 0, "json_checked": 0}


def _strict(text: str):
    def refuse(token):
        raise ValueError(f"non-JSON token {token}")
    return json.loads(text, parse_constant=refuse)


def explain(folder: Path, *extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["explain", "--model", str(folder), *extra])
    return code, out.getvalue(), err.getvalue()


def with_config(example: Path, mutate) -> tuple[Path, Path]:
    tmp = Path(tempfile.mkdtemp(prefix="oracle-fuzz-"))
    folder = tmp / example.name
    shutil.copytree(example, folder)
    config = folder / "config.json"
    data = json.loads(config.read_text())
    mutate(data)
    config.write_text(json.dumps(data, allow_nan=True))
    return tmp, folder


@pytest.fixture(scope="module", autouse=True)
def transformers_warm():
    """Derive one small model through transformers' meta-device path (its imports are one-time costs)."""
    def mutate(data):
        data.update(model_type="phi3", num_hidden_layers=1)
    tmp, folder = with_config(Path(__file__).resolve().parent.parent / "examples" / "qwen3-8b", mutate)
    try:
        code, out, err = explain(folder, "--device", "h200", "--format", "json")
    finally:
        shutil.rmtree(tmp)
    assert code in (OK, INPUT), err   # unquantized qwen3-8b: exit 0; the point is the path it took
    assert _strict(out)["model"]["derivation"] == "transformers meta-device model"


@pytest.mark.parametrize("example, key, value, message", [
    ("qwen3-8b", "num_hidden_layers", 1_000_000_000, "num_hidden_layers: expected an integer from 1 to 1024"),
    ("qwen3-8b", "torch_dtype", ["bfloat16"], "torch_dtype: expected one of"),
    ("qwen3-8b", "torch_dtype", {"a": 1}, "torch_dtype: expected one of"),
    ("qwen3-8b", "model_type", "qwen3\ud800", "model_type: text contains a lone UTF-16 surrogate"),
    ("qwen3-8b", "quantization_config", {}, "quantization_config.quant_method: required key is missing"),
    ("qwen3-8b", "quantization_config", {"quant_method": "gptq", "bits": 4, "dynamic": [1, 2]},
     "quantization_config.dynamic: expected a mapping"),
    ("gpt-oss-20b", "swiglu_limit", math.nan, "swiglu_limit: expected a finite number, got nan"),
    ("gpt-oss-20b", "swiglu_limit", -math.inf, "swiglu_limit: expected a finite number"),
    ("qwen3-8b", "unused_deep_key", json.loads("[" * 900 + "]" * 900), "nested deeper than 64 levels"),
])
def test_issue_examples_are_one_clear_error(example, key, value, message):
    tmp, folder = with_config(Path(__file__).resolve().parent.parent / "examples" / example,
                              lambda d: d.__setitem__(key, value))
    try:
        code, out, err = explain(folder, "--device", "rtx-pro-6000", "--format", "json")
    finally:
        shutil.rmtree(tmp)
    assert code == INPUT, (out, err)
    assert err.startswith("error: ") and "config.json" in err and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 1 << 40) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6) | st.sampled_from(["\ud800", "bfloat16", "fp8", "mxfp4", "gptq", "{}"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)


def _paths(data, prefix=()):
    for key, value in data.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from _paths(value, prefix + (key,))


@st.composite
def mutations(draw):
    example = draw(st.sampled_from(EXAMPLES))
    data = json.loads((example / "config.json").read_text())
    paths = sorted(_paths(data), key=str)
    path = draw(st.sampled_from(paths))
    action = draw(st.sampled_from(["replace", "replace", "delete", "deep"]))
    value = draw(json_values) if action == "replace" else json.loads("[" * 300 + "]" * 300)
    return example, path, action, value


@settings(max_examples=120 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations(), st.sampled_from(["rtx-pro-6000", "h200", "sm90", "cpu"]), st.sampled_from(["json", "text"]))
def test_mutated_example_configs(case, device, fmt):
    example, path, action, value = case

    def mutate(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        if action == "delete":
            del node[path[-1]]
        else:
            node[path[-1]] = value
    tmp, folder = with_config(example, mutate)
    try:
        with bounded():
            code, out, err = explain(folder, "--device", device, "--format", fmt)
    finally:
        shutil.rmtree(tmp)
    _CASES["configs"] += 1
    _CASES[f"exit_{code}"] = _CASES.get(f"exit_{code}", 0) + 1
    assert code in (OK, INPUT, NO_KERNEL), err
    assert "Traceback" not in err and "internal error" not in err
    if code == INPUT and not err:  # declared quantization, no quantized layer: the report says so, exit 1
        assert ("ERROR: " in out) if fmt == "text" else _strict(out)["summary"]["exit_code"] == INPUT, out[-500:]
    elif code == INPUT:
        assert err.startswith("error: ") and ".json" in err, err
    elif fmt == "json":
        _strict(out)
        _CASES["json_checked"] += 1
