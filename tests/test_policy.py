"""Policy files: validation with file:line, layering, provenance, the shipped default."""
from __future__ import annotations

import pytest

from oracle.errors import PolicyError
from oracle.policy import load_policy, policy_schema
from oracle.resources import policy_file


def test_default_policy_encodes_spec(toy_registry):
    """The built-in default, alone (the toy registry brings no policy or tier): it names no plugin's
    backend but the emulation tier it ends on; oracle-b12x brings its tier and auto_select itself
    (plugins/b12x/tests/test_b12x_selection.py)."""
    policy = load_policy(registry=toy_registry)
    assert policy.ordering_for("moe", "mxfp4")[0] == ["optimized", "emulation"]
    assert policy.ordering_for("linear", "fp8_block")[0] == ["optimized", "emulation"]
    assert policy.activations_for("moe", "mxfp4")[0] == ["checkpoint", "mxfp8", "bf16"]
    assert policy.activations_for("moe", "nvfp4")[0] == ["checkpoint", "bf16"]
    assert policy.force_bf16_activations.env == ["VLLM_B12X_MOE_FP4_FORCE_A16", "ORACLE_MOE_FP4_FORCE_A16"]
    assert set(policy.force_bf16_activations.formats) == {"mxfp4", "nvfp4"}
    assert policy.auto_select_for("b12x", "moe")[0] is None
    assert policy.on_unsupported == "error"
    assert "b12x" not in policy.files[0] and "b12x" not in (policy_file("default.yaml")).read_text()


def test_every_value_keeps_its_source(toy_registry):
    policy = load_policy(registry=toy_registry)
    rows = policy.describe()
    assert rows and all(":" in source and source.split(":")[-1].isdigit() for _, _, source in rows)
    keys = {k for k, _, _ in rows}
    assert {"on_unsupported", "ordering.moe.default", "activations.moe.mxfp4"} <= keys


def test_user_file_overrides_one_key_and_keeps_the_rest(tmp_path, toy_registry):
    user = tmp_path / "mine.yaml"
    user.write_text("# mine\nordering:\n  moe:\n    nvfp4: [b12x, emulation]\non_unsupported: fallback\n")
    policy = load_policy([user], registry=toy_registry)
    assert policy.ordering_for("moe", "nvfp4") == (["b12x", "emulation"], f"{user}:4")
    assert policy.ordering_for("moe", "mxfp4")[1].startswith("policies/default.yaml:")
    assert policy.where("on_unsupported") == f"{user}:5"
    assert policy.files[-1] == str(user)


def test_later_user_file_wins(tmp_path, toy_registry):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("on_unsupported: fallback\n")
    b.write_text("on_unsupported: error\n")
    assert load_policy([a, b], registry=toy_registry).on_unsupported == "error"
    assert load_policy([b, a], registry=toy_registry).on_unsupported == "fallback"


@pytest.mark.parametrize("text, message, line", [
    ("on_unsupported: maybe\n", "on_unsupported: Input should be 'error' or 'fallback'", 1),
    ("ordering:\n  moe:\n    nvfp5: [b12x]\n", "ordering.moe: 'nvfp5' is not a valid key here; expected", 3),
    ("activations:\n  moe:\n    mxfp4: [mxfp9]\n", "activations.moe.mxfp4.0: Input should be 'bf16'", 3),
    ("colour: red\n", "colour: unknown key", 1),
    ("auto_select:\n  b12x:\n    moe: perhaps\n", "auto_select.b12x.moe: Input should be a valid boolean", 3),
    ("ordering: [1, 2\n", "invalid YAML", None),
    ("- just\n- a list\n", "must be a mapping", None),
])
def test_bad_policy_files_name_file_and_line(tmp_path, toy_registry, text, message, line):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(PolicyError) as err:
        load_policy([f], registry=toy_registry)
    assert message in str(err.value)
    assert str(f) in str(err.value)
    if line:
        assert f"bad.yaml:{line}" in str(err.value)


def test_missing_policy_file(toy_registry):
    with pytest.raises(PolicyError, match="nope.yaml: file not found"):
        load_policy(["nope.yaml"], registry=toy_registry)


def test_yaml_is_loaded_safely(tmp_path, toy_registry):
    f = tmp_path / "evil.yaml"
    f.write_text("on_unsupported: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(PolicyError, match="tag 'tag:yaml.org,2002:python/object/apply:os.system' is not allowed"):
        load_policy([f], registry=toy_registry)


def test_schema_documents_every_key():
    schema = policy_schema()
    for key in ("ordering", "auto_select", "activations", "force_bf16_activations", "on_unsupported",
                "backends", "platforms", "disabled_kernels"):
        assert schema["properties"][key]["description"]
