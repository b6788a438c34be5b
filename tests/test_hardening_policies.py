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
from oracle.catalog import normalize_backend
from oracle.errors import PolicyError
from oracle.platform import is_device_name
from oracle.policy import load_policy
from oracle.policy_checks import VENDORS


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


VALID = {"auto_select": {"toyfast": {"moe": True, "linear": False}}, "disabled_kernels": ["toyslow.any"],
         "backends": {"moe": {"mxfp4": "toyfast", "default": "auto"}, "linear": "toyslow"},
         "platforms": [{"when": {"vendor": ["nvidia"], "capability_family": [9], "device": ["h200"]},
                        "backends": {"linear": "toyfast"}}],
         "on_unsupported": "fallback", "force_bf16_activations": {"env": ["X"], "ops": ["moe"], "formats": ["nvfp4"]}}


def _leaves(value, path=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))
    else:
        yield path, value


def _near_miss(draw, value):
    """The value with its case changed, a character dropped or doubled, or a random value."""
    if not isinstance(value, str) or not value:
        return draw(values)
    how = draw(st.sampled_from(["upper", "drop", "double", "same"]))
    i = draw(st.integers(0, len(value) - 1))
    return {"upper": value.upper(), "drop": value[:i] + value[i + 1:], "double": value[:i] + value[i] + value[i:],
            "same": value}[how]


@st.composite
def near_miss_policies(draw):
    import copy
    doc = copy.deepcopy(VALID)
    path, value = draw(st.sampled_from(sorted(_leaves(doc), key=str)))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = _near_miss(draw, value)
    return path, value, node[path[-1]], doc


@settings(max_examples=80 * SCALE, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(near_miss_policies())
def test_near_miss_names_are_refused_with_a_hint_or_load(tmp_path, toy_registry, case):
    path_in_doc, old, new, doc = case
    _CASES["near_miss"] = _CASES.get("near_miss", 0) + 1
    file = tmp_path / "near.yaml"
    file.write_text(yaml.safe_dump(doc))
    try:
        with bounded():
            load_policy([file], registry=toy_registry)
    except PolicyError as exc:
        _CASES["near_miss_refused"] = _CASES.get("near_miss_refused", 0) + 1
        assert "near.yaml:" in str(exc), str(exc)
        if isinstance(new, str) and new.lower() == str(old).lower() and new != old and "unknown" in str(exc):
            assert f"did you mean {old!r}" in str(exc), str(exc)  # a wrongly cased name gets the right one
        return
    _CASES["near_miss_loaded"] = _CASES.get("near_miss_loaded", 0) + 1
    # what loaded names something real: a misspelt kernel, backend, vendor or device is never accepted
    if isinstance(new, str) and new != old:
        section, where = path_in_doc[0], path_in_doc[2] if len(path_in_doc) > 2 else None
        if section == "disabled_kernels":
            assert new in toy_registry.by_name
        elif section == "backends" or (section == "platforms" and where == "backends"):
            assert normalize_backend(new) in {*toy_registry.backends(), "auto"}
        elif section == "platforms" and path_in_doc[3] == "vendor":
            assert new in VENDORS
        elif section == "platforms" and path_in_doc[3] == "device":
            assert is_device_name(new)
