"""`oracle explain` end to end: shipped models through select_backend on SM120, SM100 and SM90 presets.

These use the installed plugins (b12x and emulation, found through the `oracle.kernels`
entry points) and the built-in policy, with an empty environment. The simulated target
is stated to have b12x 1.5.1 and triton installed (`--with-package`), so the decisions
do not depend on the packages of the machine that runs the tests.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oracle import KernelConfig, Platform
from oracle.explain import block_label, build_report, render_markdown, render_text
from oracle.models import example_names, load_model
from oracle.session import get_registry, reset_registry

REPO = Path(__file__).resolve().parents[1]
DEVICES = {"SM120": "rtx-pro-6000", "SM100": "b200", "SM90": "h200"}
TARGET_PACKAGES = {"b12x": "1.5.1", "triton": "3.6.0"}
WITH_PACKAGES = [arg for name, v in TARGET_PACKAGES.items() for arg in ("--with-package", f"{name}={v}")]


@pytest.fixture(autouse=True)
def installed_plugins():
    reset_registry()
    backends = set(get_registry().backends())
    assert {"b12x", "emulation"} <= backends, (
        "explain tests need the project's plugins installed: pip install -e plugins/b12x -e plugins/emulation")
    yield
    reset_registry()


def report(name, device, tp=1, ep=1, env=None, **config):
    platform = Platform.preset(DEVICES.get(device, device), packages=TARGET_PACKAGES)
    return build_report(load_model(name, tp=tp, ep=ep), platform, KernelConfig(**config), env=env or {})


def rows(rep, role):
    return [(m, d) for m, d in zip(rep.model.layers, rep.decisions) if m.role == role]


def decision(rep, role, block=None):
    return next(d for m, d in zip(rep.model.layers, rep.decisions) if m.role == role and
                (block is None or m.block == block))


def clean_env() -> dict[str, str]:
    """This process's environment without the switches that change decisions."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "ORACLE_"))}


def run_cli(*argv, cwd=REPO):
    extra = WITH_PACKAGES if "--device" in argv else []
    return subprocess.run([sys.executable, "-m", "oracle.cli", "explain", *argv, *extra], cwd=cwd,
                          capture_output=True, text=True, timeout=60, env=clean_env())


# ---------------------------------------------------------------- decisions per device
@pytest.mark.parametrize("device", list(DEVICES))
@pytest.mark.parametrize("name", example_names())
def test_every_example_has_a_kernel_for_every_quantized_layer(name, device):
    rep = report(name, device)
    assert rep.exit_code == 0
    for row, d in zip(rep.model.layers, rep.decisions):
        if row.quantized:
            assert d.status == "selected", (row.name, d.explain(row.layer))
        else:
            assert d.status == "unquantized"
    if device != "SM120":  # b12x needs SM12x: every b12x candidate is rejected at the platform stage
        assert all(d.backend != "b12x" for d in rep.decisions)
        for d in rep.decisions:
            for c in d.candidates:
                if c.backend == "b12x":
                    assert c.verdict == "rejected" and c.stage in ("platform", "policy"), c
                    if c.stage == "platform":
                        assert "SM12" in c.reason or "12x" in c.reason
                        assert "kernels.yaml:" in c.rule


def test_sm120_fp8_block_linear_goes_to_b12x_except_n_576():
    rep = report("deepseek-r1", "SM120")
    for role in ("q_a_proj", "q_b_proj", "kv_b_proj", "o_proj", "gate_up_proj", "shared_experts.down_proj"):
        d = decision(rep, role)
        assert (d.backend, d.mode, d.activation_format) == ("b12x", "block_fp8", "fp8"), role
    kv_a = decision(rep, "kv_a_proj_with_mqa")           # N = 512 + 64 = 576, not a multiple of 128
    assert kv_a.backend == "emulation"
    rejected = [c for c in kv_a.candidates if c.backend == "b12x"]
    assert rejected and "N=576" in rejected[0].reason and rejected[0].stage == "constraint"
    experts = decision(rep, "experts")                   # b12x has no fp8 MoE kernel
    assert experts.backend == "emulation" and not any(c.backend == "b12x" for c in experts.candidates)
    assert {g.role for g in rep.testing_only} == {"kv_a_proj_with_mqa", "experts"}


def test_sm120_nvfp4_modelopt_w4a4():
    rep = report("nvidia-qwen3-235b-a22b-nvfp4", "SM120")
    qkv = decision(rep, "qkv_proj")
    assert (qkv.backend, qkv.mode, qkv.activation_format) == ("b12x", "nvfp4_w4a4", "nvfp4")
    experts = decision(rep, "experts")
    # b12x MoE is opt-in: auto selection rejects it by policy, with the policy line
    assert experts.backend == "emulation"
    b12x = next(c for c in experts.candidates if c.kernel == "b12x.moe")
    assert b12x.stage == "policy" and "not auto-selected" in b12x.reason and "oracle_b12x/policy.yaml:" in b12x.rule

    explicit = report("nvidia-qwen3-235b-a22b-nvfp4", "SM120", moe_backend="b12x")
    d = decision(explicit, "experts")
    assert (d.backend, d.kernel, d.mode, d.activation_format) == ("b12x", "b12x.moe", "nvfp4", "nvfp4")
    forced = report("nvidia-qwen3-235b-a22b-nvfp4", "SM120", moe_backend="b12x",
                    env={"VLLM_B12X_MOE_FP4_FORCE_A16": "1"})
    d = decision(forced, "experts")
    assert (d.mode, d.activation_format) == ("w4a16", "bf16")
    assert any("VLLM_B12X_MOE_FP4_FORCE_A16" in n for n in d.notes)


def test_explicit_b12x_moe_on_sm90_has_no_kernel():
    rep = report("nvidia-qwen3-235b-a22b-nvfp4", "SM90", moe_backend="b12x")
    d = decision(rep, "experts")
    assert d.status == "no_kernel" and rep.exit_code == 2
    assert d.candidates[0].stage == "platform"
    assert decision(rep, "qkv_proj").backend in ("emulation", "triton")   # linear untouched by --moe-backend (auto)


def test_gpt_oss_explicit_b12x_moe_lists_every_reason():
    rep = report("gpt-oss-20b", "SM120", moe_backend="b12x")
    d = decision(rep, "experts")
    assert d.status == "no_kernel" and rep.exit_code == 2
    reasons = [r for c in d.candidates for r in c.reasons]
    assert "kernel does not support expert biases" in reasons
    assert {c.mode for c in d.candidates} == {"w4a8_mx", "w4a16"}
    text = render_text(rep)
    assert "NO KERNEL" in text and "ERROR: no kernel for experts layers 0-23 (x24)" in text


def test_per_format_backends_and_tp(tmp_path):
    rep = report("qwen3-30b-a3b-fp8", "SM120", tp=2, linear_backend={"fp8_block": "emulation", "default": "auto"})
    assert decision(rep, "qkv_proj").backend == "emulation"
    assert next(m.layer for m in rep.model.layers if m.role == "qkv_proj").out_features == 5120 // 2


# ---------------------------------------------------------------- rendering
def test_block_label():
    assert block_label([None]) == ""
    assert block_label([7]) == "layer 7"
    assert block_label(list(range(3, 61))) == "layers 3-60 (x58)"
    assert block_label([0, 1, 2, 5, 7, 8]) == "layers 0-2,5,7-8 (x6)"
    assert block_label([1, 3, 5, 7]) == "layers 1-7 step 2 (x4)"


def test_text_groups_and_summary():
    rep = report("deepseek-r1", "SM90")
    text = render_text(rep)
    assert "layers 3-60 (x58)  experts: moe E=256 top-8 H=7168 I=2048 silu, fp8_block g128" in text
    assert "layers 0-2 (x3)  gate_up_proj: linear K=7168 N=36864" in text
    # quantized: 61 x 5 MLA + 3 x 2 dense + 58 x (experts + 2 shared) = 485; unquantized: 58 gates + embed + lm_head.
    # torch (optimized tier) serves fp8_block linears with N and K multiples of 128: q_a, q_b, kv_b, o (4 x 61),
    # dense gate_up/down (2 x 3), shared experts (2 x 58) = 366; emulation: kv_a_proj (N=576, 61) + experts (58) = 119
    # oracle-triton (optimized tier) takes kv_a_proj (N=576, 61) + experts (58) = 119
    assert "summary: 545 layers: 366 torch, 119 triton, 60 unquantized, 0 without a kernel" in text
    assert text.count("WARNING: fallback to a testing-only kernel") == len(rep.testing_only) == 0
    groups = {g.role: g.count for g in rep.groups}
    assert groups["experts"] == 58 and groups["q_a_proj"] == 61


def test_markdown_table():
    md = render_markdown(report("gpt-oss-20b", "SM120"))
    assert md.startswith("# oracle explain: gpt-oss-20b")
    assert "| layers 0-23 (x24) | experts |" in md and "| - | lm_head |" in md


# ---------------------------------------------------------------- the command
def test_cli_json_is_one_object_with_every_layer():
    out = run_cli("--model", "gpt-oss-20b", "--device", "rtx-pro-6000", "--format", "json", "--tp", "2")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) >= {"model", "platform", "config", "layers", "summary"}
    assert data["model"]["name"] == "gpt-oss-20b" and data["model"]["tp"] == 2
    assert data["platform"]["capability"] == [12, 0]
    assert len(data["layers"]) == 98
    experts = next(entry for entry in data["layers"] if entry["role"] == "experts")
    assert {"name", "op", "weight_format", "activation_format", "status", "backend", "kernel", "mode",
            "candidates"} <= set(experts)
    assert experts["op"] == "moe" and experts["weight_format"] == "mxfp4" and experts["backend"] == "emulation"
    assert experts["shape"]["tp_size"] == 2
    b12x = next(c for c in experts["candidates"] if c["backend"] == "b12x")   # after triton's SM12x rejection
    assert b12x["rule"].startswith("plugins/b12x/oracle_b12x/policy.yaml:")   # the plugin's own policy
    assert data["summary"]["exit_code"] == 0 and data["summary"]["by_backend"] == {"emulation": 24}


def test_cli_exit_2_still_prints_everything():
    out = run_cli("--model", "gpt-oss-20b", "--device", "rtx-pro-6000", "--moe-backend", "b12x")
    assert out.returncode == 2
    assert "summary: 98 layers" in out.stdout and "lm_head" in out.stdout


def test_cli_per_format_backend_pairs_and_env():
    out = run_cli("--model", "nvidia-qwen3-235b-a22b-nvfp4", "--device", "rtx-pro-6000",
                  "--moe-backend", "nvfp4=b12x,fp8_block=auto", "--env", "VLLM_B12X_MOE_FP4_FORCE_A16=1",
                  "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    experts = next(entry for entry in data["layers"] if entry["role"] == "experts")
    assert (experts["kernel"], experts["mode"], experts["activation_format"]) == ("b12x.moe", "w4a16", "bf16")
    assert data["config"]["moe_backend"] == {"nvfp4": "b12x", "fp8_block": "auto"}


def test_cli_user_policy_changes_the_decision_and_is_cited(tmp_path):
    policy = tmp_path / "no-emulation-moe.yaml"
    policy.write_text("version: 1\ndisabled_kernels: [emulation.moe, triton.moe.fp8]\n")
    out = run_cli("--model", "qwen3-30b-a3b-fp8", "--device", "h200", "--policy", str(policy))
    assert out.returncode == 2
    assert "emulation.moe: emulation.moe is disabled" in out.stdout
    assert "no-emulation-moe.yaml:2" in out.stdout


@pytest.mark.parametrize("argv,needle", [
    (["--model", "/nonexistent/config.json"], "/nonexistent/config.json: --model: file not found"),
    (["--model", "no-such-model"], "shipped examples: deepseek-r1, gpt-oss-20b"),
    (["--model", "gpt-oss-20b", "--tp", "0"], "--tp: expected a positive integer"),
    (["--model", "gpt-oss-20b", "--tp", "3"], "num_attention_heads 64 is not divisible by --tp 3"),
    (["--model", "gpt-oss-20b", "--moe-backend", "nvfp4=b13x"], "unknown backend 'b13x'"),
    (["--model", "gpt-oss-20b", "--moe-backend", "fp9=b12x"], "--moe-backend: unknown weight format 'fp9'"),
    (["--model", "gpt-oss-20b", "--device", "tpu-v9"], "unknown device 'tpu-v9'"),
])
def test_cli_bad_arguments_exit_1_with_one_line(argv, needle):
    out = run_cli(*argv)
    assert out.returncode == 1, out.stdout
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], out.stderr


def _bad(tmp_path, text):
    (tmp_path / "config.json").write_text(text)
    return str(tmp_path / "config.json")


@pytest.mark.parametrize("content,needle", [
    ('{"model_type": "llama",', "invalid JSON at line 1"),
    ('[1, 2]', "expected a JSON object"),
    ('{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1, '
     '"vocab_size": 10, "quantization_config": {"quant_method": "int3"}}', "quantization_config.quant_method: unknown"),
    ('{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10}',
     "num_hidden_layers: required key is missing"),
    ('{"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1, '
     '"vocab_size": 10, "num_experts": 4, "num_experts_per_tok": 2}', "moe_intermediate_size: required key"),
])
def test_cli_bad_config_names_file_and_key(tmp_path, content, needle):
    path = _bad(tmp_path, content)
    out = run_cli("--model", path, "--device", "h200")
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}") and needle in lines[0], out.stderr


def test_import_stays_light():
    code = ("import sys, oracle, oracle.explain, oracle.models; "
            "oracle.models.load_model('deepseek-r1'); "
            "heavy = [m for m in ('torch', 'b12x', 'flashinfer', 'triton') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_generic_fallback_is_said_in_every_format(tmp_path):
    cfg = {"model_type": "foo_lm", "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
           "vocab_size": 100, "intermediate_size": 512}
    path = _bad(tmp_path, json.dumps(cfg))
    text = run_cli("--model", path, "--device", "h200")
    assert text.returncode == 0
    assert "note      architecture 'foo_lm' is not known: layers were derived from the standard keys" in text.stdout
    data = json.loads(run_cli("--model", path, "--device", "h200", "--format", "json").stdout)
    assert data["model"]["generic_fallback"] is True
    assert "generic fallback" in run_cli("--model", path, "--device", "h200", "--format", "markdown").stdout


def test_missing_b12x_package_is_the_stated_reason():
    platform = Platform.preset("rtx-pro-6000", packages={"b12x": None})
    rep = build_report(load_model("qwen3-30b-a3b-fp8"), platform, KernelConfig(), env={})
    qkv = decision(rep, "qkv_proj")
    assert qkv.backend == "emulation"
    b12x = next(c for c in qkv.candidates if c.backend == "b12x")
    assert b12x.stage == "platform" and "b12x is not installed" in b12x.reason and "kernels.yaml:" in b12x.rule
