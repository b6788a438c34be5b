"""oracle-triton's declarations through the engine: where it is picked on the h100/h200/b200
presets, where established kernels (oracle-torch) or b12x come first, its rejections and
their reasons, and the `oracle kernels` listing on this CPU machine."""
from __future__ import annotations

import subprocess
import sys

import pytest

from oracle import KernelConfig, LinearLayer, MoELayer, Platform, select_backend
from oracle.session import get_registry

PKGS = {"torch": "2.11.0", "triton": "3.6.0"}


def _on(preset, **more):
    return Platform.preset(preset, packages={**PKGS, **more})


def _lin(fmt, k=4096, n=4096, **more):
    return LinearLayer(name="model.layers.0.mlp.down_proj", in_features=k, out_features=n, weight_format=fmt, **more)


def _moe(fmt, **more):
    base = dict(name="model.layers.0.mlp.experts", num_experts=32, top_k=4, hidden_size=2880,
                intermediate_size=2880, weight_format=fmt)
    base.update(more)
    return MoELayer(**base)


def _triton(d):
    return [c for c in d.candidates if c.backend == "triton"]


def test_registered_in_the_optimized_tier_and_auto_selectable():
    specs = {s.name: s for s in get_registry().kernels if s.backend == "triton"}
    assert set(specs) == {"triton.linear.fp8", "triton.linear.w4", "triton.moe.fp8", "triton.moe.w4",
                          "triton.linear.gemlite_fp8"}
    peers = {"triton.linear.gemlite_fp8"}          # gemlite: a peer, chosen by measurement (test_triton_peers)
    assert all(s.tier == ("peer" if name in peers else "optimized") and s.auto_select for name, s in specs.items())


def test_importing_the_plugin_imports_neither_torch_nor_triton():
    code = ("import sys, oracle, oracle_triton.plugin; from oracle import select_backend, MoELayer, Platform; "
            "select_backend(MoELayer(num_experts=8, top_k=2, hidden_size=256, intermediate_size=256, "
            "weight_format='mxfp4'), Platform.preset('h200')); print('torch' in sys.modules, 'triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


@pytest.mark.parametrize("preset", ["h100", "h200", "b200", "a100"])
@pytest.mark.parametrize("fmt,kernel,act", [("mxfp4", "triton.moe.w4", "bf16"),
                                            ("nvfp4", "triton.moe.w4", "bf16"),
                                            ("int4", "triton.moe.w4", "bf16"),
                                            ("fp8_block", "triton.moe.fp8", "fp8")])
def test_moe_is_served_by_triton_on_sm80_to_sm10x(preset, fmt, kernel, act):
    d = select_backend(_moe(fmt, group_size=128 if fmt in ("int4", "fp8_block") else None), _on(preset))
    assert (d.backend, d.kernel, d.activation_format) == ("triton", kernel, act), d.candidates
    assert not any("meant for testing" in n for n in d.notes)


@pytest.mark.parametrize("preset", ["h100", "h200", "b200"])
@pytest.mark.parametrize("fmt,kernel", [("mxfp4", "triton.linear.w4"), ("nvfp4", "triton.linear.w4"),
                                        ("int4", "triton.linear.w4")])
def test_weight_only_dense_is_served_by_triton(preset, fmt, kernel):
    d = select_backend(_lin(fmt, group_size=128 if fmt == "int4" else None), _on(preset))
    assert (d.backend, d.kernel, d.activation_format) == ("triton", kernel, "bf16")


def test_established_torch_kernels_come_first_and_triton_takes_what_they_reject():
    h200 = _on("h200")
    assert select_backend(_lin("fp8_block", k=7168, n=1536, group_size=128), h200).backend == "torch"
    d = select_backend(_lin("fp8_block", k=7168, n=576, group_size=128), h200)   # DeepSeek kv_a_proj
    assert (d.backend, d.kernel, d.mode) == ("triton", "triton.linear.fp8", "w8a8_block")
    nv = _lin("nvfp4", activation_format="nvfp4")
    assert select_backend(nv, _on("b200")).backend == "torch"                    # cuBLAS W4A4 on SM10x


def test_sm12x_is_left_to_b12x_and_cpu_needs_a_cuda_device():
    d = select_backend(_lin("mxfp4"), _on("rtx-pro-6000", b12x="1.5.1"))
    assert d.backend != "triton"
    assert "SM12x is served by b12x" in _triton(d)[0].reason
    d = select_backend(_moe("mxfp4"), Platform.preset("cpu") if _has_cpu_preset() else Platform.detect())
    if Platform.detect().vendor == "cpu":
        assert "need a CUDA device" in _triton(d)[0].reason


def _has_cpu_preset():
    try:
        Platform.preset("cpu")
        return True
    except Exception:  # noqa: BLE001
        return False


def test_old_triton_is_rejected_with_the_version_reason():
    d = select_backend(_moe("mxfp4"), Platform.preset("h200", packages={"torch": "2.11.0", "triton": "3.2.0"}))
    assert d.backend != "triton"
    assert "triton 3.2.0 is installed but >=3.6 is needed" in _triton(d)[0].reason


@pytest.mark.parametrize("layer,fragment", [
    (_lin("int4", group_size=256), "group sizes 32, 64 and 128, got group_size=256"),
    (_lin("mxfp4", k=4112), "K = 4112 must be divisible by 32"),
    (_lin("fp8_block", k=7168, n=576, group_size=64), "got group_size=64"),
    (_moe("mxfp4", lora=True), "no LoRA adapter hooks"),
    (_moe("nvfp4", dtype="float32"), "bfloat16 or float16, got float32"),
])
def test_constraints_reject_with_their_reason(layer, fragment):
    d = select_backend(layer, _on("h200"))
    assert d.backend != "triton"
    assert any(fragment in c.reason for c in _triton(d)), [c.reason for c in _triton(d)]


def test_explicit_backend_and_activation_mode_w8a16():
    cfg = KernelConfig(moe_backend="triton", moe_activation="bf16")
    d = select_backend(_moe("fp8_block", group_size=128), _on("h200"), cfg)
    assert (d.backend, d.mode) == ("triton", "w8a16_block")


def test_oracle_kernels_lists_triton_with_the_cuda_reason():
    out = subprocess.run([sys.executable, "-m", "oracle.cli", "kernels"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "triton.moe.w4  backend=triton tier=optimized op=moe (auto)" in out.stdout
    if Platform.detect().vendor == "cpu":
        assert "Triton kernels need a CUDA device (NVIDIA GPU); this is CPU" in out.stdout


@pytest.mark.parametrize("model", ["gpt-oss-20b", "qwen3-30b-a3b-fp8", "deepseek-r1", "nvidia-qwen3-235b-a22b-nvfp4"])
def test_explain_on_h200_puts_no_moe_layer_on_emulation(model):
    """The shipped example configs (examples/, copies of the real models' config.json)."""
    out = subprocess.run([sys.executable, "-m", "oracle.cli", "explain", "--model", model,
                          "--device", "h200", "--format", "text", "--with-package", "torch=2.11.0",
                          "--with-package", "triton=3.6.0"], capture_output=True, text=True)
    assert out.returncode in (0, 2), out.stderr
    blocks = [b for b in out.stdout.split("\n\n") if "-> " in b]
    moe = [b for b in blocks if "experts" in b or "moe" in b.lower()]
    assert moe, out.stdout[:2000]
    assert not [b for b in moe if "-> emulation.moe" in b], [b for b in moe if "-> emulation.moe" in b][:1]
