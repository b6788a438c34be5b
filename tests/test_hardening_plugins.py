"""The plugin zoo (tests/plugin_zoo): every way a plugin can misbehave is reported and isolated.

Plugins load through fake `oracle.kernels` entry points, in-process, except the one case
about process behaviour (sys.exit at import under the real CLI), which runs a subprocess.
Each case has a stated time bound; plugin code is bounded by ORACLE_PLUGIN_TIMEOUT_S=0.5.
"""
from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oracle import LinearLayer, Platform, select_backend
from oracle.cli import main
from oracle.policy import load_policy
from oracle.registry import Registry
from oracle.session import reset_registry, set_registry

ZOO = Path(__file__).parent / "plugin_zoo"
BOUND_S = 5.0  # every zoo case, including the 0.5 s plugin bound it waits out
FP8 = LinearLayer(name="o_proj", in_features=4096, out_features=4096, weight_format="fp8_tensor",
                  activation_format="fp8")


@pytest.fixture(autouse=True)
def zoo_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ZOO))
    monkeypatch.setenv("ORACLE_PLUGIN_TIMEOUT_S", "0.5")
    yield
    reset_registry()


def zoo_registry(monkeypatch, *modules: str) -> Registry:
    eps = [importlib.metadata.EntryPoint(m, m, "oracle.kernels") for m in modules]
    original = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None, **kw: eps if group == "oracle.kernels" else original(group=group, **kw))
    start = time.perf_counter()
    registry = Registry.from_entry_points()
    assert time.perf_counter() - start < BOUND_S
    return registry


def failures(registry: Registry) -> dict[tuple[str, str], str]:
    return {(f.plugin, f.stage): f.message for f in registry.failures}


def test_exit_interrupt_and_slow_imports_are_contained(monkeypatch):
    reg = zoo_registry(monkeypatch, "zoo_exit_at_import", "zoo_interrupt_at_import", "zoo_slow_import",
                       "zoo_missing_impl")
    found = failures(reg)
    assert "SystemExit" in found[("zoo_exit_at_import", "import")]
    assert "KeyboardInterrupt" in found[("zoo_interrupt_at_import", "import")]
    assert "did not return within 0.5 s" in found[("zoo_slow_import", "import")]
    assert [p.name for p in reg.plugins] == ["zoo_missing_impl"]  # the well-behaved one is kept


def test_raising_and_garbage_hooks_are_reported(monkeypatch):
    reg = zoo_registry(monkeypatch, "zoo_raising", "zoo_garbage")
    found = failures(reg)
    assert found[("zoo_raising", "register_kernels")] == "RuntimeError: register_kernels exploded"
    assert found[("zoo_raising", "register_policies")] == "ValueError: register_policies exploded"
    assert "returned list" in found[("zoo_garbage", "register_kernels")]
    assert "instead of calling its argument (register/insert)" in found[("zoo_garbage", "register_kernels")]
    # the garbage plugin's policy file has a wrong type: that plugin layer is skipped, not fatal
    policy = load_policy(registry=reg)
    assert policy.on_unsupported == "error"
    message = failures(reg)[("zoo_garbage", "policy file")]
    assert "zoo_bad_policy.yaml:1" in message and "on_unsupported" in message
    # can_implement returning a list rejects the candidate with a reason naming the plugin
    d = select_backend(FP8, Platform.preset("h200"), policy=policy, registry=reg, env={})
    zoo = [c for c in d.candidates if c.kernel == "zoo.fp8"][0]
    assert zoo.verdict == "rejected" and "returned list" in zoo.reason and "zoo_garbage" in zoo.reason


def test_exit_and_interrupt_in_hooks_are_contained(monkeypatch):
    reg = zoo_registry(monkeypatch, "zoo_exit_in_hook")
    assert "SystemExit: 5" in failures(reg)[("zoo_exit_in_hook", "register_policies")]
    policy = load_policy(registry=reg)
    d = select_backend(FP8, Platform.preset("h200"), policy=policy, registry=reg, env={})
    zoo = [c for c in d.candidates if c.kernel == "zoo.fp8"][0]
    assert zoo.verdict == "rejected" and "KeyboardInterrupt" in zoo.reason


def test_slow_can_implement_is_bounded_once_then_skipped(monkeypatch):
    reg = zoo_registry(monkeypatch, "zoo_slow_hook")
    policy = load_policy(registry=reg)
    start = time.perf_counter()
    first = select_backend(FP8, Platform.preset("h200"), policy=policy, registry=reg, env={})
    other = FP8.model_copy(update={"in_features": 8192})
    second = select_backend(other, Platform.preset("h200"), policy=policy, registry=reg, env={})
    assert time.perf_counter() - start < 0.5 + 1.0  # one bounded wait, the second call is not waited out
    for d in (first, second):
        zoo = [c for c in d.candidates if c.kernel == "zoo.fp8"][0]
        assert zoo.verdict == "rejected" and "did not return within 0.5 s" in zoo.reason
    assert "not called again" in failures(reg)[("zoo_slow_hook", "can_implement")]


def test_yaml_bomb_in_plugin_files_is_refused_quickly(monkeypatch):
    start = time.perf_counter()
    reg = zoo_registry(monkeypatch, "zoo_bomb_plugin")
    policy = load_policy(registry=reg)
    assert time.perf_counter() - start < 1.0
    found = failures(reg)
    for stage in ("kernels file", "policy file"):
        assert "zoo_bomb.yaml" in found[("zoo_bomb_plugin", stage)]
        assert "more than 100000 values" in found[("zoo_bomb_plugin", stage)]
    assert policy.files == ["policies/default.yaml"]


def test_verify_resolves_and_type_checks_implementations(monkeypatch, capsys):
    set_registry(zoo_registry(monkeypatch, "zoo_missing_impl"))
    assert main(["verify"]) == 1
    out = capsys.readouterr().out
    assert "zoo_missing_impl.yaml:3: kernel zoomissing.fp8: cannot import oracle.kernel:NoSuchKernel: " \
           "module oracle.kernel has no 'NoSuchKernel'" in out
    assert "kernel zoomissing.notakernel: implementation oracle.errors:OracleError is the class OracleError, " \
           "not a subclass of oracle.kernel.Kernel" in out


@pytest.mark.parametrize("module", ["zoo_exit_at_import", "zoo_interrupt_at_import"])
def test_cli_survives_a_plugin_that_exits_at_import(module):
    """Process behaviour: the real CLI, in a subprocess, with the plugin's entry point in place."""
    code = (
        "import importlib.metadata as m, sys\n"
        f"sys.path.insert(0, {str(ZOO)!r})\n"
        f"eps = [m.EntryPoint({module!r}, {module!r}, 'oracle.kernels')]\n"
        "original = m.entry_points\n"
        "m.entry_points = lambda group=None, **kw: eps if group == 'oracle.kernels' else original(group=group, **kw)\n"
        "from oracle.cli import main\n"
        "sys.exit(main(['kernels', '--device', 'h200']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "plugin errors" in out.stdout and f"{module} (import)" in out.stdout
    assert "Traceback" not in out.stderr


def test_inline_mode_still_contains_exits(monkeypatch):
    """ORACLE_PLUGIN_TIMEOUT_S=0: plugin code runs inline (no thread hand-off), SystemExit still contained."""
    monkeypatch.setenv("ORACLE_PLUGIN_TIMEOUT_S", "0")
    reg = zoo_registry(monkeypatch, "zoo_exit_at_import", "zoo_exit_in_hook")
    assert "SystemExit" in failures(reg)[("zoo_exit_at_import", "import")]
    d = select_backend(FP8, Platform.preset("h200"), policy=load_policy(registry=reg), registry=reg, env={})
    zoo = [c for c in d.candidates if c.kernel == "zoo.fp8"][0]
    assert zoo.verdict == "rejected" and "KeyboardInterrupt" in zoo.reason


def test_a_hook_past_probation_runs_inline_and_one_slow_call_still_breaks_it(monkeypatch):
    """After its bounded probation a hook is called inline (no thread hand-off) and timed: the first call
    over the bound rejects the candidate, records the failure and stops further calls."""
    from oracle.registry import _BoundedHook

    monkeypatch.setattr(_BoundedHook, "PROBATION_CALLS", 2)
    monkeypatch.setenv("ZOO_FAST_CALLS", "3")
    reg = zoo_registry(monkeypatch, "zoo_late_slow_hook")
    policy = load_policy(registry=reg)
    h200 = Platform.preset("h200")
    verdicts = []
    for k in range(5):   # calls 1-2 bounded on the worker, 3 inline and fast, 4 inline and slow, 5 not made
        d = select_backend(FP8.model_copy(update={"in_features": 4096 + 128 * k}), h200, policy=policy,
                           registry=reg, env={})
        verdicts.append([c for c in d.candidates if c.kernel == "zoo.fp8"][0])
    assert [v.verdict for v in verdicts[:3]] == ["selected"] * 3
    assert "took" in verdicts[3].reason and "over 0.5 s" in verdicts[3].reason
    assert "not called again" in verdicts[4].reason
    assert "not called again" in failures(reg)[("zoo_late_slow_hook", "can_implement")]
    assert len(sys.modules["zoo_late_slow_hook"].calls) == 4
