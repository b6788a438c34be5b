"""Running plugin code so that nothing it does can end or hang the caller.

A plugin may raise anything, call `sys.exit`, raise KeyboardInterrupt, or never return.
`call_plugin` runs the call on a worker thread and waits at most a time bound: an Exception
the plugin raises is re-raised as is, SystemExit and KeyboardInterrupt become a `PluginError`
(an ordinary Exception, so `except Exception` in the engine isolates them), and a call that outlives the bound becomes a `PluginTimeout` while the
worker is abandoned. A real Ctrl-C still reaches the caller: it interrupts the waiting main
thread, not the worker. Bounds (docs/user-guide.md, "Limits"): `IMPORT_TIMEOUT_S` for loading
a plugin and its registration hooks, `HOOK_TIMEOUT_S` for each `can_implement` call;
ORACLE_PLUGIN_TIMEOUT_S overrides both, and `0` calls plugin code inline, unbounded (SystemExit and
KeyboardInterrupt are still contained). `can_implement` hooks leave the worker thread after a
probation of bounded calls (registry._BoundedHook): then they run inline and are timed.
"""
from __future__ import annotations

import contextvars
import math
import os
import queue
import threading
import warnings
from typing import Any, Callable

from .envvars import PLUGIN_TIMEOUT, OracleEnvWarning

IMPORT_TIMEOUT_S = 20.0
HOOK_TIMEOUT_S = 2.0


class PluginError(Exception):
    """Plugin code raised SystemExit / KeyboardInterrupt, timed out or returned garbage."""


class PluginTimeout(PluginError):
    """Plugin code did not return within its time bound."""


def timeout_for(default: float) -> float:
    """The bound for a plugin call: ORACLE_PLUGIN_TIMEOUT_S (seconds; 0 = inline, unbounded) or `default`."""
    raw = os.environ.get(PLUGIN_TIMEOUT)
    if raw is None or raw == "":
        return default
    if raw == "0":
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        warnings.warn(f"{PLUGIN_TIMEOUT}={raw!r} is not a positive number of seconds; using {default:g}",
                      OracleEnvWarning, stacklevel=2)
        return default
    return value


def describe(exc: BaseException) -> str:
    """'SystemExit: 3' style text for a failure of plugin code."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Worker:
    """A daemon thread that runs plugin calls; a daemon, so an abandoned one never blocks exit."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name="oracle-plugin-worker", daemon=True).start()

    def _run(self) -> None:
        while True:
            context, fn, args, kwargs, outcome, done = self.jobs.get()
            try:
                outcome.append((True, context.run(fn, *args, **kwargs)))
            except BaseException as exc:  # noqa: BLE001 - everything a plugin does is contained here
                outcome.append((False, exc))
            finally:
                done.set()


_idle: list[_Worker] = []
_idle_lock = threading.Lock()


def call_plugin(fn: Callable[..., Any], timeout: float, what: str, /, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` on a worker thread, bounded by `timeout` seconds (0: inline); see the module docstring."""
    if timeout == 0:
        try:
            return fn(*args, **kwargs)
        except Exception:
            raise
        except BaseException as exc:  # noqa: BLE001 - SystemExit / KeyboardInterrupt from plugin code
            raise PluginError(f"{describe(exc)} (contained: plugin code may not end the process)") from None
    with _idle_lock:
        worker = _idle.pop() if _idle else None
    if worker is None:
        worker = _Worker()
    outcome: list = []
    done = threading.Event()
    # the caller's context (the decision's environment) travels with the call
    worker.jobs.put((contextvars.copy_context(), fn, args, kwargs, outcome, done))
    if not done.wait(timeout):
        raise PluginTimeout(f"{what} did not return within {timeout:g} s (the bound for plugin code); "
                            "it was abandoned")
    with _idle_lock:
        _idle.append(worker)
    ok, value = outcome[0]
    if ok:
        return value
    if isinstance(value, Exception):
        raise value  # the plugin's own exception; callers isolate with `except Exception`
    raise PluginError(f"{describe(value)} (contained: plugin code may not end the process)")
