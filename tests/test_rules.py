"""The constraint language: each predicate, conditionals, interpolation, load-time errors."""
from __future__ import annotations

import math

import pytest

from oracle.errors import PolicyError
from oracle.layer import MoELayer
from oracle.rules import compile_rules, failing
from oracle.sources import load_yaml_text


def rules(text: str, op: str = "moe"):
    return compile_rules(load_yaml_text(text, "r.yaml"), op, "kernel t")


def ctx(**kw):
    params = kw.pop("activation_params", None)  # set on the context: layers refuse non-finite values
    layer = MoELayer(name="e", num_experts=32, top_k=4, hidden_size=2880, intermediate_size=2880,
                     weight_format="mxfp4", **kw)
    c = layer.rule_fields()
    if params is not None:
        c["activation_params"] = params
    c.update(activation_format="mxfp8", mode="w4a8_mx")
    return c


@pytest.mark.parametrize("pred, expected", [
    ("{field: has_bias, equals: false}", True),
    ("{field: has_bias, equals: true}", False),
    ("{field: dtype, in: [bfloat16, float16]}", True),
    ("{field: dtype, not_in: [bfloat16]}", False),
    ("{field: hidden_size, divisible_by: 32}", True),
    ("{field: hidden_size, divisible_by: 256}", False),
    ("{field: top_k, range: {min: 1, max: 4}}", True),
    ("{field: top_k, range: {max_exclusive: 4}}", False),
    ("{field: num_experts, range: {min_exclusive: 32}}", False),
    ("{all: [{field: top_k, equals: 4}, {field: num_experts, equals: 32}]}", True),
    ("{any: [{field: top_k, equals: 8}, {field: num_experts, equals: 32}]}", True),
    ("{not: {field: activation, equals: silu}}", False),
    ("{field: intermediate_size_per_rank, divisible_by: 32}", True),
    ("{field: activation_format, equals: mxfp8}", True),
    ("{field: mode, in: [w4a8_mx, w4a16]}", True),
])
def test_predicates(pred, expected):
    (rule,) = rules(f"- reason: r\n  require: {pred}\n")
    assert rule.check(ctx()) is expected


def test_bool_equals_is_not_int_equals():
    (rule,) = rules("- reason: r\n  require: {field: top_k, equals: 1}\n")
    c = ctx()
    c["top_k"] = True
    assert rule.check(c) is False


def test_when_makes_a_rule_conditional():
    (rule,) = rules("- reason: W4A8 needs hidden % 256\n"
                    "  when: {field: activation_format, equals: mxfp8}\n"
                    "  require: {field: hidden_size, divisible_by: 256}\n")
    c = ctx()
    assert not rule.check(c)
    c["activation_format"] = "bf16"
    assert rule.check(c)


def test_activation_params_fields_finite_positive_limit():
    (rule,) = rules("- reason: swiglu limit must be finite and positive\n"
                    "  when: {field: activation, equals: swigluoai}\n"
                    "  require: {field: activation_params.limit, range: {min_exclusive: 0, max_exclusive: .inf}}\n")
    assert rule.check(ctx(activation="swigluoai", activation_params={"limit": 7.0}))
    assert not rule.check(ctx(activation="swigluoai", activation_params={"limit": math.inf}))
    assert not rule.check(ctx(activation="swigluoai", activation_params={"limit": math.nan}))
    assert not rule.check(ctx(activation="swigluoai", activation_params={"limit": -1.0}))
    assert not rule.check(ctx(activation="swigluoai"))  # missing parameter fails the requirement
    assert rule.check(ctx())  # not applicable to silu


def test_reason_interpolates_fields():
    (rule,) = rules("- reason: \"kernel does not support {dtype} input/output dtype\"\n"
                    "  require: {field: dtype, in: [bfloat16, float16]}\n")
    c = ctx(dtype="float32")
    assert failing((rule,), c) == [rule]
    assert rule.render(c) == "kernel does not support float32 input/output dtype"


def test_rule_source_line():
    first, second = rules("- reason: a\n  require: {field: lora, equals: false}\n"
                          "- reason: b\n  require: {field: eplb, equals: false}\n")
    assert (first.source, second.source) == ("r.yaml:1", "r.yaml:3")


@pytest.mark.parametrize("text, message, line", [
    ("- reason: r\n  require: {field: hiddn_size, divisible_by: 2}\n", "unknown field 'hiddn_size'", 2),
    ("- reason: r\n  require: {field: top_k, greater: 2}\n", "unknown operator 'greater'", 2),
    ("- reason: r\n  require: {field: dtype, in: [bfloat16, float8]}\n", "'float8' is not a valid value of dtype", 2),
    ("- reason: r\n  require: {field: top_k, divisible_by: 0}\n", "positive integer", 2),
    ("- reason: r\n  require: {field: dtype, divisible_by: 2}\n", "needs an integer field", 2),
    ("- reason: r\n  require: {eval: \"1+1\"}\n", "unknown predicate", 2),
    ("- require: {field: top_k, equals: 1}\n", "non-empty 'reason'", 1),
    ("- reason: \"bad {nonsense}\"\n  require: {field: top_k, equals: 1}\n", "unknown field {nonsense}", 1),
    ("- reason: r\n  require: {all: []}\n", "non-empty list", 2),
    ("- reason: r\n  require: {field: weight_format, equals: nvfp5}\n", "'nvfp5' is not a valid value", 2),
    ("- reason: r\n  require: {field: has_bias, equals: 0}\n", "has_bias is true/false", 2),
])
def test_load_time_errors_name_file_and_line(text, message, line):
    with pytest.raises(PolicyError) as err:
        rules(text)
    assert message in str(err.value)
    assert f"r.yaml:{line}" in str(err.value)


def test_linear_fields_differ_from_moe_fields():
    with pytest.raises(PolicyError, match="unknown field 'hidden_size' for linear layers"):
        rules("- reason: r\n  require: {field: hidden_size, equals: 1}\n", op="linear")
    (rule,) = rules("- reason: r\n  require: {field: K, divisible_by: 128}\n", op="linear")
    assert rule.check({"K": 256}) and not rule.check({"K": 100})


def test_present_distinguishes_absent_from_nan():
    (rule,) = rules("- reason: if given, the limit must be finite and positive\n"
                    "  require: {any: [{field: activation_params.limit, present: false},\n"
                    "                  {field: activation_params.limit, range: {min_exclusive: 0, max_exclusive: .inf}}]}\n")
    assert rule.check(ctx())
    assert rule.check(ctx(activation_params={"limit": 7.0}))
    assert not rule.check(ctx(activation_params={"limit": math.nan}))
    with pytest.raises(PolicyError, match="'present' on top_k takes true or false"):
        rules("- reason: r\n  require: {field: top_k, present: 1}\n")
