"""The composition root: one cached decision per signature that names no layer, engines kept per
registry and policy, and the plugin allow-list (ORACLE_LOAD_PLUGINS)."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from oracle import KernelConfig, MoELayer, NoKernelError, Platform, select_backend_or_raise
from oracle import session
from oracle.envvars import LOAD_PLUGINS

TOYSLOW = KernelConfig(moe_backend="toyslow")


def experts(block: int, **shape) -> MoELayer:
    base = dict(num_experts=32, top_k=4, hidden_size=2048, intermediate_size=1024, weight_format="mxfp4")
    return MoELayer(name=f"model.layers.{block}.mlp.experts", **{**base, **shape})


def test_two_layers_with_one_signature_each_get_their_own_name(select, caplog):
    first, seventh = experts(0), experts(7)
    assert first.signature == seventh.signature and first.name != seventh.name
    caplog.set_level(logging.DEBUG, logger="oracle.decisions")
    d0 = select(first, config=TOYSLOW)
    d7 = select(seventh, config=TOYSLOW)
    assert d7 is d0                                      # one cached decision serves both ...
    assert not hasattr(d7, "layer")                      # ... so it names no layer itself
    assert d7.explain(seventh).startswith("model.layers.7.mlp.experts (moe, mxfp4 weights): toyslow.any")
    assert d0.explain(first).startswith("model.layers.0.mlp.experts (moe, ")
    k0, k7 = d0.instantiate(first), d7.instantiate(seventh)
    assert (k0.layer.name, k7.layer.name) == ("model.layers.0.mlp.experts", "model.layers.7.mlp.experts")
    assert "layer='model.layers.7.mlp.experts'" in repr(k7)
    # the decision log names the layer that caused the decision (the first; the second is a cache hit)
    events = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith("{")]
    assert [e["layer"] for e in events if e["event"] == "decision"] == ["model.layers.0.mlp.experts"]


def test_no_kernel_error_names_the_layer_asked_about(toy_registry, toy_policy):
    ampere = Platform.preset("a100")
    kwargs = dict(registry=toy_registry, policy=toy_policy, env={})
    with pytest.raises(NoKernelError):
        select_backend_or_raise(experts(0, has_bias=True), ampere, KernelConfig(moe_backend="toyfast"), **kwargs)
    with pytest.raises(NoKernelError, match=r"moe layer 'model.layers.9.mlp.experts'"):
        select_backend_or_raise(experts(9, has_bias=True), ampere, KernelConfig(moe_backend="toyfast"), **kwargs)


def test_engines_are_kept_per_registry_and_policy(toy_registry, toy_policy):
    engine = session.get_engine(toy_policy, toy_registry)
    assert session.get_engine(toy_policy, toy_registry) is engine
    assert session.session_for(toy_registry).policy() == toy_policy
    toy_registry.add_kernels({"backend": "extra", "kernels": [{
        "name": "extra.linear", "op": "linear", "implementation": "oracle.kernel:Kernel",
        "modes": [{"weight": "fp8_block", "activation": "fp8", "name": "w8a8"}]}]})
    rebuilt = session.get_engine(toy_policy, toy_registry)                 # the registry changed
    assert rebuilt is not engine and rebuilt.registry.is_backend("extra")


def _load_in_subprocess(allow: str | None) -> dict:
    code = ("import json, sys; from oracle.session import get_registry; r = get_registry(); "
            "print(json.dumps({'plugins': [p.name for p in r.plugins], 'skipped': r.skipped, "
            "'imported': sorted(m for m in ('oracle_b12x.plugin', 'oracle_torch.plugin', "
            "'oracle_emulation.plugin') if m in sys.modules)}))")
    env = {k: v for k, v in os.environ.items() if k != LOAD_PLUGINS}
    if allow is not None:
        env[LOAD_PLUGINS] = allow
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_allow_list_loads_only_the_named_entry_points():
    everything = _load_in_subprocess(None)
    assert {"b12x", "emulation", "torch"} <= set(everything["plugins"]) and everything["skipped"] == []
    only = _load_in_subprocess("emulation")
    assert only["plugins"] == ["emulation"] and {"b12x", "torch"} <= set(only["skipped"])
    assert only["imported"] == ["oracle_emulation.plugin"]          # the others were never imported
    assert _load_in_subprocess("")["plugins"] == []
