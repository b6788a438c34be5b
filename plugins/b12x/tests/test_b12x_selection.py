"""The b12x declarations through the engine: platform reasons, SPEC.md's MoE rules with their
exact reasons and order, opt-in MoE, activation fallback, and fallback to the next candidate."""
from __future__ import annotations

import pytest

from b12x_test_helpers import yaml_reasons
from oracle import KernelConfig, LinearLayer, MoELayer, Platform, select_backend
from oracle.session import get_registry, load_policy

SM120 = "rtx-pro-6000"
#: Package versions stated, so verdicts do not depend on what this environment has installed.
PACKAGES = {"b12x": "1.5.1", "triton": "3.7.1", "flashinfer-python": "0.6.0"}


def sm120(**packages):
    return Platform.preset(SM120, packages={**PACKAGES, **packages})
SPEC_MOE_REASONS = [  # SPEC.md "b12x MoE constraints, in this order, with these reasons"
    "kernel does not support expert biases",
    "kernel does not support {dtype} input/output dtype",
    "kernel supports only SiTU beta=4 and linear_beta=25",
    "kernel does not support swigluoai_uninterleave with W4A8",
    "MXFP4 requires the per-rank intermediate size to be divisible by 32",
    "MXFP4 W4A8 supports only SiLU and SiTU",
    "MXFP4 W4A8 requires hidden size divisible by 256 and per-rank intermediate size divisible by 32",
]


def _moe(**fields):
    base = dict(name="model.layers.0.mlp.experts", num_experts=128, top_k=8, hidden_size=4096,
                intermediate_size=1536, weight_format="mxfp4")
    base.update(fields)
    return MoELayer(**base)


def _b12x_candidates(decision):
    return [c for c in decision.candidates if c.backend == "b12x"]


def test_plugin_is_discovered_through_its_entry_point():
    registry = get_registry()
    names = {s.name for s in registry.kernels if s.plugin and s.backend == "b12x"}
    assert {"b12x.linear.nvfp4", "b12x.moe", "b12x.embedding.q8_0"} <= names
    assert not [f for f in registry.failures if "b12x" in str(f)]


def test_spec_moe_reasons_are_exact_and_in_spec_order(b12x_specs):
    reasons = [r.reason for r in b12x_specs["b12x.moe"].constraints]
    assert reasons[:len(SPEC_MOE_REASONS)] == SPEC_MOE_REASONS
    tail = reasons[len(SPEC_MOE_REASONS):]
    assert tail[0].startswith("kernel does not support {activation} activation")      # rule 8
    assert "tensor-parallel only" in tail[1] and "expert maps" in tail[4]               # rule 9
    assert tail[6] == "b12x MoE supports apply_router_weight_on_input only with W4A16"  # rule 10


@pytest.mark.parametrize("fields, mode, expected", [
    ({"has_bias": True}, "w4a16", "kernel does not support expert biases"),
    ({"dtype": "float32"}, "w4a16", "kernel does not support float32 input/output dtype"),
    ({"activation": "situ", "activation_params": {"beta": 3.0}}, "w4a16",
     "kernel supports only SiTU beta=4 and linear_beta=25"),
    ({"activation": "swigluoai_uninterleave"}, "w4a8_mx", "kernel does not support swigluoai_uninterleave with W4A8"),
    ({"intermediate_size": 1000}, "w4a16", "MXFP4 requires the per-rank intermediate size to be divisible by 32"),
    ({"activation": "relu2_no_mul"}, "w4a8_mx", "MXFP4 W4A8 supports only SiLU and SiTU"),
    ({"hidden_size": 2880, "intermediate_size": 2880}, "w4a8_mx",
     "MXFP4 W4A8 requires hidden size divisible by 256 and per-rank intermediate size divisible by 32"),
    ({"activation": "swigluoai"}, "w4a16", "kernel does not support swigluoai activation"),
    ({"ep_size": 2}, "w4a16", "tensor-parallel only (expert parallelism is in use)"),
    ({"use_all2all": True}, "w4a16", "all2all kernels are in use"),
    ({"eplb": True}, "w4a16", "EPLB is in use"),
    ({"expert_map": True}, "w4a16", "b12x TP MoE does not support expert maps"),
    ({"lora": True}, "w4a16", "LoRA is not supported"),
    ({"apply_router_weight_on_input": True}, "w4a8_mx", "apply_router_weight_on_input only with W4A16"),
    ({"activation": "situ"}, "w4a16", "kernel supports only SiTU beta=4 and linear_beta=25"),  # absent: unknown
    ({"weight_format": "q8_0", "activation_params": {"limit": 7.0}, "hidden_size": 4096,
      "intermediate_size": 1024}, "w4a16", "apply no SwiGLU limit"),
])
def test_each_moe_rule_rejects_with_its_reason(b12x_specs, fields, mode, expected):
    spec = b12x_specs["b12x.moe"]
    m = next(x for x in spec.modes if x.weight == "mxfp4" and x.name == mode)
    reasons = yaml_reasons(spec, m, _moe(**fields))
    assert reasons and expected in reasons[0], reasons


def test_a_plain_layer_passes_every_moe_rule(b12x_specs):
    spec = b12x_specs["b12x.moe"]
    for m in spec.modes:
        layer = _moe(weight_format=m.weight, activation_params={"limit": 7.0} if m.weight in ("mxfp4", "nvfp4") else {})
        assert yaml_reasons(spec, m, layer) == [], m


def test_tp_shard_must_keep_whole_codec_blocks(b12x_specs):
    spec = b12x_specs["b12x.moe"]
    mode = next(m for m in spec.modes if m.weight == "iq2_xs")
    ok = _moe(weight_format="iq2_xs", hidden_size=4096, intermediate_size=2048, tp_size=8)   # 256 per rank
    bad = _moe(weight_format="iq2_xs", hidden_size=4096, intermediate_size=2048, tp_size=16)  # 128 per rank
    assert yaml_reasons(spec, mode, ok) == []
    assert "whole blocks" in yaml_reasons(spec, mode, bad)[0]


# ---- platform requirements, each with its own reason ------------------------------------------
LINEAR = LinearLayer(name="model.layers.0.mlp.down_proj", in_features=4096, out_features=4096,
                     weight_format="nvfp4", activation_format="nvfp4")


@pytest.mark.parametrize("platform, expected", [
    (Platform.preset("cpu"), "B12X kernels are only available on CUDA"),
    (Platform.preset("h200"), "B12X kernels require a Blackwell 12x device (SM120/SM121)"),
    (Platform.preset("b200"), "B12X kernels require a Blackwell 12x device (SM120/SM121)"),
    (sm120(b12x=None, **{"flashinfer-python": None}), "neither the b12x distribution nor flashinfer-python"),
    (sm120(b12x=None, **{"flashinfer-python": "0.6.0"}), "needs flashinfer-python>=0.7.2,<0.8"),
    (sm120(b12x="1.4.2"), "1.4.2"),
    (sm120(triton=None), "package triton is not installed"),
])
def test_each_unmet_requirement_has_its_own_reason(platform, expected):
    # explicitly b12x: on b200 the optimized tier (torch) would otherwise win before b12x is tried
    b12x = _b12x_candidates(select_backend(LINEAR, platform, KernelConfig(linear_backend="b12x")))
    assert b12x and b12x[0].verdict == "rejected" and b12x[0].stage == "platform"
    assert expected in b12x[0].reason and "kernels.yaml" in b12x[0].rule


def test_simulated_sm120_assumes_the_runtime_check_and_says_so():
    d = select_backend(LINEAR, sm120())
    assert d.status == "selected" and d.kernel == "b12x.linear.nvfp4" and d.mode == "nvfp4_w4a4"
    assert "assumed to pass" in d.candidates[-1].reason


def test_detected_device_runs_b12x_own_runtime_check():
    detected = Platform(vendor="nvidia", capability=(12, 0), device_name="NVIDIA RTX PRO 6000 (detected)"
                        ).with_packages(PACKAGES)
    b12x = _b12x_candidates(select_backend(LINEAR, detected))
    assert b12x[0].stage == "platform"
    assert b12x[0].reason.startswith("b12x reports NVIDIA RTX PRO 6000 (detected) as unsupported: ")


def test_mxfp4_linear_without_flashinfer_names_the_package():
    layer = LinearLayer(in_features=4096, out_features=4096, weight_format="mxfp4", activation_format="mxfp4")
    d = select_backend(layer, sm120(**{"flashinfer-python": None}))
    b12x = _b12x_candidates(d)
    assert "flashinfer-python is not installed" in b12x[0].reason and "oracle-b12x[mxfp4]" in b12x[0].reason


# ---- policy: MoE is opt-in; explicit selection falls back from W4A8 to W4A16 ------------------
def test_moe_is_not_auto_selected_by_default():
    b12x = _b12x_candidates(select_backend(_moe(), sm120()))
    assert b12x[0].stage == "policy" and "not auto-selected" in b12x[0].reason
    assert b12x[0].rule.startswith("plugins/b12x/oracle_b12x/policy.yaml:")


def test_the_plugin_brings_its_tier_and_its_auto_select():
    """The built-in default names no b12x: the plugin inserts its tier after `optimized` and its
    policy file makes MoE opt-in while linear and embedding take part in automatic selection."""
    policy = load_policy()
    for op, fmt in (("moe", "mxfp4"), ("linear", "fp8_block"), ("embedding", "q8_0")):
        tiers, rule = policy.ordering_for(op, fmt)
        ours = [t for t in tiers if t in ("optimized", "flashinfer_b12x", "b12x", "emulation")]   # peers may insert
        flashinfer = ["flashinfer_b12x"] if op != "embedding" else []      # FlashInfer's SM12x kernels first
        assert ours == ["optimized", *flashinfer, "b12x", "emulation"] and "b12x by plugin b12x" in rule
    assert [policy.auto_select_for("b12x", op)[0] for op in ("linear", "moe", "embedding")] == [True, False, True]


def test_explicit_b12x_mxfp4_moe_prefers_w4a8_then_w4a16():
    config = KernelConfig(moe_backend="b12x")
    d = select_backend(_moe(), sm120(), config)
    assert (d.kernel, d.mode, d.activation_format) == ("b12x.moe", "w4a8_mx", "mxfp8")
    gpt_oss = _moe(num_experts=32, top_k=4, hidden_size=2880, intermediate_size=2880, activation="swigluoai_uninterleave",
                   activation_params={"limit": 7.0, "alpha": 1.702, "beta": 1.0})
    d = select_backend(gpt_oss, sm120(), config)
    assert (d.mode, d.activation_format) == ("w4a16", "bf16")
    rejected = [c for c in d.candidates if c.verdict == "rejected"]
    assert rejected[0].mode == "w4a8_mx" and "swigluoai_uninterleave with W4A8" in rejected[0].reason


def test_force_a16_switch_applies_to_b12x_moe():
    d = select_backend(_moe(), sm120(), KernelConfig(moe_backend="b12x"),
                       env={"VLLM_B12X_MOE_FP4_FORCE_A16": "1"})
    assert (d.mode, d.activation_format) == ("w4a16", "bf16")


def test_nvfp4_moe_uses_the_checkpoint_activation_format():
    config = KernelConfig(moe_backend="b12x")
    a4 = select_backend(_moe(weight_format="nvfp4", activation_format="nvfp4"), sm120(), config)
    a16 = select_backend(_moe(weight_format="nvfp4"), sm120(), config)
    assert (a4.mode, a16.mode) == ("nvfp4", "w4a16")
    assert a16.mode_spec.params["w13_layout"] == "w13" and a4.mode_spec.params["w13_layout"] == "w31"


def test_rejected_b12x_linear_falls_back_to_the_next_candidate():
    pytest.importorskip("oracle_emulation", reason="the emulation plugin (next candidate) is not installed")
    d = select_backend(LINEAR, Platform.preset("h200", packages={"triton": None}))   # oracle-triton would take it first
    assert d.status == "selected" and d.backend == "emulation"
    assert _b12x_candidates(d)[0].reason == "B12X kernels require a Blackwell 12x device (SM120/SM121)"


def test_planner_hook_is_off_by_default_and_asks_b12x_when_enabled(monkeypatch, b12x_specs):
    from oracle_b12x import plugin

    spec = b12x_specs["b12x.moe"]
    mode = next(m for m in spec.modes if m.name == "w4a8_mx")
    gelu = _moe(activation="gelu")
    monkeypatch.delenv(plugin.PLANNER_CHECK_ENV, raising=False)
    assert plugin.can_implement(layer=gelu, mode=mode) is None
    pytest.importorskip("b12x", reason="the planner check needs b12x")
    monkeypatch.setenv(plugin.PLANNER_CHECK_ENV, "1")
    assert plugin.can_implement(layer=_moe(), mode=mode) is None
    assert "unsupported activation 'gelu'" in plugin.can_implement(layer=gelu, mode=mode)


# ---- the MXFP4 BF16 fallback (SPEC.md "Activation defaults"; policy checkpoint_fallback) ----------
@pytest.mark.parametrize("hidden, mode", [(2880, "w4a16"), (4096, "w4a8_mx")])
def test_mxfp4_experts_declaring_mxfp8_fall_back_to_bf16_when_w4a8_cannot_serve(hidden, mode):
    layer = _moe(weight_format="mxfp4", hidden_size=hidden, intermediate_size=2880, activation_format="mxfp8")
    d = select_backend(layer, sm120(), KernelConfig(moe_backend="b12x"), env={})
    assert (d.status, d.kernel, d.mode) == ("selected", "b12x.moe", mode)
    fallback = [n for n in d.notes if "checkpoint declares mxfp8" in n]
    if mode == "w4a8_mx":
        assert not fallback and d.activation_format == "mxfp8"
        return
    assert d.activation_format == "bf16" and len(fallback) == 1
    assert "MXFP4 W4A8 requires hidden size divisible by 256" in fallback[0]       # the reason, in the trace
    assert "checkpoint_fallback at policies/default.yaml" in fallback[0]
    refused = [c for c in d.candidates if c.activation_format == "mxfp8"]
    assert refused and refused[0].verdict == "rejected" and refused[0].stage == "constraint"


def test_nvfp4_experts_keep_the_declared_format_binding():
    layer = _moe(weight_format="nvfp4", activation="swigluoai_uninterleave", activation_format="mxfp8",
                 activation_params={"limit": 7.0})
    d = select_backend(layer, sm120(), KernelConfig(moe_backend="b12x"), env={})
    assert d.status == "no_kernel"
    assert {c.activation_format for c in d.candidates} == {"mxfp8"}


def test_force_a16_is_not_reported_as_a_fallback():
    layer = _moe(weight_format="mxfp4", hidden_size=4096, intermediate_size=2880, activation_format="mxfp8")
    d = select_backend(layer, sm120(), KernelConfig(moe_backend="b12x"), env={"VLLM_B12X_MOE_FP4_FORCE_A16": "1"})
    assert (d.mode, d.activation_format) == ("w4a16", "bf16")
    assert any("VLLM_B12X_MOE_FP4_FORCE_A16=1 forces" in n for n in d.notes)
    assert not any("checkpoint declares" in n for n in d.notes)
