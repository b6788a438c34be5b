"""Plugin discovery and the kernel catalog they declare.

Plugins come from the `oracle.kernels` entry-point group (or are added directly, for
tests and embedding). Every failure -- an import error, a hook that raises, a kernels
file that does not validate, a duplicate kernel name -- is recorded as a
`PluginFailure` and that piece is skipped; the engine keeps the rest.
"""
from __future__ import annotations

import importlib.metadata
import itertools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import pluggy

from . import hookspecs
from .catalog import KernelSpec, load_kernel_file, normalize_backend
from .errors import OracleError, UnknownBackendError
from .names import suggestion
from .isolation import HOOK_TIMEOUT_S, IMPORT_TIMEOUT_S, PluginError, PluginTimeout, call_plugin, describe, timeout_for
from .sources import display_path, load_yaml_file

ENTRY_POINT_GROUP = "oracle.kernels"
_generation = itertools.count(1)


@dataclass(frozen=True)
class PluginFailure:
    """A plugin (or one of its files) that was skipped, and why."""

    plugin: str
    stage: str          # import | register_kernels | register_policies | kernels file | can_implement
    message: str

    def __str__(self) -> str:
        return f"{self.plugin} ({self.stage}): {self.message}"


@dataclass(frozen=True)
class PluginInfo:
    name: str
    distribution: str | None
    version: str | None
    kernels: tuple[str, ...]


class Registry:
    """Registered kernels, in plugin load order, with the policy files plugins contribute."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.kernels: list[KernelSpec] = []
        self.by_name: dict[str, KernelSpec] = {}
        self.failures: list[PluginFailure] = []
        self.policy_files: list[tuple[str, Path]] = []
        self.plugins: list[PluginInfo] = []
        self._can_implement: dict[str, Callable[..., Any]] = {}
        self.generation = next(_generation)

    # ---- loading ---------------------------------------------------------------------
    @classmethod
    def from_entry_points(cls, group: str = ENTRY_POINT_GROUP) -> "Registry":
        registry = cls()
        try:
            found = sorted(importlib.metadata.entry_points(group=group), key=lambda ep: ep.name)
        except Exception as exc:  # broken metadata must not take the engine down
            registry.failures.append(PluginFailure("<entry points>", "import", str(exc)))
            found = []
        for ep in found:
            dist = getattr(ep, "dist", None)
            dist_name = getattr(dist, "name", None)
            version = getattr(dist, "version", None)
            try:
                plugin = call_plugin(ep.load, timeout_for(IMPORT_TIMEOUT_S), f"import of plugin {ep.name}")
            except Exception as exc:  # SystemExit/KeyboardInterrupt arrive as PluginError
                registry.failures.append(PluginFailure(ep.name, "import", _failure(exc)))
                continue
            registry.add_plugin(plugin, ep.name, distribution=dist_name, version=version)
        return registry

    @classmethod
    def from_plugins(cls, plugins: Iterable[tuple[str, Any]]) -> "Registry":
        """A registry of the given (name, plugin) pairs only: for tests and embedding."""
        registry = cls()
        for name, plugin in plugins:
            registry.add_plugin(plugin, name)
        return registry

    def add_plugin(self, plugin: Any, name: str, *, distribution: str | None = None,
                   version: str | None = None) -> None:
        """Register one plugin object and collect its kernels and policy files."""
        try:
            self.pm.register(plugin, name=name)
        except Exception as exc:
            self.failures.append(PluginFailure(name, "import", f"{type(exc).__name__}: {exc}"))
            return
        declared: list[str] = []

        def register_kernels(source: Any) -> None:
            declared.extend(self._add_kernel_source(source, name))

        def register_policy(path: Any) -> None:
            p = Path(path)
            if not p.is_file():
                self.failures.append(PluginFailure(name, "register_policies", f"policy file not found: {p}"))
                return
            self.policy_files.append((name, p))

        for hook, register in (("register_kernels", register_kernels), ("register_policies", register_policy)):
            for impl in getattr(self.pm.hook, hook).get_hookimpls():
                if impl.plugin is not plugin:
                    continue
                try:
                    returned = call_plugin(impl.function, timeout_for(IMPORT_TIMEOUT_S), f"{name}.{hook}",
                                           register=register)
                except Exception as exc:
                    self.failures.append(PluginFailure(name, hook, _failure(exc)))
                    continue
                if returned is not None:
                    self.failures.append(PluginFailure(
                        name, hook, f"returned {_short(returned)} instead of calling register(...) for each "
                                    "file; nothing it returns is registered"))
        for impl in self.pm.hook.can_implement.get_hookimpls():
            if impl.plugin is plugin:
                bounded = _BoundedHook(self, name, impl.function)
                for kernel in declared:
                    self._can_implement[kernel] = bounded
        self.plugins.append(PluginInfo(name, distribution, version, tuple(declared)))
        self.generation = next(_generation)

    def add_kernels(self, source: Any, plugin: str = "<direct>") -> list[str]:
        """Declare kernels from a file or loaded mapping without a plugin object (tests, embedding)."""
        added = self._add_kernel_source(source, plugin)
        self.generation = next(_generation)
        return added

    def _add_kernel_source(self, source: Any, plugin: str) -> list[str]:
        try:
            if isinstance(source, (str, Path)):
                data = load_yaml_file(source)
                what = display_path(Path(source))
            else:
                data, what = source, f"{plugin} kernels"
            specs = load_kernel_file(data, plugin=plugin, what=what)
        except OracleError as exc:
            self.failures.append(PluginFailure(plugin, "kernels file", str(exc)))
            return []
        except Exception as exc:  # pragma: no cover - defensive: never fatal
            self.failures.append(PluginFailure(plugin, "kernels file", f"{type(exc).__name__}: {exc}"))
            return []
        added = []
        for spec in specs:
            other = self.by_name.get(spec.name)
            if other is not None:
                self.failures.append(PluginFailure(
                    plugin, "kernels file",
                    f"duplicate kernel name {spec.name!r} at {spec.source}; already declared by plugin "
                    f"{other.plugin} at {other.source}; the second declaration is skipped"))
                continue
            self.kernels.append(spec)
            self.by_name[spec.name] = spec
            added.append(spec.name)
        return added

    def record_failure(self, plugin: str, stage: str, message: str) -> None:
        """Record a failure once (policy files are loaded again for every policy)."""
        failure = PluginFailure(plugin, stage, message)
        if failure not in self.failures:
            self.failures.append(failure)

    # ---- queries -----------------------------------------------------------------------
    @property
    def env_keys(self) -> tuple[str, ...]:
        """Environment variables the plugins' hooks read (their kernels files' `env:`); they key the cache."""
        return tuple(sorted({key for spec in self.kernels for key in spec.env}))

    def backends(self) -> list[str]:
        return sorted({k.backend for k in self.kernels})

    def kernels_for(self, op: str, weight_format: str) -> list[KernelSpec]:
        return [k for k in self.kernels if k.serves(op, weight_format)]

    def can_implement_hook(self, kernel_name: str) -> Callable[..., Any] | None:
        return self._can_implement.get(kernel_name)

    def is_backend(self, name: str) -> bool:
        return normalize_backend(name) in {k.backend for k in self.kernels}

    def require_backend(self, name: str, *, field: str, source: str | None = None) -> str:
        """`name` normalised; "auto" or a registered backend, else an error listing the registered ones."""
        normalized = normalize_backend(name)
        if normalized != "auto" and not self.is_backend(normalized):
            raise UnknownBackendError(
                f"unknown backend {normalized!r}; registered backends: auto, {', '.join(self.backends())}"
                + suggestion(normalized, self.backends()), field=field, source=source)
        return normalized


class _BoundedHook:
    """A plugin's `can_implement`, isolated and time-bounded; its answer must be None/True/False/str.

    After one time-out the hook is not called again (its worker may still be stuck): the
    plugin's kernels are rejected with that reason, and `oracle kernels` lists the failure.
    """

    def __init__(self, registry: Registry, plugin: str, function: Callable[..., Any]):
        self.registry, self.plugin, self.function = registry, plugin, function
        self.broken: str | None = None

    def __call__(self, **kwargs: Any) -> Any:
        if self.broken is not None:
            raise PluginError(self.broken)
        what = f"plugin {self.plugin} can_implement"
        try:
            result = call_plugin(self.function, timeout_for(HOOK_TIMEOUT_S), what, **kwargs)
        except PluginTimeout as exc:
            self.broken = f"{exc}; not called again"
            self.registry.record_failure(self.plugin, "can_implement", self.broken)
            raise
        if result is None or isinstance(result, (bool, str)):
            return result
        raise PluginError(f"{what} returned {_short(result)}; expected None (accept), True/False or a reason "
                          "string")


def _failure(exc: Exception) -> str:
    return str(exc) if isinstance(exc, PluginError) else describe(exc)


def _short(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


_lock = threading.Lock()
_registry: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry, loaded from entry points on first use."""
    global _registry
    if _registry is None:
        with _lock:
            if _registry is None:
                _registry = Registry.from_entry_points()
    return _registry


def set_registry(registry: Registry | None) -> None:
    """Replace the process-wide registry (None: reload from entry points on next use)."""
    global _registry
    with _lock:
        _registry = registry
    from . import engine  # local: engine imports registry
    engine.clear_cache()


def reset_registry() -> None:
    set_registry(None)
