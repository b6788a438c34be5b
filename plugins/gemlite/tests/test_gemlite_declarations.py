"""oracle-gemlite's declarations through the engine (no GPU, no gemlite needed): a peer after the
project's own kernels, never auto-selected unless a policy says so, explicit selection, the
constraints' reasons, and `oracle verify` on its kernels file."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oracle import KernelConfig, LinearLayer, Platform, select_backend

KERNELS = Path(__file__).resolve().parents[1] / "oracle_gemlite" / "kernels.yaml"
HERE = {"torch": "2.11.0", "triton": "3.6.0", "gemlite": "0.6.0.post2"}


def _layer(fmt="int4", n=8192, k=8192, **more):
    extra = {"group_size": 128} if fmt == "int4" else {}
    return LinearLayer(name="model.layers.0.mlp.down_proj", in_features=k, out_features=n, weight_format=fmt,
                       **{**extra, **more})


def _gemlite(decision):
    return [c for c in decision.candidates if c.backend == "gemlite"]


@pytest.mark.parametrize("fmt", ["int4", "fp8_channel"])
def test_not_auto_selected_and_the_reason_says_how_to_enable_it(fmt):
    d = select_backend(_layer(fmt), Platform.preset("h200", packages=dict(HERE, triton=None, torch=None)))
    assert d.backend != "gemlite"
    (c,) = _gemlite(d)
    assert c.stage == "policy" and "not auto-selected" in c.reason


@pytest.mark.parametrize("fmt,kernel", [("int4", "gemlite.linear.int4"), ("fp8_channel", "gemlite.linear.fp8_channel")])
def test_explicit_selection_on_hopper(fmt, kernel):
    d = select_backend(_layer(fmt), Platform.preset("h200", packages=HERE), KernelConfig(linear_backend="gemlite"))
    assert (d.backend, d.kernel) == ("gemlite", kernel)


def test_a_policy_can_allow_it_and_it_ranks_after_our_kernels(tmp_path):
    from oracle.policy import load_policy
    from oracle.session import get_registry

    pol = tmp_path / "p.yaml"
    pol.write_text("version: 1\nauto_select:\n  gemlite: {linear: true}\n")
    policy = load_policy([str(pol)], registry=get_registry())
    d = select_backend(_layer("int4"), Platform.preset("h200", packages=HERE), policy=policy)
    assert d.kernel == "triton.linear.w4"           # ours first; gemlite wins only by measurement
    d = select_backend(_layer("int4"), Platform.preset("h200", packages=HERE), policy=policy,
                       env={"ORACLE_DISABLED_KERNELS": "triton.linear.w4,torch.linear.int4_tinygemm"})
    assert d.kernel == "gemlite.linear.int4"        # auto-selectable once allowed (ours and tinygemm disabled)


@pytest.mark.parametrize("layer,fragment", [
    (_layer("int4", dtype="float16"), "bfloat16 activations only"),
    (_layer("int4", group_size=64), "group size 128"),
    (_layer("fp8_channel", n=576), "N and K multiples of 128"),
])
def test_constraints_name_their_reason(layer, fragment):
    d = select_backend(layer, Platform.preset("h200", packages=HERE), KernelConfig(linear_backend="gemlite"))
    assert d.backend != "gemlite" or d.status != "selected"
    assert any(fragment in r for c in _gemlite(d) for r in c.reasons)


def test_hopper_only_and_the_package_is_named():
    d = select_backend(_layer("int4"), Platform.preset("b200", packages=HERE), KernelConfig(linear_backend="gemlite"))
    assert any("Hopper (SM90) only" in c.reason for c in _gemlite(d))
    d = select_backend(_layer("int4"), Platform.preset("h200", packages=dict(HERE, gemlite=None)),
                       KernelConfig(linear_backend="gemlite"))
    assert any("gemlite" in c.reason and "not installed" in c.reason for c in _gemlite(d))


def test_oracle_verify_accepts_the_kernels_file():
    out = subprocess.run([sys.executable, "-m", "oracle.cli", "verify", str(KERNELS)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 kernel(s)" in out.stdout
