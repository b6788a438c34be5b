"""select_backend: ordering, activation preferences, explicit backends, caching, tracing."""
from __future__ import annotations

import logging

import pytest

from oracle import (EmbeddingLayer, KernelConfig, LinearLayer, MoELayer, NoKernelError, Platform,
                    UnknownBackendError, select_backend, select_backend_or_raise)
from oracle.errors import InputError
from oracle.policy import load_policy


def gpt_oss_experts(**kw):
    base = dict(name="model.layers.0.mlp.experts", num_experts=32, top_k=4, hidden_size=2880,
                intermediate_size=2880, weight_format="mxfp4")
    base.update(kw)
    return MoELayer(**base)


def test_first_tier_wins_and_trace_lists_rejections(select):
    d = select(gpt_oss_experts(hidden_size=3072))
    assert (d.status, d.backend, d.kernel, d.mode, d.activation_format) == \
        ("selected", "toyfast", "toyfast.moe", "w4a8", "mxfp8")
    assert [c.verdict for c in d.candidates] == ["selected"]


def test_mxfp4_moe_falls_back_from_w4a8_to_w4a16_with_reason(select):
    d = select(gpt_oss_experts())  # hidden 2880 is not a multiple of 256
    assert (d.kernel, d.mode, d.activation_format) == ("toyfast.moe", "w4a16", "bf16")
    first = d.candidates[0]
    assert (first.verdict, first.stage, first.mode, first.activation_format) == \
        ("rejected", "constraint", "w4a8", "mxfp8")
    assert first.reason == "W4A8 needs hidden size divisible by 256"
    assert first.rule.startswith("tests/fixtures/toy_kernels.yaml:") or "toy_kernels.yaml:" in first.rule


def test_platform_rejection_then_next_tier_with_testing_note(select):
    d = select(gpt_oss_experts(), device="a100")
    assert d.kernel == "toyslow.any" and d.mode == "w4a8"
    rejected = d.candidates[0]
    assert (rejected.kernel, rejected.stage, rejected.mode) == ("toyfast.moe", "platform", None)
    assert rejected.reason == "toyfast needs Hopper or newer; NVIDIA A100-SXM4-80GB is SM80"
    assert any("meant for testing" in n for n in d.notes)


def test_vendor_requirement_default_reason(select):
    d = select(gpt_oss_experts(), device="cpu")
    assert "needs a nvidia device" in d.candidates[0].reason and d.candidates[0].stage == "platform"


def test_auto_select_false_is_a_policy_rejection(select):
    d = select(MoELayer(name="e", num_experts=8, top_k=2, hidden_size=4096, intermediate_size=1024,
                        weight_format="nvfp4", activation_format="nvfp4"))
    assert d.kernel == "toyslow.any"
    c = d.candidates[0]
    assert (c.kernel, c.stage) == ("toyfast.nvfp4moe", "policy")
    assert "--moe-backend toyfast" in c.reason


def test_explicit_backend_serves_opt_in_kernel(select):
    layer = MoELayer(name="e", num_experts=8, top_k=2, hidden_size=4096, intermediate_size=1024,
                     weight_format="nvfp4", activation_format="nvfp4")
    d = select(layer, config=KernelConfig(moe_backend="TOYFAST"))
    assert (d.kernel, d.mode, d.requested_backend) == ("toyfast.nvfp4moe", "nvfp4", "toyfast")


def test_explicit_backend_without_kernel_for_format_uses_auto_with_note(select):
    lin = LinearLayer(name="q", in_features=4096, out_features=4096, weight_format="nvfp4")
    d = select(lin, config=KernelConfig(linear_backend="toyfast"))
    assert d.kernel == "toyslow.linear" and d.activation_format == "bf16"
    assert any("has no kernel for linear layers with nvfp4 weights" in n for n in d.notes)


def test_explicit_backend_that_cannot_serve_is_an_error_listing_every_reason(select, toy_registry):
    layer = MoELayer(name="e", num_experts=8, top_k=2, hidden_size=4096, intermediate_size=1024,
                     weight_format="nvfp4", dtype="float32", ep_size=2)
    d = select(layer, config=KernelConfig(moe_backend="toyfast"))
    assert d.status == "no_kernel"
    (c,) = d.candidates
    assert c.reasons == ("kernel does not support float32 input/output dtype",
                         "expert parallelism is not supported")
    assert len(c.rules) == 2 and all("toy_kernels.yaml:" in r for r in c.rules)
    with pytest.raises(NoKernelError) as err:
        select_backend_or_raise(layer, Platform.preset("h200"), KernelConfig(moe_backend="toyfast"),
                                policy=load_policy(registry=toy_registry), registry=toy_registry, env={})
    text = str(err.value)
    assert "float32 input/output dtype" in text and "expert parallelism" in text and "on_unsupported" in text


def test_on_unsupported_fallback_from_a_user_policy(select, tmp_path, toy_registry):
    user = tmp_path / "deploy.yaml"
    user.write_text("on_unsupported: fallback\n")
    policy = load_policy([user], registry=toy_registry)
    layer = MoELayer(name="e", num_experts=8, top_k=2, hidden_size=4096, intermediate_size=1024,
                     weight_format="nvfp4", dtype="float32")
    d = select(layer, config=KernelConfig(moe_backend="toyfast"), policy=policy)
    assert d.kernel == "toyslow.any"
    assert d.candidates[0].kernel == "toyfast.nvfp4moe" and d.candidates[0].verdict == "rejected"
    assert any("deploy.yaml:1" in n for n in d.notes)


def test_per_format_backend_map_for_mixed_checkpoints(select):
    config = KernelConfig(moe_backend={"nvfp4": "toyfast", "default": "auto"})
    nv = MoELayer(name="e", num_experts=8, top_k=2, hidden_size=4096, intermediate_size=1024,
                  weight_format="nvfp4", activation_format="nvfp4")
    assert select(nv, config=config).kernel == "toyfast.nvfp4moe"
    assert select(gpt_oss_experts(hidden_size=4096), config=config).requested_backend == "auto"


def test_cli_style_backend_pairs_and_name_normalisation():
    config = KernelConfig(moe_backend="NVFP4=B12X, fp8_block=Auto", linear_backend="Flash-Infer")
    assert config.moe_backend == {"nvfp4": "b12x", "fp8_block": "auto"}
    assert config.linear_backend == "flash_infer"
    assert config.backend_for("moe", "nvfp4") == "b12x" and config.backend_for("moe", "mxfp4") == "auto"
    with pytest.raises(ValueError, match="unknown weight format 'nvfp5'"):
        KernelConfig(moe_backend={"nvfp5": "b12x"})


def test_unknown_backend_lists_registered(select):
    with pytest.raises(UnknownBackendError) as err:
        select(gpt_oss_experts(), config=KernelConfig(moe_backend="marlin"))
    assert "unknown backend 'marlin'" in str(err.value)
    assert "auto, toyfast, toyslow" in str(err.value)


def test_checkpoint_activation_is_honoured(select):
    d = select(MoELayer(name="e", num_experts=8, top_k=2, hidden_size=4096, intermediate_size=1024,
                        weight_format="nvfp4", activation_format="nvfp4"))
    assert d.activation_format == "nvfp4" and d.mode == "w4a4"
    d = select(MoELayer(name="e", num_experts=8, top_k=2, hidden_size=4096, intermediate_size=1024,
                        weight_format="nvfp4"))
    assert d.activation_format == "bf16" and d.mode == "w4a16_nv"


@pytest.mark.parametrize("switch", ["VLLM_B12X_MOE_FP4_FORCE_A16", "ORACLE_MOE_FP4_FORCE_A16"])
def test_force_a16_switch_for_both_fp4_formats(select, switch):
    d = select(gpt_oss_experts(hidden_size=3072), env={switch: "1"})
    assert d.activation_format == "bf16" and d.mode == "w4a16"
    assert any(f"{switch}=1 forces BF16" in n and "default.yaml:" in n for n in d.notes)
    nv = MoELayer(name="e", num_experts=8, top_k=2, hidden_size=4096, intermediate_size=1024,
                  weight_format="nvfp4", activation_format="nvfp4")
    assert select(nv, env={switch: "1"}).activation_format == "bf16"


def test_force_switch_only_on_value_1(select):
    assert select(gpt_oss_experts(hidden_size=3072), env={"VLLM_B12X_MOE_FP4_FORCE_A16": "0"}).mode == "w4a8"
    from oracle.envvars import OracleEnvWarning
    with pytest.warns(OracleEnvWarning, match="'true' is not a documented value"):  # off, but not silently
        assert select(gpt_oss_experts(hidden_size=3072), env={"VLLM_B12X_MOE_FP4_FORCE_A16": "true"}).mode == "w4a8"


def test_requested_activation_contradicting_checkpoint_is_an_error(select):
    nv = MoELayer(name="e", num_experts=8, top_k=2, hidden_size=4096, intermediate_size=1024,
                  weight_format="nvfp4", activation_format="nvfp4")
    with pytest.raises(InputError, match="contradicts the checkpoint, which declares nvfp4"):
        select(nv, config=KernelConfig(moe_activation="mxfp8"))
    assert select(gpt_oss_experts(hidden_size=3072), config=KernelConfig(moe_activation="bf16")).mode == "w4a16"


def test_unquantized_layers_need_no_kernel(select):
    d = select(LinearLayer(name="router", in_features=2880, out_features=32, weight_format="bf16"))
    assert d.status == "unquantized" and d.kernel is None and d.candidates == ()


def test_format_no_kernel_implements(select):
    d = select(LinearLayer(name="x", in_features=4096, out_features=4096, weight_format="iq2_xs"))
    assert d.status == "no_kernel"
    assert d.notes == ("no registered kernel implements linear layers with iq2_xs weights",)


def test_decisions_are_cached_by_signature_not_name(select):
    a = select(gpt_oss_experts(name="model.layers.0.mlp.experts"))
    b = select(gpt_oss_experts(name="model.layers.7.mlp.experts"))
    assert a is b
    c = select(gpt_oss_experts(), env={"ORACLE_MOE_FP4_FORCE_A16": "1"})
    assert c is not a and c.mode == "w4a16"
    assert select(gpt_oss_experts(), device="a100") is not a


def test_disabled_kernels_by_env(select):
    d = select(gpt_oss_experts(hidden_size=3072), env={"ORACLE_DISABLED_KERNELS": "toyfast.moe"})
    assert d.kernel == "toyslow.any"
    assert d.candidates[0].stage == "policy" and d.candidates[0].reason == "toyfast.moe is disabled"


def test_ordering_override_per_format(select, tmp_path, toy_registry):
    user = tmp_path / "p.yaml"
    user.write_text("ordering:\n  moe:\n    mxfp4: [emulation, optimized]\n")
    d = select(gpt_oss_experts(hidden_size=3072), policy=load_policy([user], registry=toy_registry))
    assert d.kernel == "toyslow.any"


def test_deployment_and_platform_defaults_precedence(select, tmp_path, toy_registry):
    user = tmp_path / "p.yaml"
    user.write_text("platforms:\n  - when: {capability_family: [9]}\n    backends: {moe: toyslow}\n")
    policy = load_policy([user], registry=toy_registry)
    layer = gpt_oss_experts(hidden_size=3072)
    assert select(layer, policy=policy).kernel == "toyslow.any"            # platform default
    assert select(layer, device="b200", policy=policy).kernel == "toyfast.moe"   # does not match SM100
    assert select(layer, policy=policy, config=KernelConfig(moe_backend="toyfast")).kernel == "toyfast.moe"
    user.write_text("backends: {moe: toyfast}\nplatforms:\n  - when: {capability_family: [9]}\n"
                    "    backends: {moe: toyslow}\n")
    policy = load_policy([user], registry=toy_registry)
    d = select(layer, policy=policy)
    assert d.kernel == "toyfast.moe" and d.requested_backend == "toyfast"   # deployment > platform


def test_can_implement_hook_rejects_and_raising_hook_is_isolated():
    from oracle import hookimpl
    from oracle.registry import Registry
    from tests.conftest import ToyPlugin

    class Picky(ToyPlugin):
        @hookimpl
        def can_implement(self, kernel, layer, mode):
            if kernel.backend != "toyfast":
                return None
            if layer.hidden_size == 3072:
                return "hidden 3072 is refused by the plugin's code check"
            if layer.hidden_size == 4096:
                raise RuntimeError("boom")
            return None

    reg = Registry.from_plugins([("picky", Picky())])
    pol = load_policy(registry=reg)
    d = select_backend(gpt_oss_experts(hidden_size=3072), Platform.preset("h200"), policy=pol, registry=reg, env={})
    assert d.candidates[0].reason == "hidden 3072 is refused by the plugin's code check"
    assert d.candidates[0].rule == "picky: can_implement"
    d = select_backend(gpt_oss_experts(hidden_size=4096), Platform.preset("h200"), policy=pol, registry=reg, env={})
    assert "can_implement raised RuntimeError: boom" in d.candidates[0].reason
    assert d.status == "selected"  # the last tier still serves it


def _checked_linear_registry(requires: str):
    """A registry of one FP8-block linear kernel, backend `rt`, whose YAML `requires` is `requires`."""
    from oracle.registry import Registry
    from oracle.sources import load_yaml_text
    text = f"""
backend: rt
kernels:
  - name: rt.linear
    op: linear
    implementation: oracle.kernel:Kernel
    requires: {requires}
    modes: [{{weight: fp8_block, activation: fp8, name: m}}]
"""
    reg = Registry()
    reg.add_kernels(load_yaml_text(text, "rt.yaml"), plugin="rt")
    return reg


def test_runtime_check_runs_on_detected_and_is_assumed_on_simulated(tmp_path):
    import sys, types
    mod = types.ModuleType("toy_runtime")
    calls = []

    def check(spec, platform):
        calls.append(platform.device_name)
        return (False, "driver too old")
    mod.check = check
    sys.modules["toy_runtime"] = mod
    reg = _checked_linear_registry('{runtime: {check: "toy_runtime:check"}}')
    pol = load_policy(registry=reg)
    layer = LinearLayer(name="q", in_features=128, out_features=128, weight_format="fp8_block")
    cfg = KernelConfig(linear_backend="rt")
    sim = select_backend(layer, Platform.preset("rtx-5090"), cfg, policy=pol, registry=reg, env={})
    assert sim.status == "selected" and "assumed to pass" in sim.candidates[-1].reason and calls == []
    real = Platform(vendor="nvidia", capability=(12, 0), device_name="RTX test")
    d = select_backend(layer, real, cfg, policy=pol, registry=reg, env={})
    assert d.status == "no_kernel" and "driver too old" in d.candidates[0].reason and calls == ["RTX test"]
    del sys.modules["toy_runtime"]


def test_environment_listing_runs_no_runtime_probe():
    """`environment()` (every `explain` and load lists it for every kernel) reads the environment checks
    only: a runtime probe compiles and runs kernels, so it runs for kernels a layer considers, never for all."""
    from oracle.session import session_for
    import sys, types
    mod = types.ModuleType("toy_env_runtime")
    calls = []
    mod.env = lambda spec, platform: (True, "toolkit 1.2 found")
    mod.probe = lambda spec, platform: calls.append(spec.name) or (True, None)
    sys.modules["toy_env_runtime"] = mod
    try:
        reg = _checked_linear_registry(
            '{environment: {check: "toy_env_runtime:env"}, runtime: {check: "toy_env_runtime:probe"}}')
        engine = session_for(reg).engine(load_policy(registry=reg))
        real = Platform(vendor="nvidia", capability=(9, 0), device_name="H test")
        assert engine.environment(real) == ["toolkit 1.2 found"] and calls == []
        layer = LinearLayer(name="q", in_features=128, out_features=128, weight_format="fp8_block")
        d = engine.select(layer, real, KernelConfig(linear_backend="rt"), {})
        assert d.status == "selected" and calls == ["rt.linear"]       # selection still probes, once
        assert engine.environment(real) == ["toolkit 1.2 found"] and calls == ["rt.linear"]
    finally:
        del sys.modules["toy_env_runtime"]


def test_package_requirements_missing_and_version(tmp_path):
    from oracle.registry import Registry
    from oracle.sources import load_yaml_text
    text = """
backend: pk
kernels:
  - name: pk.linear
    op: linear
    implementation: oracle.kernel:Kernel
    requires:
      packages:
        fancykernels: {version: ">=2.0,<3", install: "pip install fancykernels==2.1"}
    modes: [{weight: fp8_block, activation: fp8, name: m}]
"""
    reg = Registry()
    reg.add_kernels(load_yaml_text(text, "pk.yaml"), plugin="pk")
    pol = load_policy(registry=reg)
    layer = LinearLayer(name="q", in_features=128, out_features=128, weight_format="fp8_block")
    plat = Platform.preset("h200")
    auto = select_backend(layer, plat, policy=pol, registry=reg, env={})
    assert auto.status == "no_kernel" and "none is in a tier of the ordering" in auto.notes[0]
    d = select_backend(layer, plat, KernelConfig(linear_backend="pk"), policy=pol, registry=reg, env={})
    assert d.candidates[0].reason == \
        "package fancykernels is not installed; install it with `pip install fancykernels==2.1`"
    assert d.candidates[0].rule == "pk.yaml:9"
    old = plat.with_packages({"fancykernels": "1.9"})
    d = select_backend(layer, old, KernelConfig(linear_backend="pk"), policy=pol, registry=reg, env={})
    assert "fancykernels 1.9 is installed but >=2.0,<3 is needed" in d.candidates[0].reason
    ok = plat.with_packages({"fancykernels": "2.1"})
    assert select_backend(layer, ok, KernelConfig(linear_backend="pk"), policy=pol, registry=reg,
                          env={}).status == "selected"


def test_decision_instantiate_imports_implementation_lazily(select):
    embed = EmbeddingLayer(name="embed", num_embeddings=1000, embedding_dim=64, weight_format="q8_0")
    kernel = select(embed).instantiate(embed)
    assert type(kernel).__name__ == "Kernel" and kernel.layer.name == "embed" and kernel.mode.name == "q8_0_lookup"
    experts = gpt_oss_experts(hidden_size=3072)
    from oracle.errors import PolicyError
    with pytest.raises(PolicyError, match="cannot import toy_impl:ToyMoE"):
        select(experts).instantiate(experts)


def test_decision_to_dict_shape(select):
    d = select(gpt_oss_experts())
    data = d.to_dict()
    assert set(data) >= {"status", "backend", "kernel", "mode", "activation_format", "candidates", "notes"}
    assert set(data["candidates"][0]) >= {"backend", "kernel", "mode", "verdict", "stage", "reason", "rule"}


def test_one_structlog_event_per_decision(select, caplog):
    caplog.set_level(logging.DEBUG, logger="oracle.decisions")
    select(gpt_oss_experts(hidden_size=2880))
    records = [r for r in caplog.records if r.name == "oracle.decisions"]
    decisions = [r for r in records if '"event": "decision"' in r.getMessage()]
    rejections = [r for r in records if '"event": "candidate_rejected"' in r.getMessage()]
    assert len(decisions) == 1 and decisions[0].levelno == logging.INFO
    assert len(rejections) == 1 and rejections[0].levelno == logging.DEBUG
    caplog.clear()
    select(gpt_oss_experts(hidden_size=2880, name="other"))  # cached: no new event
    assert not [r for r in caplog.records if r.name == "oracle.decisions"]


def test_process_environment_changes_are_seen(select, monkeypatch, toy_registry, toy_policy):
    layer = gpt_oss_experts(hidden_size=3072)
    plat = Platform.preset("h200")
    monkeypatch.delenv("ORACLE_MOE_FP4_FORCE_A16", raising=False)
    assert select_backend(layer, plat, policy=toy_policy, registry=toy_registry).mode == "w4a8"
    monkeypatch.setenv("ORACLE_MOE_FP4_FORCE_A16", "1")
    assert select_backend(layer, plat, policy=toy_policy, registry=toy_registry).mode == "w4a16"
    monkeypatch.setenv("ORACLE_MOE_FP4_FORCE_A16", "0")
    assert select_backend(layer, plat, policy=toy_policy, registry=toy_registry).mode == "w4a8"


def _declared_registry(tmp_path, declare_linear: str, hook):
    """The toy kernels with `can_implement: true` on toyfast.linear only (`declare_linear`: the
    line to put there), and a plugin whose can_implement is `hook`."""
    from oracle import hookimpl
    from oracle.registry import Registry
    from tests.conftest import FIXTURES

    text = (FIXTURES / "toy_kernels.yaml").read_text()
    text = text.replace("    implementation: toy_impl:ToyLinear\n",
                        f"    implementation: toy_impl:ToyLinear\n{declare_linear}")
    path = tmp_path / "toy_kernels.yaml"
    path.write_text("can_implement: false\n" + text)

    class Declared:
        @hookimpl
        def register_kernels(self, register):
            register(path)

        can_implement = staticmethod(hookimpl(hook))

    return Registry.from_plugins([("declared", Declared())])


def test_can_implement_is_called_only_for_the_kernels_that_declare_it(tmp_path):
    calls = []

    def hook(kernel, layer):
        calls.append(kernel.name)
        return "refused by code" if layer.in_features == 256 else None

    reg = _declared_registry(tmp_path, "    can_implement: true\n", hook)
    pol = load_policy(registry=reg)
    h200 = Platform.preset("h200")
    moe = select_backend(gpt_oss_experts(hidden_size=3072), h200, policy=pol, registry=reg, env={})
    assert moe.kernel == "toyfast.moe" and calls == []            # no hook for an undeclared kernel
    linear = LinearLayer(name="q", in_features=256, out_features=256, weight_format="fp8_block")
    d = select_backend(linear, h200, policy=pol, registry=reg, env={})
    assert calls == ["toyfast.linear"]
    assert d.candidates[0].reason == "refused by code" and d.candidates[0].rule == "declared: can_implement"


def test_declaring_a_check_without_a_hook_is_the_plugins_error(tmp_path):
    from oracle import hookimpl
    from oracle.registry import Registry
    from tests.conftest import FIXTURES

    path = tmp_path / "k.yaml"
    path.write_text((FIXTURES / "toy_kernels.yaml").read_text().replace(
        "    implementation: toy_impl:ToyLinear\n", "    implementation: toy_impl:ToyLinear\n    can_implement: true\n"))

    class NoHook:
        @hookimpl
        def register_kernels(self, register):
            register(path)

    reg = Registry.from_plugins([("nohook", NoHook())])
    assert [(f.stage, "toyfast.linear declares can_implement: true" in f.message) for f in reg.failures] == \
        [("kernels file", True)]
    assert reg.can_implement_caller("toyfast.linear") is None


def test_hook_calls_go_through_pluggys_caller(tmp_path):
    """pluggy's monitoring sees every can_implement call (it would not, were the engine to call the
    implementation itself), and a firstresult answer is the answer."""
    reg = _declared_registry(tmp_path, "    can_implement: true\n", lambda kernel, layer: "no")
    seen = []
    undo = reg.pm.add_hookcall_monitoring(lambda name, impls, kwargs: seen.append((name, kwargs["kernel"].name)),
                                          lambda outcome, name, impls, kwargs: None)
    try:
        linear = LinearLayer(name="q", in_features=512, out_features=512, weight_format="fp8_block")
        d = select_backend(linear, Platform.preset("h200"), policy=load_policy(registry=reg), registry=reg, env={})
    finally:
        undo()
    assert seen == [("can_implement", "toyfast.linear")]
    assert d.candidates[0].reason == "no"
