"""The composition root: the one module that holds process-wide state.

A `Session` binds a plugin registry to its default policy, the engines built for each
policy, and the detected platform; every other module is a pure function of what it is
given. The process has one current session (`current()`), whose registry loads from
entry points on first use, honouring `ORACLE_LOAD_PLUGINS` (unset: every plugin; a
comma-separated list of entry-point names: only those are imported; empty: none).

`select_backend` here is the library's front door (`oracle.select_backend`). Its cached
path is a few attribute reads and one dict lookup, so it stays well under a microsecond.
"""
from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path
from typing import Any, Iterable, Mapping

from .config import KernelConfig
from .engine import Engine
from .envvars import LOAD_PLUGINS
from .errors import NoKernelError
from .platform import Platform
from .policy import EffectivePolicy, load_policy as _load_policy
from .registry import Registry, load_allow_list
from .trace import Decision
from .tuning.measurements import cached_measurements, clear_cache as clear_measurements

_DEFAULT_CONFIG = KernelConfig()
_MAX_ENGINES = 32


class Session:
    """A registry with its default policy and engines; the registry loads lazily from entry points."""

    def __init__(self, registry: Registry | None = None):
        self._registry = registry
        self._lock = threading.RLock()
        self._default_policy: tuple[int, EffectivePolicy] | None = None
        self._engines: dict[str, Engine] = {}
        self.default_engine: Engine | None = None     # read directly by select_backend's fast path
        self._platform: Platform | None = None

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            with self._lock:
                if self._registry is None:
                    allow = load_allow_list(os.environ.get(LOAD_PLUGINS))
                    self._registry = Registry.from_entry_points(allow=allow)
                    _sessions[self._registry] = self
        return self._registry

    def policy(self, user_files: Iterable[str | Path] = ()) -> EffectivePolicy:
        """The effective policy: defaults, this registry's plugins, then `user_files` (only the first is cached)."""
        files = list(user_files)
        if files:
            return _load_policy(files, registry=self.registry)
        registry = self.registry
        cached = self._default_policy
        if cached is None or cached[0] != registry.generation:
            cached = self._default_policy = (registry.generation, _load_policy(registry=registry))
        return cached[1]

    def engine(self, policy: EffectivePolicy | None = None) -> Engine:
        """The engine for `policy` (default: the default policy), rebuilt when the registry changed."""
        registry = self.registry
        if policy is None:
            engine = self.default_engine
            if engine is not None and engine.generation == registry.generation:
                return engine
            policy = self.policy()
        engine = self._engines.get(policy.fingerprint)
        if engine is None or engine.generation != registry.generation:
            with self._lock:
                if len(self._engines) >= _MAX_ENGINES:
                    self._engines.clear()
                engine = self._engines[policy.fingerprint] = Engine(registry, policy)
        if policy is self.policy():
            self.default_engine = engine
        return engine

    def platform(self) -> Platform:
        """This machine's platform, detected once."""
        if self._platform is None:
            self._platform = Platform.detect()
        return self._platform

    def clear(self) -> None:
        """Forget engines, decisions and the default policy (the registry stays)."""
        with self._lock:
            self._engines.clear()
            self.default_engine = None
            self._default_policy = None


_sessions: "weakref.WeakKeyDictionary[Registry, Session]" = weakref.WeakKeyDictionary()
_current = Session()


def current() -> Session:
    """The process's session."""
    return _current


def session_for(registry: Registry | None) -> Session:
    """The session of `registry` (None: the current one); one per registry, so engines are shared."""
    if registry is None:
        return _current
    found = _sessions.get(registry)
    if found is None:
        found = _sessions[registry] = Session(registry)
    return found


def set_registry(registry: Registry | None) -> None:
    """Make `registry` the process's (None: a fresh session that reloads from entry points on next use)."""
    global _current
    _current = session_for(registry) if registry is not None else Session()


def reset_registry() -> None:
    set_registry(None)


def get_registry() -> Registry:
    """The process's registry, loaded from entry points on first use."""
    return _current.registry


def load_policy(user_files: Iterable[str | Path] = (), registry: Registry | None = None) -> EffectivePolicy:
    """Defaults < plugin files and insertions of `registry` (default: the process's) < `user_files`."""
    return session_for(registry).policy(user_files)


def get_engine(policy: EffectivePolicy | None = None, registry: Registry | None = None) -> Engine:
    return session_for(registry).engine(policy)


def clear_cache() -> None:
    """Forget every engine and decision of the current session (after plugins or policies change)."""
    _current.clear()


def reload() -> None:
    """Re-read tuning files and policies on the next decision: a new `oracle tune` result changes
    decisions in a running process only when this is called (`oracle.reload()`)."""
    clear_measurements()
    clear_cache()


def measurement_set(measurements: Any) -> Any:
    """None, a MeasurementSet, or tuning file path(s) -> None or a MeasurementSet (cached)."""
    if measurements is None or hasattr(measurements, "table"):
        return measurements
    paths = (str(measurements),) if isinstance(measurements, (str, os.PathLike)) else tuple(map(str, measurements))
    return cached_measurements(paths, "balanced", False) if paths else None


def select_backend(layer: Any, platform: Platform | None = None, config: KernelConfig | None = None, *,
                   policy: EffectivePolicy | None = None, env: Mapping[str, str] | None = None,
                   registry: Registry | None = None, measurements: Any = None) -> Decision:
    """Choose the kernel for `layer`; never raises for an unservable layer (status no_kernel).

    `measurements`: a MeasurementSet (oracle.tuning.measurements.load_measurements) or tuning
    file path(s); it replaces ORACLE_MEASUREMENTS and the policy's `measurements.files`."""
    if policy is None and registry is None:
        engine = _current.default_engine
        if engine is None or engine.generation != engine.registry.generation:
            engine = _current.engine()
    else:
        engine = session_for(registry).engine(policy)
    return engine.select(layer, platform or _current.platform(), config or _DEFAULT_CONFIG,
                         os.environ if env is None else env,
                         None if measurements is None else measurement_set(measurements))


def select_backend_or_raise(layer: Any, platform: Platform | None = None, config: KernelConfig | None = None,
                            **kwargs: Any) -> Decision:
    """Like select_backend, but raise NoKernelError listing every candidate's reason."""
    decision = select_backend(layer, platform, config, **kwargs)
    if decision.status == "no_kernel":
        plat = decision.platform.describe() if decision.platform is not None else "this platform"
        lines = [f"no kernel can serve {decision.op} layer {getattr(layer, 'name', '') or '<unnamed>'!r} "
                 f"({decision.weight_format} weights) on {plat}:"]
        lines += [f"  - {c.line()}" for c in decision.candidates] or ["  (no candidates)"]
        lines += [f"  note: {n}" for n in decision.notes]
        raise NoKernelError("\n".join(lines), decision)
    return decision
