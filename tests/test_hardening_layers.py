"""Layers under hostile input: no lax coercion, bounded sizes, finite positive activation params;
random valid layers on every preset are decided without a traceback or a self-contradiction.

Bound: each generated decision under hardening_scale.CASE_BOUND_S (5 s); the file runs in a few seconds.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from hardening_scale import SCALE, bounded
from oracle import EmbeddingLayer, LinearLayer, MoELayer, Platform, select_backend
from oracle.errors import InputError
from oracle.formats import DTYPES, MOE_ACTIVATIONS, WEIGHT_FORMATS
from oracle.layer import MAX_DIM, MAX_EXPERTS
from oracle.platform import preset_names
from oracle.session import get_registry

LINEAR = dict(in_features=128, out_features=128, weight_format="fp8_tensor")
MOE = dict(num_experts=8, top_k=2, hidden_size=256, intermediate_size=256, weight_format="mxfp4")


@pytest.mark.parametrize("cls, base, field, value", [
    (LinearLayer, LINEAR, "in_features", True),
    (LinearLayer, LINEAR, "out_features", b"128"),
    (LinearLayer, LINEAR, "out_features", "128"),
    (LinearLayer, LINEAR, "in_features", 128.0),
    (LinearLayer, LINEAR, "has_bias", "yes"),
    (LinearLayer, LINEAR, "has_bias", 1),
    (LinearLayer, LINEAR, "weight_format", b"fp8_tensor"),
    (LinearLayer, LINEAR, "in_features", MAX_DIM + 1),
    (LinearLayer, LINEAR, "tp_size", 0),
    (LinearLayer, LINEAR, "name", 5),
    (MoELayer, MOE, "num_experts", MAX_EXPERTS + 1),
    (MoELayer, MOE, "top_k", 9),
    (MoELayer, MOE, "activation_params", {"limit": math.nan}),
    (MoELayer, MOE, "activation_params", {"limit": math.inf}),
    (MoELayer, MOE, "activation_params", {"limit": -7.0}),
    (MoELayer, MOE, "activation_params", {"limit": 0}),
    (MoELayer, MOE, "activation_params", {"limit": True}),
    (MoELayer, MOE, "activation_params", {"limit": "7"}),
    (MoELayer, MOE, "activation_params", {"not a name": 1.0}),
    (MoELayer, MOE, "eplb", "false"),
    (EmbeddingLayer, dict(num_embeddings=10, embedding_dim=4, weight_format="q8_0"), "embedding_dim", 4.5),
])
def test_no_lax_coercion_and_bounded_fields(cls, base, field, value):
    with pytest.raises(ValidationError) as err:
        cls(**{**base, field: value})
    assert field in str(err.value)


def test_activation_param_refusal_says_why():
    with pytest.raises(ValidationError, match=r"activation_params.limit must be a finite number > 0, got nan"):
        MoELayer(**MOE, activation="swigluoai", activation_params={"limit": math.nan})


@pytest.mark.parametrize("value", [None, "gpt-oss", {"op": "linear"}, 42])
def test_select_backend_refuses_non_layers_with_the_project_error(value):
    with pytest.raises(InputError, match="expected a LinearLayer, MoELayer or EmbeddingLayer"):
        select_backend(value, Platform.preset("h200"), env={})


@pytest.mark.parametrize("platform, config, field", [
    ("h200", None, "platform"), (Platform.preset("h200"), "b12x", "config"),
])
def test_select_backend_refuses_wrong_argument_types(platform, config, field):
    layer = LinearLayer(name="probe_types", **LINEAR)
    with pytest.raises(InputError, match=f"^{field}: expected a"):
        select_backend(layer, platform, config, env={})


@pytest.mark.parametrize("name", ["", "   ", None, 12, "x" * 500, "sm\x00120"])
def test_bad_device_names_are_input_errors(name):
    with pytest.raises(InputError, match="--device"):
        Platform.preset(name)


# ---- property: random layers on every preset -----------------------------------------------------
_CASES = {"layers": 0, "selected": 0, "no_kernel": 0, "unquantized": 0, "refused_at_construction": 0}
dims = st.integers(1, 1 << 15)
hostile = st.one_of(st.integers(-4, 1 << 26), st.booleans(), st.text(max_size=4), st.binary(max_size=4),
                    st.floats(allow_nan=True), st.none())


@st.composite
def layer_kwargs(draw):
    op = draw(st.sampled_from(["linear", "moe", "embedding"]))
    wf = draw(st.sampled_from(WEIGHT_FORMATS))
    if op == "linear":
        kw = dict(in_features=draw(dims), out_features=draw(dims), has_bias=draw(st.booleans()),
                  tp_size=draw(st.sampled_from([1, 2, 4, 8])), group_size=draw(st.sampled_from([None, 32, 128])))
        cls = LinearLayer
    elif op == "moe":
        experts = draw(st.integers(1, 512))
        params = draw(st.dictionaries(st.sampled_from(["limit", "alpha", "beta"]),
                                      st.floats(0.001, 100.0), max_size=2))
        kw = dict(num_experts=experts, top_k=draw(st.integers(1, min(experts, 16))), hidden_size=draw(dims),
                  intermediate_size=draw(dims) * 8, activation=draw(st.sampled_from(MOE_ACTIVATIONS)),
                  activation_params=params, tp_size=draw(st.sampled_from([1, 2, 8])), has_bias=draw(st.booleans()))
        cls = MoELayer
    else:
        kw = dict(num_embeddings=draw(dims), embedding_dim=draw(dims))
        cls = EmbeddingLayer
    kw.update(weight_format=wf, dtype=draw(st.sampled_from(DTYPES)))
    if draw(st.booleans()):  # one hostile field value
        field = draw(st.sampled_from(sorted(kw)))
        kw[field] = draw(hostile)
    return cls, kw


@settings(max_examples=300 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layer_kwargs(), st.sampled_from(preset_names()))
def test_random_layers_on_every_preset(case, device):
    cls, kw = case
    _CASES["layers"] += 1
    try:
        layer = cls(**kw)
    except ValidationError as exc:  # refused at construction, naming the field
        _CASES["refused_at_construction"] += 1
        assert exc.errors()[0]["loc"] or "top_k" in str(exc) or "divisible" in str(exc)
        return
    for name, value in kw.items():  # what was accepted is exactly what was given: no coercion
        assert getattr(layer, name) == value and type(getattr(layer, name)) in (type(value), float)
    with bounded():
        decision = select_backend(layer, Platform.preset(device), registry=get_registry(), env={})
    _CASES[decision.status] += 1
    if decision.status == "selected":
        mode = decision.spec.modes_for(layer.weight_format)
        assert decision.mode in {m.name for m in mode}
        assert decision.candidates[-1].verdict == "selected"
        assert all(c.verdict == "rejected" and c.reason for c in decision.candidates[:-1])
    elif decision.status == "no_kernel":
        assert all(c.verdict == "rejected" and c.reason for c in decision.candidates)
