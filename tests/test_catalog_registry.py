"""Kernel declarations and plugin isolation: bad files, duplicate names, hooks that raise."""
from __future__ import annotations

import pytest

from oracle import hookimpl
from oracle.catalog import load_kernel_file
from oracle.errors import PolicyError
from oracle.registry import Registry
from oracle.sources import load_yaml_text
from tests.conftest import FIXTURES, ToyPlugin

GOOD = """backend: k
kernels:
  - name: k.linear
    op: linear
    implementation: pkg.mod:Impl
    modes: [{weight: fp8_block, activation: fp8, name: m}]
"""


def kernels(text):
    return load_kernel_file(load_yaml_text(text, "k.yaml"), plugin="p", what="k.yaml")


def test_good_declaration():
    (spec,) = kernels(GOOD)
    assert (spec.name, spec.backend, spec.tier, spec.op, spec.auto_select) == ("k.linear", "k", "k", "linear", True)
    assert spec.source == "k.yaml:3" and spec.serves("linear", "fp8_block") and not spec.serves("moe", "fp8_block")


@pytest.mark.parametrize("edit, message, line", [
    (("op: linear", "op: conv"), "kernel k.linear: op: Input should be 'linear', 'moe' or 'embedding'", 4),
    (("implementation: pkg.mod:Impl", "implementation: pkg.mod.Impl"), "must be 'package.module:ClassName'", 5),
    (("activation: fp8", "activation: fp9"), "modes.0.activation", 6),
    (("    op: linear\n", "    op: linear\n    colour: red\n"), "colour: unknown key", 5),
    (("name: k.linear", "name: K Linear"), "lower-case", 3),
])
def test_bad_declarations_point_at_the_line(edit, message, line):
    with pytest.raises(PolicyError) as err:
        kernels(GOOD.replace(*edit))
    assert message in str(err.value) and f"k.yaml:{line}" in str(err.value)


def test_duplicate_mode_is_rejected():
    with pytest.raises(PolicyError, match="duplicate mode fp8_block/fp8"):
        kernels(GOOD.replace("modes: [{weight: fp8_block, activation: fp8, name: m}]",
                             "modes: [{weight: fp8_block, activation: fp8, name: m}, "
                             "{weight: fp8_block, activation: fp8, name: n}]"))


def test_malformed_yaml_names_file_and_line():
    with pytest.raises(PolicyError, match=r"k.yaml:\d+: invalid YAML"):
        load_yaml_text("kernels: [\n  - {name: x\n", "k.yaml")


def test_file_level_requires_merge_with_kernel_level():
    (spec,) = kernels("""backend: k
requires:
  vendor: [nvidia]
  packages: {torch: ">=2.4"}
kernels:
  - name: k.linear
    op: linear
    implementation: pkg.mod:Impl
    requires: {packages: {triton: ""}}
    modes: [{weight: fp8_block, activation: fp8, name: m}]
""")
    assert spec.requires.vendor.any_of == ["nvidia"]
    assert set(spec.requires.packages) == {"torch", "triton"}
    assert spec.lines["vendor"] == "k.yaml:3" and spec.lines["package:triton"] == "k.yaml:9"


def test_duplicate_kernel_names_across_plugins_are_recorded_not_fatal():
    reg = Registry.from_plugins([("a", ToyPlugin("toy_kernels.yaml")), ("b", ToyPlugin("toy_kernels.yaml"))])
    assert [k.plugin for k in reg.kernels] == ["a", "a", "a"]
    assert len(reg.failures) == 3
    assert "duplicate kernel name 'toyfast.moe'" in reg.failures[0].message
    assert "already declared by plugin a" in reg.failures[0].message


def test_hook_that_raises_is_isolated():
    class Broken:
        @hookimpl
        def register_kernels(self, register):
            raise RuntimeError("plugin bug")

    reg = Registry.from_plugins([("broken", Broken()), ("toy", ToyPlugin())])
    assert [f.stage for f in reg.failures] == ["register_kernels"]
    assert "RuntimeError: plugin bug" in reg.failures[0].message
    assert len(reg.kernels) == 6


def test_bad_kernels_file_is_isolated(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("backend: x\nkernels:\n  - name: x.l\n    op: linear\n")

    class Bad:
        @hookimpl
        def register_kernels(self, register):
            register(bad)
            register(FIXTURES / "toy_fallback.yaml")

    reg = Registry.from_plugins([("bad", Bad())])
    assert len(reg.failures) == 1 and "bad.yaml:3" in reg.failures[0].message
    assert "required key is missing" in reg.failures[0].message
    assert {k.name for k in reg.kernels} == {"toyslow.any", "toyslow.linear", "toyslow.embedding"}


def test_policy_files_from_plugins_are_layered(tmp_path):
    from oracle.policy import load_policy
    extra = tmp_path / "plugin-policy.yaml"
    extra.write_text("auto_select:\n  toyfast:\n    moe: false\n")
    user = tmp_path / "user.yaml"
    user.write_text("auto_select:\n  toyfast:\n    moe: true\n")

    class WithPolicy(ToyPlugin):
        @hookimpl
        def register_policies(self, register):
            register(extra)

    reg = Registry.from_plugins([("toy", WithPolicy())])
    policy = load_policy(registry=reg)
    assert policy.auto_select_for("toyfast", "moe") == (False, f"{extra}:3")
    assert policy.where("on_unsupported").startswith("policies/default.yaml:")  # default file still underneath
    top = load_policy([user], registry=reg)
    assert top.auto_select_for("toyfast", "moe") == (True, f"{user}:3")


def test_requirement_reason_placeholders_checked_on_load_and_always_filled():
    with pytest.raises(PolicyError, match=r"unknown placeholder\(s\) \{gpu\}") as err:
        kernels(GOOD.replace("    modes:", "    requires: {vendor: {any_of: [nvidia], reason: \"needs {gpu}\"}}\n    modes:"))
    assert "k.yaml:6" in str(err.value)
    from oracle import LinearLayer, Platform, select_backend, KernelConfig
    from oracle.policy import load_policy
    reg = Registry()
    reg.add_kernels(load_yaml_text(GOOD.replace("    modes:", "    requires:\n      packages:\n        fancy: "
                                                "{version: \">=2\", reason: \"fancy {installed} < {required}\"}\n"
                                                "    modes:"), "k.yaml"), plugin="p")
    layer = LinearLayer(name="q", in_features=128, out_features=128, weight_format="fp8_block")
    d = select_backend(layer, Platform.preset("h200"), KernelConfig(linear_backend="k"),
                       policy=load_policy(registry=reg), registry=reg, env={})
    assert d.candidates[0].reason.startswith("fancy none < >=2 (package fancy is not installed")
