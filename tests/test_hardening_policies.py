"""Policies whose values name nothing are refused at load and by verify, with did-you-mean.

Uses the toy registry (backends toyfast, toyslow, emulation-like fallback; see conftest).
Bound: every case is a file load, well under a second.
"""
from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hardening_scale import SCALE, bounded
from oracle.errors import PolicyError
from oracle.policy import load_policy


def load(tmp_path, text, registry):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return load_policy([path], registry=registry)


@pytest.mark.parametrize("text, line, message", [
    ("auto_select:\n  toyfats: {moe: true}\n", 2, "auto_select: unknown backend 'toyfats'; did you mean 'toyfast'?"),
    ("disabled_kernels: [toyfast.moe, toyfast.Moe]\n", 1,
     "disabled_kernels[1]: unknown kernel 'toyfast.Moe'; did you mean 'toyfast.moe'?"),
    ("backends:\n  moe: {nvfp44: toyfast}\n", 2, "backends.moe: unknown weight format 'nvfp44'; did you mean 'nvfp4'?"),
    ("backends:\n  moe: toyfst\n", 2, "unknown backend 'toyfst'; did you mean 'toyfast'?"),
    ("platforms:\n  - when: {vendor: [NVIDIA]}\n    backends: {moe: toyfast}\n", 2,
     "platforms[0].when.vendor: unknown vendor 'NVIDIA'; did you mean 'nvidia'?"),
    ("platforms:\n  - when: {device: [RTX-PRO-6000]}\n    backends: {moe: toyfast}\n", 2,
     "platforms[0].when.device: unknown device 'RTX-PRO-6000'; did you mean 'rtx-pro-6000'?"),
    ("platforms:\n  - when: {capability_family: ['12']}\n    backends: {moe: toyfast}\n", 2,
     "capability_family: '12' is not a compute capability major version"),
])
def test_names_that_name_nothing_are_refused(tmp_path, toy_registry, text, line, message):
    with pytest.raises(PolicyError) as err:
        load(tmp_path, text, toy_registry)
    assert f"p.yaml:{line}: policy (user): " in str(err.value), str(err.value)
    assert message in str(err.value), str(err.value)


def test_correct_names_still_load(tmp_path, toy_registry):
    policy = load(tmp_path, "auto_select: {toyfast: {moe: false}}\ndisabled_kernels: [toyslow.any]\n"
                            "backends: {moe: {mxfp4: toyfast, default: auto}}\n"
                            "platforms:\n  - when: {vendor: [nvidia], capability_family: [12], device: [sm120]}\n"
                            "    backends: {linear: toyfast}\n", toy_registry)
    assert policy.disabled_kernels == ["toyslow.any"]


# ---- property: random values in every policy key load or fail with one PolicyError at the file ----
_CASES = {"policies": 0, "loaded": 0, "refused": 0}
KEYS = ["ordering", "auto_select", "activations", "force_bf16_activations", "on_unsupported", "backends",
        "platforms", "disabled_kernels", "version", "nonsense"]
values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 300) | st.floats(allow_nan=True)
    | st.sampled_from(["toyfast", "toyfats", "auto", "mxfp4", "moe", "linear", "nvidia", "NVIDIA", "sm120",
                       "error", "fallback", "{x}", "toyfast.moe", "default", "checkpoint", "bf16"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["moe", "linear", "embedding", "mxfp4", "default", "toyfast", "when", "backends",
                         "vendor", "device", "capability_family", "env", "ops", "formats"]), inner, max_size=3),
    max_leaves=10)


@settings(max_examples=80 * SCALE, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(KEYS), values, min_size=1, max_size=3))
def test_random_policies_never_traceback(tmp_path, toy_registry, doc):
    _CASES["policies"] += 1
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(doc))
    try:
        with bounded():
            load_policy([path], registry=toy_registry)
        _CASES["loaded"] += 1
    except PolicyError as exc:
        _CASES["refused"] += 1
        assert "fuzz.yaml" in str(exc), str(exc)


def test_report_policy_case_counts():
    print(f"\nhardening policies: {_CASES}")
