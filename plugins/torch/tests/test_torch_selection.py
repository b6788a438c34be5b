"""oracle-torch's declarations through the engine: platform verdicts and reasons per preset,
alignment rejections, the torch version requirement, three tiers end to end, and `oracle explain`."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from oracle import KernelConfig, LinearLayer, Platform, select_backend
from oracle.session import get_registry

MODELS = Path(__file__).resolve().parents[3].parent / "shared" / "models"
TORCH_OK = {"torch": "2.11.0", "triton": None}   # oracle-triton absent: torch's fall-through is emulation


def _linear(fmt="fp8_tensor", k=4096, n=4096, **more):
    return LinearLayer(name="model.layers.0.self_attn.o_proj", in_features=k, out_features=n,
                       weight_format=fmt, **more)


def _torch(decision):
    return [c for c in decision.candidates if c.backend == "torch"]


def _on(preset, **packages):
    return Platform.preset(preset, packages={**TORCH_OK, **packages})


def test_plugin_is_discovered_through_its_entry_point_in_the_optimized_tier():
    specs = {s.name: s for s in get_registry().kernels}
    names = {"torch.linear.fp8_tensor", "torch.linear.fp8_channel", "torch.linear.fp8_block",
             "torch.linear.mxfp8", "torch.linear.nvfp4"}
    assert names <= set(specs)
    assert {specs[n].tier for n in names} == {"optimized"}
    assert all(specs[n].auto_select for n in names)


def test_importing_the_engine_and_the_plugin_imports_no_torch():
    code = ("import sys, oracle, oracle_torch, oracle_torch.plugin; from oracle import select_backend, "
            "LinearLayer, Platform; select_backend(LinearLayer(in_features=64, out_features=64, "
            "weight_format='fp8_tensor'), Platform.preset('h200')); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("preset", ["h200", "h100", "l40s", "b200"])
@pytest.mark.parametrize("fmt,kernel", [("fp8_tensor", "torch.linear.fp8_tensor"),
                                        ("fp8_channel", "torch.linear.fp8_channel")])
def test_fp8_tensor_and_channel_are_selected_on_sm89_to_sm10x(preset, fmt, kernel):
    d = select_backend(_linear(fmt), _on(preset))
    assert (d.status, d.backend, d.kernel, d.activation_format) == ("selected", "torch", kernel, "fp8")
    assert d.mode_spec.params["activation_granularity"] == ("tensor" if fmt == "fp8_tensor" else "token")
    assert not any("meant for testing" in n for n in d.notes)


def test_a100_is_rejected_with_the_capability_reason_and_falls_to_emulation():
    d = select_backend(_linear("fp8_tensor"), _on("a100"))
    assert d.backend == "emulation"
    (c,) = _torch(d)
    assert c.verdict == "rejected" and c.stage == "platform"
    assert "needs compute capability 8.9 to 10.x" in c.reason and "SM80" in c.reason
    assert c.rule.startswith(str(Path("oracle_torch") / "kernels.yaml")) or "kernels.yaml:" in c.rule


def test_block_fp8_on_hopper_and_blackwell_but_not_ada():
    layer = _linear("fp8_block", k=7168, n=1536, group_size=128)
    assert select_backend(layer, _on("h200")).kernel == "torch.linear.fp8_block"
    assert select_backend(layer, _on("b200")).kernel == "torch.linear.fp8_block"
    d = select_backend(layer, _on("l40s"))
    assert d.backend == "emulation"
    assert "cuBLASLt feature of SM90/SM10x" in _torch(d)[0].reason and "SM89" in _torch(d)[0].reason


def test_mxfp8_and_nvfp4_are_declared_for_capability_10_only():
    mx = _linear("mxfp8")
    nv = _linear("nvfp4", activation_format="nvfp4")
    assert select_backend(mx, _on("b200")).kernel == "torch.linear.mxfp8"
    assert select_backend(nv, _on("b200")).kernel == "torch.linear.nvfp4"
    for layer in (mx, nv):
        d = select_backend(layer, _on("h200"))
        assert d.backend == "emulation"
        assert "datacenter Blackwell device (SM10x)" in _torch(d)[0].reason


def test_nvfp4_weight_only_checkpoints_are_not_taken():
    d = select_backend(_linear("nvfp4"), _on("b200"))
    assert d.backend == "emulation" and d.activation_format == "bf16"


def test_sm12x_is_left_to_b12x():
    layer = _linear("fp8_block", k=7168, n=1536, group_size=128)
    d = select_backend(layer, _on("rtx-pro-6000", b12x="1.5.1", triton="3.7.1"))
    assert d.backend == "b12x"
    assert "SM12x is served by b12x" in _torch(d)[0].reason or "SM120" in _torch(d)[0].reason


@pytest.mark.parametrize("k,n,fragment", [(4104, 4096, "K divisible by 16"), (4096, 4104, "N divisible by 16")])
def test_misaligned_tensor_fp8_is_rejected_by_its_constraint(k, n, fragment):
    d = select_backend(_linear("fp8_tensor", k=k, n=n), _on("h200"))
    assert d.backend == "emulation"
    (c,) = _torch(d)
    assert c.stage == "constraint" and fragment in c.reason and f"={k if 'K' in fragment else n}" in c.reason


@pytest.mark.parametrize("k,n,fragment", [(7168, 576, "N (output features) to be a multiple of 128 (whole 128x128 blocks), got N=576"),
                                          (7232, 1536, "K (input features) to be a multiple of 128 (whole 1x128 groups), got K=7232")])
def test_block_fp8_needs_whole_128_blocks(k, n, fragment):
    d = select_backend(_linear("fp8_block", k=k, n=n, group_size=128), _on("h200"))
    assert d.backend == "emulation" and fragment in _torch(d)[0].reason


def test_block_fp8_rejects_other_dtypes_and_group_sizes():
    d = select_backend(_linear("fp8_block", k=1024, n=1024, dtype="float16"), _on("h200"))
    assert "bfloat16 output only, got float16" in _torch(d)[0].reason
    d = select_backend(_linear("fp8_block", k=1024, n=1024, group_size=64), _on("h200"))
    assert "got group_size=64" in _torch(d)[0].reason


def test_old_torch_is_rejected_with_the_version_reason():
    d = select_backend(_linear("fp8_tensor"), Platform.preset("h200").with_packages({"torch": "2.3.0"}))
    assert d.backend == "emulation"
    (c,) = _torch(d)
    assert "package torch 2.3.0 is installed but >=2.11 is needed" in c.reason
    assert "verified with torch 2.11" in c.reason


def test_missing_torch_is_named():
    d = select_backend(_linear("fp8_tensor"), Platform.preset("h200").with_packages({"torch": None}, only=True))
    reason = _torch(d)[0].reason
    assert "torch" in reason and "not installed" in reason


def test_simulated_preset_says_the_runtime_probe_was_assumed():
    d = select_backend(_linear("fp8_tensor"), _on("h200"))
    assert "runtime check oracle_torch.runtime:check assumed to pass" in _torch(d)[0].reason


def test_this_cpu_machine_rejects_torch_on_the_vendor():
    d = select_backend(_linear("fp8_tensor"), Platform.detect())
    if Platform.detect().vendor != "cpu":
        pytest.skip("a GPU is present: the GPU tests cover the detected device")
    assert "need an NVIDIA CUDA device" in _torch(d)[0].reason


def test_explicit_torch_backend_and_per_format_override():
    cfg = KernelConfig(linear_backend={"fp8_block": "torch", "default": "emulation"})
    assert select_backend(_linear("fp8_block", k=1024, n=1024), _on("h200"), cfg).backend == "torch"
    assert select_backend(_linear("fp8_tensor"), _on("h200"), cfg).backend == "emulation"


def _explain(model, device="h200", fmt="json"):
    out = subprocess.run([sys.executable, "-m", "oracle.cli", "explain", "--model", str(MODELS / model),
                          "--device", device, "--format", fmt, "--with-package", "torch=2.11.0"],
                         capture_output=True, text=True)
    assert out.returncode in (0, 2), out.stderr
    return out.stdout


@pytest.mark.skipif(not MODELS.is_dir(), reason=f"shared model configs not found at {MODELS}")
def test_explain_qwen3_fp8_on_h200_selects_torch_for_every_dense_fp8_layer():
    text = _explain("qwen3-30b-a3b-fp8", fmt="text")
    assert "qkv_proj" in text and "-> torch.linear.fp8_block (backend torch)" in text
    linear_lines = [ln for ln in text.splitlines() if "-> emulation.linear" in ln]
    assert not linear_lines, linear_lines


@pytest.mark.skipif(not MODELS.is_dir(), reason=f"shared model configs not found at {MODELS}")
def test_explain_deepseek_r1_on_h200_names_the_reason_for_kv_a_proj():
    text = _explain("deepseek-r1", fmt="text")
    blocks = text.split("\n\n")
    kv_a = next(b for b in blocks if "kv_a_proj_with_mqa" in b)
    # torch refuses it with its reason; the next candidate of the ordering serves it (oracle-triton's
    # FP8 GEMM, which has no 128-multiple N limit, when that plugin is installed; else emulation)
    assert "-> triton.linear.fp8" in kv_a or "-> emulation.linear" in kv_a
    assert "torch.linear.fp8_block [w8a8_block] activations fp8: torch blockwise FP8 needs N (output features) to be a multiple of 128 (whole 128x128 blocks), got N=576" in kv_a
    q_a = next(b for b in blocks if "q_a_proj" in b)
    assert "-> torch.linear.fp8_block" in q_a


@pytest.mark.skipif(not MODELS.is_dir(), reason=f"shared model configs not found at {MODELS}")
def test_explain_llama4_fp8_dynamic_on_h200_uses_rowwise():
    data = json.loads(_explain("llama-4-scout-17b-16e-instruct-fp8-dynamic"))
    assert "torch.linear.fp8_channel" in json.dumps(data)


def test_probed_k_block_limit_is_applied_per_layer(monkeypatch):
    """If the device probe found blockwise scaling only for K/128 divisible by 4, can_implement says so.

    The hook is given the platform: the probe describes the detected device, so a simulated
    one is not affected by it.
    """
    from oracle_torch import runtime

    monkeypatch.setitem(runtime.PROBED_BLOCK_LAYOUTS, "cuda:0", "l4-only")
    monkeypatch.setattr(runtime, "check", lambda spec, platform: (True, None))   # as if the device probe passed
    detected = _on("h200").model_copy(update={"simulated": False})
    d = select_backend(_linear("fp8_block", k=1408, n=256), detected)     # K/128 = 11
    assert d.backend == "emulation"
    assert "takes only K/128 divisible by 4 (runtime probe), got K=1408" in _torch(d)[0].reason
    assert select_backend(_linear("fp8_block", k=1536, n=256), detected).backend == "torch"   # 12 blocks
    assert select_backend(_linear("fp8_block", k=1408, n=256), _on("h200")).backend == "torch"   # simulated
