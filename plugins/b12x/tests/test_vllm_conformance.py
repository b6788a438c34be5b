"""Whole selections of the b12x and flashinfer_b12x backends against vLLM 0.32's own selection.

A generated grid of MoE and dense-linear layers, each asked as an explicit backend request
(--moe-backend / --linear-backend b12x or flashinfer_b12x) in one of four provider setups
(standalone b12x, flashinfer-python alone, both, none), is decided twice: by the oracle
(`select_backend`, the whole engine: policy, activation choice, checkpoint-declared formats,
FORCE_A16, the provider check, constraints) and by vLLM's selection functions in the pinned
vLLM venv (tests/conformance/vllm_b12x_selection.py). Each side's answer is reduced to an
outcome: selected (kernel, mode, activation format), refused (the first reason's class) or
elsewhere (the backend has no kernel for the layer; automatic selection takes it).

Reason classes are a closed vocabulary: the oracle's are its constraint ids (and the platform
requirement that failed), vLLM's come from an exact table of its reason texts (VLLM_REASONS;
an unknown text fails the test). Every difference must match an entry of
tests/conformance/vllm-b12x-accepted.yaml exactly (both outcomes, both classes, and the
configuration fields it names); every entry must still match something.

Outside CI the test skips when the vLLM venv has not been created; with CI=true it creates
(or reuses) it and never skips.
"""
from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from b12x_test_helpers import CONFORMANCE_COUNTS, load_kernel_specs
from oracle import KernelConfig, LinearLayer, MoELayer, Platform, select_backend

ROOT = Path(__file__).resolve().parents[3]
CONFORMANCE = ROOT / "tests" / "conformance"
ACCEPTED_FILE = CONFORMANCE / "vllm-b12x-accepted.yaml"
CODECS = ("iq2_xs", "iq2_xxs", "q8_0")
CODEC_BLOCK = {"iq2_xs": 256, "iq2_xxs": 256, "q8_0": 32}
FORCE_A16 = "VLLM_B12X_MOE_FP4_FORCE_A16"
PROVIDERS = {   # stated versions of the simulated machine, per provider setup
    "b12x": {"b12x": "1.5.1", "flashinfer-python": None},
    "flashinfer": {"b12x": None, "flashinfer-python": "0.7.2.post1"},
    "both": {"b12x": "1.5.1", "flashinfer-python": "0.7.2"},
    "none": {"b12x": None, "flashinfer-python": None},
}

# ------------------------------------------------------------------------------ the grid
_MOE_ACTIVATIONS = [("silu", {}), ("silu", {"limit": 7.0}), ("situ", {"beta": 4.0, "linear_beta": 25.0}),
                    ("situ", {"beta": 3.0, "linear_beta": 25.0}),
                    ("situ", {"beta": 4.0, "linear_beta": 25.0, "limit": 7.0}),
                    ("swigluoai_uninterleave", {"limit": 7.0, "alpha": 1.702, "beta": 1.0}),
                    ("relu2_no_mul", {}), ("relu2_no_mul", {"limit": 7.0}), ("swigluoai", {"limit": 7.0}),
                    ("gelu", {})]
_MOE_SHAPES = [(4096, 1536), (2880, 2880), (7168, 2048), (2048, 768), (4000, 1024), (4096, 1000), (3072, 1024)]
_MOE_VARIATIONS = [{"has_bias": True}, {"tp_size": 2}, {"tp_size": 8}, {"ep_size": 2}, {"eplb": True},
                   {"use_all2all": True}, {"lora": True}, {"dtype": "float16"}, {"dtype": "float32"},
                   *({"num_experts": e, "top_k": 8} for e in (8, 64, 128, 256, 512, 1024, 1025, 2048, 4096))]
_DECLARED_MOE = {"mxfp4": (None, "mxfp8"), "nvfp4": (None, "nvfp4", "mxfp8")}
_CODEC_ACTIVATIONS = [("silu", {}), ("silu", {"limit": 7.0}), ("relu2_no_mul", {}),
                      ("relu2_no_mul", {"limit": 7.0}), ("situ", {"beta": 4.0, "linear_beta": 25.0}),
                      ("swigluoai", {"limit": 7.0})]
_CODEC_SHAPES = [(4096, 1536), (4096, 2048), (2048, 768), (3072, 1280)]
_CODEC_VARIATIONS = [{}, {"has_bias": True}, {"tp_size": 2}, {"tp_size": 8}, {"ep_size": 2}, {"eplb": True},
                     {"dtype": "float16"}]
_LINEAR_K = (4096, 7168, 2880, 1000, 4160, 96)
_LINEAR_N = (4096, 2880, 576, 4100, 128)
_DTYPES = ("bfloat16", "float16", "float32")
# weight format -> (declared activation format, activation scale, weight block) readings
_LINEAR_QUANT = {
    "fp8_tensor": [("fp8", s, None) for s in ("static_tensor", "dynamic_tensor", "dynamic_token", None)],
    "fp8_channel": [("fp8", "dynamic_token", None)],
    "fp8_block": [("fp8", s, b) for s in ("dynamic_group", "dynamic_token", "static_tensor", None)
                  for b in ((128, 128), (64, 128), (128, 64))],
    "mxfp8": [("mxfp8", None, None)],
    "nvfp4": [("nvfp4", None, None), (None, None, None)],
    "mxfp4": [("mxfp4", None, None), (None, None, None)],
    **{codec: [(None, None, None)] for codec in CODECS},
}


def _moe_case(backend="b12x", provider="b12x", force_a16=False, declared=None, **fields) -> dict:
    base = {"num_experts": 32, "top_k": 4, "activation": "silu", "activation_params": {}, "dtype": "bfloat16",
            "tp_size": 1, "ep_size": 1, "use_all2all": False, "eplb": False, "lora": False, "has_bias": False}
    return {"op": "moe", "backend": backend, "provider": provider, "force_a16": force_a16, "declared": declared,
            **base, **fields}


def _moe_cases():
    for weight, declared_all in _DECLARED_MOE.items():
        for declared, (act, params), (h, i), dtype, force in itertools.product(
                declared_all, _MOE_ACTIVATIONS, _MOE_SHAPES, _DTYPES, (False, True)):
            yield _moe_case(weight=weight, declared=declared, activation=act, activation_params=params,
                            hidden_size=h, intermediate_size=i, dtype=dtype, force_a16=force)
        for declared, extra, (h, i) in itertools.product(declared_all, _MOE_VARIATIONS, _MOE_SHAPES[:3]):
            yield _moe_case(weight=weight, declared=declared, hidden_size=h, intermediate_size=i, **extra)
    for codec, (act, params), (h, i), extra in itertools.product(CODECS, _CODEC_ACTIVATIONS, _CODEC_SHAPES,
                                                                 _CODEC_VARIATIONS):
        yield _moe_case(weight=codec, activation=act, activation_params=params, hidden_size=h,
                        intermediate_size=i, **extra)
    # FlashInfer's own SM12x fused MoE (NVFP4 only in vLLM)
    for declared, (act, params), (h, i), dtype in itertools.product(
            (None, "nvfp4"), _MOE_ACTIVATIONS, _MOE_SHAPES, _DTYPES):
        yield _moe_case("flashinfer_b12x", "both", weight="nvfp4", declared=declared, activation=act,
                        activation_params=params, hidden_size=h, intermediate_size=i, dtype=dtype)
    for declared, extra, force in itertools.product((None, "nvfp4"), _MOE_VARIATIONS, (False, True)):
        yield _moe_case("flashinfer_b12x", "flashinfer", force, weight="nvfp4", declared=declared,
                        hidden_size=4096, intermediate_size=1536, **extra)
    # provider setups
    for provider, backend, (weight, declared) in itertools.product(
            PROVIDERS, ("b12x", "flashinfer_b12x"), (("mxfp4", "mxfp8"), ("nvfp4", "nvfp4"), ("nvfp4", None),
                                                     ("q8_0", None))):
        if backend == "flashinfer_b12x" and weight != "nvfp4":
            continue
        yield _moe_case(backend, provider, weight=weight, declared=declared, hidden_size=4096,
                        intermediate_size=1536)


def _linear_case(backend="b12x", provider=None, **fields) -> dict:
    # b12x's MXFP4 linear quantizes its activations with flashinfer: asked where both are installed
    provider = provider or ("both" if fields["kernel"] == "mxfp4" else "b12x")
    return {"op": "linear", "backend": backend, "provider": provider, "has_bias": False, **fields}


def _linear_cases():
    for kind, readings in _LINEAR_QUANT.items():
        for (declared, scale, block), k, n, dtype in itertools.product(readings, _LINEAR_K, _LINEAR_N, _DTYPES):
            yield _linear_case(kernel=kind, declared=declared, activation_scale=scale,
                               weight_block=list(block) if block else None, K=k, N=n, dtype=dtype)
        for declared, scale, block in readings:        # a linear bias, on two shapes
            for k, n in ((4096, 4096), (2880, 576)):
                yield _linear_case(kernel=kind, declared=declared, activation_scale=scale,
                                   weight_block=list(block) if block else None, K=k, N=n, dtype="bfloat16",
                                   has_bias=True)
    for (declared, _, _), k, n, dtype in itertools.product(_LINEAR_QUANT["nvfp4"], _LINEAR_K, _LINEAR_N, _DTYPES):
        yield _linear_case("flashinfer_b12x", "both", kernel="nvfp4", declared=declared, activation_scale=None,
                           weight_block=None, K=k, N=n, dtype=dtype)
    for kind in ("fp8_tensor", "mxfp8", "mxfp4", "q8_0"):       # no FlashInfer SM12x kernel: automatic selection
        declared, scale, block = _LINEAR_QUANT[kind][0]
        yield _linear_case("flashinfer_b12x", "both", kernel=kind, declared=declared, activation_scale=scale,
                           weight_block=list(block) if block else None, K=4096, N=4096, dtype="bfloat16")
    for provider, backend, kind in itertools.product(PROVIDERS, ("b12x", "flashinfer_b12x"),
                                                     ("nvfp4", "mxfp8", "mxfp4", "q8_0")):
        declared, scale, block = _LINEAR_QUANT[kind][0]
        yield _linear_case(backend, provider, kernel=kind, declared=declared, activation_scale=scale,
                           weight_block=None, K=4096, N=4096, dtype="bfloat16")


def _cases() -> list[dict]:
    out = []
    for case in itertools.chain(_moe_cases(), _linear_cases()):
        case["id"] = str(len(out))
        out.append(case)
    return out


# ------------------------------------------------------------------------------ the oracle's answer
def _layer(case: dict):
    if case["op"] == "moe":
        fields = {k: case[k] for k in ("num_experts", "top_k", "hidden_size", "intermediate_size", "activation",
                                       "activation_params", "dtype", "tp_size", "ep_size", "use_all2all", "eplb",
                                       "lora", "has_bias")}
        return MoELayer(weight_format=case["weight"], activation_format=case["declared"], **fields)
    block = tuple(case["weight_block"]) if case["weight_block"] else None
    return LinearLayer(in_features=case["K"], out_features=case["N"], weight_format=case["kernel"],
                       activation_format=case["declared"], activation_scale=case["activation_scale"],
                       weight_block=block, dtype=case["dtype"], has_bias=case["has_bias"])


class _Classes:
    """Reason classes of the oracle's refusals: constraint ids, and the platform requirement that failed."""

    ALIASES = {"expert-parallel": "parallel", "all2all": "parallel", "eplb": "parallel",
               "codec-whole-blocks-q8": "codec-shape", "codec-whole-blocks-iq2": "codec-shape",
               "codec-b12x-shape-q8": "codec-shape", "codec-b12x-shape-iq2": "codec-shape",
               "codec-activation": "activation", "codec-swiglu-limit": "swiglu-limit"}
    PROVIDER_RULES = {"environment", "package:b12x", "package:flashinfer-python"}

    def __init__(self):
        self.by_rule: dict[str, str] = {}
        for name in ("kernels.yaml", "flashinfer_kernels.yaml"):
            for spec in load_kernel_specs(name).values():
                for rule in spec.constraints:
                    assert rule.id, f"{spec.name}: constraint at {rule.source} has no id (the conformance class)"
                    self.by_rule[rule.source] = self.ALIASES.get(rule.id, rule.id)
                for key, where in spec.lines.items():
                    self.by_rule.setdefault(where, "provider" if key in self.PROVIDER_RULES else f"platform:{key}")
                # the engine's check of a mode's declared weight_block cites the kernel's entry
                self.by_rule[spec.source] = "weight-block"

    def of(self, candidate) -> str:
        if candidate.stage == "policy":     # the activation choice (policy activations) left it no mode
            return "activation-mode" if candidate.reason.startswith("no mode for activations") else "policy"
        rule = (candidate.rules or (candidate.rule,))[0]
        return self.by_rule.get(rule, f"unclassified oracle rule {rule}")


def _oracle_outcome(case: dict, classes: _Classes) -> tuple:
    try:
        layer = _layer(case)
    except ValidationError as exc:      # the layer model itself refuses it (e.g. a limit SiTU does not take)
        return ("refused", f"layer:{exc.errors()[0]['loc'][0]}")
    platform = Platform.preset("rtx-pro-6000").with_packages({"triton": "3.7.1", **PROVIDERS[case["provider"]]})
    backend = case["backend"]
    config = KernelConfig(**{f"{case['op']}_backend": backend})
    d = select_backend(layer, platform, config, env={FORCE_A16: "1"} if case.get("force_a16") else {})
    if any("has no kernel for" in note for note in d.notes):
        return ("elsewhere",)
    if d.status == "selected" and d.backend == backend:
        return ("selected", d.kernel, d.mode, d.activation_format)
    own = [c for c in d.candidates if c.backend == backend and c.verdict == "rejected"]
    assert d.status == "no_kernel" and own, (case, d.status, d.candidates)
    return ("refused", classes.of(own[-1]))      # the last mode tried, as vLLM raises its last error


# ------------------------------------------------------------------------------ vLLM's answer
#: vLLM's reason texts -> class (full match). A text not listed fails the test: add it here with its class.
VLLM_REASONS = [
    (r"kernel does not support expert biases", "bias"),
    (r"kernel does not support torch\.\w+ input/output dtype", "dtype"),
    (r"kernel supports only SiTU beta=4 and linear_beta=25", "situ-params"),
    (r"kernel does not support swigluoai_uninterleave with W4A8", "swigluoai-w4a8"),
    (r"MXFP4 requires the per-rank intermediate size to be divisible by 32", "mxfp4-intermediate"),
    (r"MXFP4 W4A8 supports only SiLU and SiTU", "mxfp4-w4a8-activation"),
    (r"MXFP4 W4A8 requires hidden size divisible by 256 and per-rank intermediate size divisible by 32",
     "mxfp4-w4a8-shape"),
    (r"kernel does not support MoEActivation\.\w+ activation", "activation"),
    (r"kernel does not support parallel config .*", "parallel"),
    (r"kernel does not support LoRA", "lora"),
    (r"kernel does not support quantization scheme .*", "quant-scheme"),
    (r"kernel does not support current device .*", "provider"),
    (r"Model sets swiglu_limit=.* does not apply the SwiGLU clamp\..*", "swiglu-limit"),
    (r"Block-quantized routed experts require b12x on SM12x", "provider"),
    (r"Block-quantized supports tensor parallelism without EP or EPLB", "parallel"),
    (r"Block-quantized routed experts require BF16 activations", "codec-dtype"),
    (r"Block-quantized routed experts require standard SiLU parameters", "swiglu-limit"),
    (r"(IQ2_XS|IQ2_XXS|Q8_0) hidden and per-rank intermediate sizes must align to \d+", "codec-shape"),
    (r"Block-quantized dense weights require b12x on SM12x", "provider"),
    (r"(Supports|supports) only bf16/fp16 (input|output) dtype", "dtype"),
    (r"Input and output dtype must match", "dtype"),
    (r"Supports only dynamic per-token group activation quantization with group_shape=\(1,128\)",
     "activation-scale"),
    (r"requires static per-tensor activation scales", "activation-scale"),
    (r"Supports only 128x128 block-scaled FP8 weights", "weight-block"),
    (r"requires static per-tensor weight scales", "weight-scheme"),
    (r"Input features must be a positive multiple of 128", "k-alignment"),
    (r"Output features must be a positive multiple of 128", "n-alignment"),
    (r"weight dimensions must be positive with K divisible by 32", "k-alignment"),
    (r"B12X MXFP4 GEMM requires dynamic MXFP4 activations", "checkpoint-activation"),
    (r"Install the B12X backend with `pip install vllm\[b12x\]`", "provider"),
    (r"FlashInfer b12x requires SM120\+ and FlashInfer with Sm120BlockScaledDenseGemmKernel", "provider"),
]


def _vllm_class(case: dict, reason: str) -> str:
    # vLLM states two conditions in one text: the case says which one failed
    if reason == "Block-quantized routed experts require bias-free SiLU or ReLU2":
        return "bias" if case["has_bias"] else "activation"
    if re.fullmatch(r"(IQ2_XS|IQ2_XXS|Q8_0) dense weights require BF16, K\d+ and N8", reason):
        if case["dtype"] != "bfloat16":
            return "dtype"
        return "codec-whole-blocks" if case["K"] % CODEC_BLOCK[case["kernel"]] else "n-alignment"
    found = [cls for pattern, cls in VLLM_REASONS if re.fullmatch(pattern, reason, re.S)]
    return found[0] if found else f"unclassified vLLM reason: {reason}"


#: vLLM's selection -> the oracle's (kernel, mode, activation format)
_VLLM_MOE = {("B12X_MXFP4_MXFP8", "mxfp8"): ("b12x.moe", "w4a8_mx", "mxfp8"),
             ("B12X_MXFP4_BF16", None): ("b12x.moe", "w4a16", "bf16"),
             ("B12X", "nvfp4"): ("b12x.moe", "nvfp4", "nvfp4"),
             ("B12X", "mxfp8"): ("b12x.moe", "w4a8_nvfp4", "mxfp8"),
             ("B12X", None): ("b12x.moe", "w4a16", "bf16"),
             ("FLASHINFER_B12X", "nvfp4"): ("flashinfer_b12x.moe", "w4a4", "nvfp4"),
             ("FLASHINFER_B12X", None): ("flashinfer_b12x.moe", "w4a4_dynamic", "bf16")}
_VLLM_LINEAR = {"B12xTensorFP8ScaledMMLinearKernel": ("b12x.linear.fp8_tensor", "tensor_fp8", "fp8"),
                "B12xFp8BlockScaledMMKernel": ("b12x.linear.fp8_block", "block_fp8", "fp8"),
                "B12xMxfp8LinearKernel": ("b12x.linear.mxfp8", "mxfp8_w8a8", "mxfp8"),
                "B12xNvFp4LinearKernel": ("b12x.linear.nvfp4", "nvfp4_w4a4", "nvfp4"),
                "B12xNvFp4W4A16LinearKernel": ("b12x.linear.nvfp4", "nvfp4_w4a16", "bf16"),
                "B12xMxFp4LinearKernel": ("b12x.linear.mxfp4", "mxfp4_w4a4", "mxfp4"),
                "FlashInferB12xNvFp4LinearKernel": ("flashinfer_b12x.linear.nvfp4", "nvfp4_w4a4", "nvfp4")}


def _vllm_outcome(case: dict, raw: dict) -> tuple:
    if raw["outcome"] == "elsewhere":
        return ("elsewhere",)
    if raw["outcome"] == "refused":
        return ("refused", _vllm_class(case, raw["reason"]))
    if case["op"] == "moe":
        if case["weight"] in CODECS:
            return ("selected", "b12x.moe", "w4a16", "bf16")
        return ("selected", *_VLLM_MOE[(raw["kernel"], raw["activation"])])
    if raw["kernel"] == "ModelOptBlockQuantLinearMethod":
        return ("selected", "b12x.linear.codec", case["kernel"], "bf16")
    return ("selected", *_VLLM_LINEAR[raw["kernel"]])


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


def _vllm_outcomes(python: str, cases: list[dict]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PYTHON"))}
    env["VLLM_TARGET_DEVICE"] = "cpu"
    run = subprocess.run([python, str(CONFORMANCE / "vllm_b12x_selection.py")], input=json.dumps(cases),
                         capture_output=True, text=True, timeout=900, env=env, cwd=CONFORMANCE)
    assert run.returncode == 0, f"vLLM selection driver failed:\n{run.stderr[-4000:]}"
    return json.loads(run.stdout)


# ------------------------------------------------------------------------------ accepted differences
def _load_accepted() -> list[dict]:
    entries = yaml.safe_load(ACCEPTED_FILE.read_text())
    assert isinstance(entries, list) and entries, f"{ACCEPTED_FILE}: expected a list of entries"
    for e in entries:
        missing = {"id", "oracle", "vllm", "reason"} - set(e)
        assert not missing, f"{ACCEPTED_FILE}: entry {e.get('id')!r} lacks {sorted(missing)}"
        for side in ("oracle", "vllm"):
            assert all(o[0] in ("selected", "refused", "elsewhere") for o in _alternatives(e[side])), (e["id"], side)
    return entries


def _alternatives(value: list) -> list[tuple]:
    """An entry's outcome: one outcome list, or a list of outcome lists (any of them, each exact)."""
    return [tuple(o) for o in value] if value and isinstance(value[0], list) else [tuple(value)]


def _accepts(entry: dict, case: dict, oracle: tuple, vllm: tuple) -> bool:
    """Exact: both outcomes as listed (a refusal with its class), and every `when` field of the case
    equal to the value given (a list: one of its values)."""
    if oracle not in _alternatives(entry["oracle"]) or vllm not in _alternatives(entry["vllm"]):
        return False
    for key, want in (entry.get("when") or {}).items():
        value = case.get(key)
        value = list(value) if isinstance(value, tuple) else value
        if isinstance(want, list) and not (isinstance(value, list) and value == want):
            if value not in want:
                return False
        elif not isinstance(want, list) and value != want:
            return False
    return True


# ------------------------------------------------------------------------------ the test
def test_selections_match_vllm(monkeypatch):
    python = _vllm_python()
    monkeypatch.delenv(FORCE_A16, raising=False)
    monkeypatch.delenv("ORACLE_MOE_FP4_FORCE_A16", raising=False)
    cases = _cases()
    result = _vllm_outcomes(python, cases)
    assert result["vllm"] == "0.32.0", result["vllm"]
    classes, entries = _Classes(), _load_accepted()
    counts = {op: Counter() for op in ("moe", "linear")}
    used, unexplained = Counter(), []
    for case in cases:
        oracle, vllm = _oracle_outcome(case, classes), _vllm_outcome(case, result["outcomes"][case["id"]])
        seen = counts[case["op"]]
        seen["total"] += 1
        seen[oracle[0]] += 1
        if oracle == vllm:
            seen["agree"] += 1
            continue
        entry = next((e for e in entries if _accepts(e, case, oracle, vllm)), None)
        if entry is None:
            seen["unexplained"] += 1
            unexplained.append(f"{json.dumps({k: v for k, v in case.items() if k != 'id'})}\n"
                               f"    oracle={oracle} vllm={vllm} (vllm said: "
                               f"{result['outcomes'][case['id']].get('reason', '-')})")
        else:
            used[entry["id"]] += 1
            seen["accepted"] += 1
    report = {op: {"agree": 0, "accepted": 0, "unexplained": 0, **c} for op, c in counts.items()}
    CONFORMANCE_COUNTS.update({f"vllm-0.32-selection/{op}": r for op, r in report.items()})
    CONFORMANCE_COUNTS["vllm-0.32-selection/accepted_by_entry"] = dict(sorted(used.items()))
    assert counts["moe"]["total"] >= 2000 and counts["linear"]["total"] >= 2000, report
    assert not unexplained, (f"{len(unexplained)} selections differ from vLLM 0.32 (fix the rule, or accept the "
                             f"difference in {ACCEPTED_FILE.name} with its reason):\n" + "\n".join(unexplained[:30]))
    stale = [e["id"] for e in entries if not used[e["id"]]]
    assert not stale, f"accepted differences that no longer occur (remove them): {stale}"
