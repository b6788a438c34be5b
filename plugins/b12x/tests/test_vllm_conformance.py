"""Conformance of the b12x plugin's verdicts with the best-known engine's own b12x checks.

A generated grid of MoE and dense-linear configurations (>= 1000 each) is decided twice:
by the plugin's kernels.yaml constraints (as the engine evaluates them) and by vLLM 0.32's
b12x `is_supported` / `can_implement` / `is_supported_config`, called with vLLM's own config
objects in the pinned vLLM venv (scripts/vllm-venv; tests/conformance/vllm_b12x_verdicts.py,
platform faked to SM120). Every disagreement must match an entry of
tests/conformance/vllm-b12x-intentional.yaml (with its reason), and every entry must still
match something, so a new disagreement, or a stale excuse, fails.

Outside CI the test skips when the vLLM venv has not been created; with CI=true it creates
(or reuses) it and never skips.
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml

from b12x_test_helpers import CONFORMANCE_COUNTS, yaml_reasons
from oracle.layer import LinearLayer, MoELayer

ROOT = Path(__file__).resolve().parents[3]
CONFORMANCE = ROOT / "tests" / "conformance"
INTENTIONAL_FILE = CONFORMANCE / "vllm-b12x-intentional.yaml"


# ------------------------------------------------------------------------------ the grid
_MOE_ACTIVATIONS = [("silu", {}), ("silu", {"limit": 7.0}), ("situ", {"beta": 4.0, "linear_beta": 25.0}),
                    ("situ", {}), ("situ", {"beta": 3.0, "linear_beta": 25.0}),
                    ("swigluoai_uninterleave", {"limit": 7.0, "alpha": 1.702, "beta": 1.0}),
                    ("relu2_no_mul", {}), ("swigluoai", {"limit": 7.0}), ("gelu", {})]
_MOE_SHAPES = [(4096, 1536), (2880, 2880), (7168, 2048), (2048, 768), (4000, 1024), (4096, 1000), (3072, 1024),
               (5120, 8192)]
_MOE_VARIATIONS = [{"has_bias": True}, {"tp_size": 2}, {"tp_size": 8}, {"ep_size": 2}, {"eplb": True},
                   {"use_all2all": True}, {"lora": True}, {"num_experts": 2048, "top_k": 8},
                   {"apply_router_weight_on_input": True},  # a negative SwiGLU limit: MoELayer refuses it
                   {"dtype": "float16"}, {"dtype": "float32"}]
_LINEAR_K = (4096, 7168, 2880, 1000, 4160, 96)
_LINEAR_N = (4096, 2880, 576, 4100, 128)
_DTYPES = ("bfloat16", "float16", "float32")


def _moe_layers():
    for weight, (act, params), (h, i), dtype in itertools.product(
            ("mxfp4", "nvfp4"), _MOE_ACTIVATIONS, _MOE_SHAPES, _DTYPES):
        yield MoELayer(num_experts=32, top_k=4, hidden_size=h, intermediate_size=i, weight_format=weight,
                       activation=act, activation_params=params, dtype=dtype)
    for weight, extra, (h, i) in itertools.product(("mxfp4", "nvfp4"), _MOE_VARIATIONS, _MOE_SHAPES[:3]):
        fields = {"num_experts": 32, "top_k": 4, "hidden_size": h, "intermediate_size": i, "activation": "silu",
                  "weight_format": weight, **extra}
        yield MoELayer(**fields)


_LINEAR_QUANT = {
    "fp8_tensor": [("fp8", s, None) for s in ("static_tensor", "dynamic_tensor", "dynamic_token")],
    "fp8_block": [("fp8", "dynamic_group", b) for b in ((128, 128), (64, 128), (128, 64), (256, 128))],
    "mxfp8": [("mxfp8", None, None)],
    "nvfp4": [("nvfp4", None, None), (None, None, None)],
    "mxfp4": [("mxfp4", None, None), (None, None, None)],
}


def _linear_layers():
    for weight, quants in _LINEAR_QUANT.items():
        for (act, scale, block), k, n, dtype in itertools.product(quants, _LINEAR_K, _LINEAR_N, _DTYPES):
            yield LinearLayer(in_features=k, out_features=n, weight_format=weight, activation_format=act,
                              activation_scale=scale, weight_block=block, dtype=dtype)


def _kernel_name(layer) -> str:
    return "b12x.moe" if layer.op == "moe" else f"b12x.linear.{layer.weight_format}"


def _vllm_case(case_id: str, layer, mode) -> dict:
    """The same question in the terms vLLM's checks take (see vllm_b12x_verdicts.py)."""
    if layer.op == "moe":
        return {"id": case_id, "op": "moe", "weight": mode.weight, "activation_format": mode.activation,
                **layer.model_dump(include={"num_experts", "top_k", "hidden_size", "intermediate_size",
                                            "activation", "activation_params", "dtype", "tp_size", "ep_size",
                                            "use_all2all", "eplb", "lora", "has_bias"})}
    case = {"id": case_id, "op": "linear", "kernel": layer.weight_format, "N": layer.out_features,
            "K": layer.in_features, "dtype": layer.dtype, "activation": layer.activation_format,
            "activation_scale": layer.activation_scale, "a16": mode.activation in ("bf16", "fp16")}
    if layer.weight_block:
        case["weight_block"] = list(layer.weight_block)
    return case


def _cases(specs):
    """(id, layer, mode, oracle reasons, vLLM case) for every grid point and every mode of its kernel."""
    out = []
    for layer in itertools.chain(_moe_layers(), _linear_layers()):
        spec = specs[_kernel_name(layer)]
        for mode in spec.modes_for(layer.weight_format):
            case_id = str(len(out))
            out.append((case_id, layer, mode, yaml_reasons(spec, mode, layer), _vllm_case(case_id, layer, mode)))
    return out


# ------------------------------------------------------------------------------ vLLM
def _vllm_python() -> str:
    script = ROOT / "scripts" / "vllm-venv"
    in_ci = os.environ.get("CI") == "true"
    run = subprocess.run([str(script)] + ([] if in_ci else ["--check"]), capture_output=True, text=True,
                         cwd=ROOT, timeout=3000)
    if run.returncode != 0:
        if in_ci:
            pytest.fail(f"scripts/vllm-venv failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
        pytest.skip(f"the pinned vLLM venv is not created (run scripts/vllm-venv, ~8 min): {run.stderr.strip()}")
    return run.stdout.strip().splitlines()[-1]


def _vllm_verdicts(python: str, cases: list[dict]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PYTHON"))}
    env["VLLM_TARGET_DEVICE"] = "cpu"
    run = subprocess.run([python, str(CONFORMANCE / "vllm_b12x_verdicts.py")], input=json.dumps(cases),
                         capture_output=True, text=True, timeout=600, env=env, cwd=CONFORMANCE)
    assert run.returncode == 0, f"vLLM verdict driver failed:\n{run.stderr[-4000:]}"
    return json.loads(run.stdout)


# ------------------------------------------------------------------------------ intentional list
def _load_intentional() -> list[dict]:
    entries = yaml.safe_load(INTENTIONAL_FILE.read_text())
    assert isinstance(entries, list) and entries, f"{INTENTIONAL_FILE}: expected a list of entries"
    for e in entries:
        missing = {"id", "direction", "reason"} - set(e)
        assert not missing, f"{INTENTIONAL_FILE}: entry {e.get('id')!r} lacks {sorted(missing)}"
        assert e["direction"] in ("oracle-rejects", "vllm-rejects"), e
        assert "oracle_reason" in e or "vllm_reason" in e, f"{e['id']}: say which reason it covers"
    return entries


def _covers(entry: dict, layer, mode, oracle_reasons: list[str], vllm_reason: str | None) -> bool:
    oracle_ok = not oracle_reasons
    if (entry["direction"] == "oracle-rejects") != (not oracle_ok):
        return False
    if "op" in entry and entry["op"] != layer.op:
        return False
    if "weight" in entry and layer.weight_format not in entry["weight"]:
        return False
    if "oracle_reason" in entry and not any(w in r for w in _texts(entry["oracle_reason"]) for r in oracle_reasons):
        return False
    if "vllm_reason" in entry and not any(w in (vllm_reason or "") for w in _texts(entry["vllm_reason"])):
        return False
    return True


def _texts(value) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


# ------------------------------------------------------------------------------ the test
def test_verdicts_match_vllm_b12x_checks(b12x_specs):
    python = _vllm_python()
    cases = _cases(b12x_specs)
    result = _vllm_verdicts(python, [c[4] for c in cases])
    assert result["vllm"] == "0.32.0", result["vllm"]
    verdicts = result["verdicts"]
    entries = _load_intentional()
    counts = {op: Counter() for op in ("moe", "linear")}
    used, unexplained = Counter(), []
    for case_id, layer, mode, oracle_reasons, _ in cases:
        vllm_ok, vllm_reason = verdicts[case_id]
        seen = counts[layer.op]
        seen["total"] += 1
        if vllm_ok == (not oracle_reasons):
            seen["agree"] += 1
            continue
        entry = next((e for e in entries if _covers(e, layer, mode, oracle_reasons, vllm_reason)), None)
        if entry is None:
            unexplained.append(f"{mode.name} {layer!r}: oracle={oracle_reasons or 'accept'} "
                               f"vllm={'accept' if vllm_ok else vllm_reason}")
            seen["unexplained"] += 1
        else:
            used[entry["id"]] += 1
            seen["intentional"] += 1
    report = {op: {"unexplained": 0, "intentional": 0, **c} for op, c in counts.items()}
    CONFORMANCE_COUNTS.update({f"vllm-0.32/{op}": r for op, r in report.items()})
    CONFORMANCE_COUNTS["vllm-0.32/by_entry"] = dict(used)
    assert counts["moe"]["total"] >= 1000 and counts["linear"]["total"] >= 1000, report
    assert not unexplained, f"{len(unexplained)} unexplained disagreements with vLLM 0.32 (fix the rule or list " \
                            f"it in {INTENTIONAL_FILE.name} with the reason):\n" + "\n".join(unexplained[:40])
    stale = [e["id"] for e in entries if not used[e["id"]]]
    assert not stale, f"intentional disagreements that no longer occur (remove them): {stale}"
