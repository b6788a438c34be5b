"""The plugin zoo (tests/plugin_zoo): every way a plugin can misbehave is reported and isolated.

Plugins load through fake `oracle.kernels` entry points, in-process, except the cases
about process behaviour (sys.exit or Ctrl-C at import under the real CLI), which run a
subprocess. Plugin code runs inline (no thread, no time bound on the hot path): a plugin that
raises or calls sys.exit is recorded and skipped, a KeyboardInterrupt reaches the caller (it
may be the user's Ctrl-C), and a plugin that hangs is found by `oracle verify --timeout`.
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
BOUND_S = 5.0  # every zoo case
FP8 = LinearLayer(name="o_proj", in_features=4096, out_features=4096, weight_format="fp8_tensor",
                  activation_format="fp8")


@pytest.fixture(autouse=True)
def zoo_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ZOO))
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


def test_exit_at_import_is_contained(monkeypatch):
    reg = zoo_registry(monkeypatch, "zoo_exit_at_import", "zoo_missing_impl")
    found = failures(reg)
    assert "SystemExit" in found[("zoo_exit_at_import", "import")]
    assert [p.name for p in reg.plugins] == ["zoo_missing_impl"]  # the well-behaved one is kept


def test_interrupt_at_import_reaches_the_caller(monkeypatch):
    """Inline, a plugin's KeyboardInterrupt cannot be told from the user's Ctrl-C: it is not swallowed."""
    with pytest.raises(KeyboardInterrupt):
        zoo_registry(monkeypatch, "zoo_interrupt_at_import")


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


def test_exit_in_hooks_is_contained_and_interrupt_is_not(monkeypatch):
    reg = zoo_registry(monkeypatch, "zoo_exit_in_hook")
    assert "SystemExit: 5" in failures(reg)[("zoo_exit_in_hook", "register_policies")]
    policy = load_policy(registry=reg)
    with pytest.raises(KeyboardInterrupt, match="plugin pretends Ctrl-C"):
        select_backend(FP8, Platform.preset("h200"), policy=policy, registry=reg, env={})


def test_verify_finds_a_can_implement_that_hangs(monkeypatch, capsys):
    set_registry(zoo_registry(monkeypatch, "zoo_slow_hook"))
    start = time.perf_counter()
    assert main(["verify", "--timeout", "0.5"]) == 1
    assert time.perf_counter() - start < BOUND_S
    out = capsys.readouterr().out
    assert "FAIL plugin zoo_slow_hook can_implement for zoo.fp8 [" in out
    assert "did not return within 0.5 s (a hang?); stuck at" in out and "zoo_slow_hook.py" in out
    assert "time.sleep(60)" in out   # the line it is stuck at


def test_verify_reports_a_can_implement_that_raises(monkeypatch, capsys):
    set_registry(zoo_registry(monkeypatch, "zoo_exit_in_hook"))
    assert main(["verify"]) == 1
    out = capsys.readouterr().out
    assert "FAIL plugin zoo_exit_in_hook (register_policies): SystemExit: 5" in out
    # on verify's own thread a KeyboardInterrupt cannot be the user's: it is the plugin's, and reported
    assert "FAIL plugin zoo_exit_in_hook can_implement for zoo.fp8 [" in out
    assert "raised KeyboardInterrupt: plugin pretends Ctrl-C" in out


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


def _cli_with_plugin(module: str, *argv: str) -> subprocess.CompletedProcess:
    """Process behaviour: the real CLI, in a subprocess, with the plugin's entry point in place."""
    code = (
        "import importlib.metadata as m, sys\n"
        f"sys.path.insert(0, {str(ZOO)!r})\n"
        f"eps = [m.EntryPoint({module!r}, {module!r}, 'oracle.kernels')]\n"
        "original = m.entry_points\n"
        "m.entry_points = lambda group=None, **kw: eps if group == 'oracle.kernels' else original(group=group, **kw)\n"
        "from oracle.cli import main\n"
        f"sys.exit(main({list(argv) or ['kernels', '--device', 'h200']!r}))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_cli_survives_a_plugin_that_exits_at_import():
    out = _cli_with_plugin("zoo_exit_at_import")
    assert out.returncode == 0, out.stderr
    assert "plugin errors" in out.stdout and "zoo_exit_at_import (import)" in out.stdout
    assert "Traceback" not in out.stderr


def test_cli_stops_as_interrupted_when_a_plugin_raises_keyboardinterrupt_at_import():
    out = _cli_with_plugin("zoo_interrupt_at_import")
    assert out.returncode == 130, out.stderr
    assert "interrupted" in out.stderr and "Traceback" not in out.stderr


def test_verify_finds_a_plugin_whose_import_hangs():
    """Every other command waits on such a plugin (nothing bounds plugin code inline); verify loads
    the plugins on its watched thread and names the line the import is stuck at."""
    start = time.perf_counter()
    out = _cli_with_plugin("zoo_slow_import", "verify", "--timeout", "1")
    assert time.perf_counter() - start < 30          # not the plugin's 60 s
    assert out.returncode == 1, out.stderr
    assert "FAIL loading the plugins (oracle.kernels entry points) did not return within 1 s (a hang?)" in out.stdout
    assert "zoo_slow_import.py" in out.stdout and "time.sleep(60)" in out.stdout
