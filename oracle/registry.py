"""Plugins and what they declare: kernels, policy files, tier insertions, commands.

Plugins come from the `oracle.kernels` entry-point group (or are added directly, for
tests and embedding). Every hook is called through pluggy's own caller (`pm.hook`, or
`pm.subset_hook_caller` for one plugin's implementation), so pluggy's argument binding,
`firstresult`, wrappers and tracing apply; registration hooks run one plugin at a time, so
a failure stays with its plugin. Every failure -- an import error or `sys.exit`, a hook name
no spec declares, a hook that raises, a kernels file that does not validate, a kernel or
backend name another plugin owns -- is recorded as a `PluginFailure` and that piece is
skipped; the rest keep working. Plugin code runs inline, as pluggy, pytest and vLLM run it:
`oracle verify` is where a plugin that hangs is found (oracle/cli/verify.py).

This module keeps no process-wide state: `oracle.session` owns the registry of a process.
"""
from __future__ import annotations

import importlib.metadata
import itertools
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pluggy

from . import hookspecs
from .catalog import KernelSpec, load_kernel_file, normalize_backend
from .envvars import LOAD_PLUGINS, OracleEnvWarning
from .errors import OracleError, UnknownBackendError
from .names import suggestion
from .sources import display_path, load_yaml_file

ENTRY_POINT_GROUP = "oracle.kernels"
#: The plugin distributions this project ships (plugins/): loaded before any third-party plugin, so a
#: kernel or backend name they declare stays theirs and a newcomer declaring it is the newcomer's error.
SHIPPED_DISTRIBUTIONS = ("oracle-emulation", "oracle-torch", "oracle-triton", "oracle-b12x", "oracle-vllm")
_generation = itertools.count(1)


@dataclass(frozen=True)
class PluginFailure:
    """A plugin (or one of its files) that was skipped, and why."""

    plugin: str
    stage: str          # import | register | a hook name | kernels file | command
    message: str

    def __str__(self) -> str:
        return f"{self.plugin} ({self.stage}): {self.message}"


@dataclass(frozen=True)
class PluginInfo:
    name: str
    distribution: str | None
    version: str | None
    kernels: tuple[str, ...]


@dataclass(frozen=True)
class TierInsertion:
    """A plugin's request to place a tier (or backend) beside an existing one in every ordering list."""

    plugin: str
    name: str
    after: str | None
    before: str | None
    ops: tuple[str, ...]
    formats: tuple[str, ...]
    source: str         # file:line of the insert() call

    @property
    def anchor(self) -> str:
        return self.after or self.before or ""


@dataclass(frozen=True)
class PluginCommand:
    """A CLI command contributed by a plugin: `add_parser(subparsers)` and `run(args) -> int`."""

    plugin: str
    name: str
    command: Any = field(repr=False)


def load_allow_list(value: str | None) -> frozenset[str] | None:
    """ORACLE_LOAD_PLUGINS: None (unset) loads every plugin; "" none; "a,b" only those entry points."""
    if value is None:
        return None
    return frozenset(n.strip() for n in value.split(",") if n.strip())


def _warn_unknown_plugins(allow: frozenset[str], installed: list[str]) -> None:
    """An ORACLE_LOAD_PLUGINS name that is no installed plugin loads nothing: say so, with a hint."""
    for name in sorted(allow - set(installed)):
        warnings.warn(f"{LOAD_PLUGINS} names {name!r}, which is no installed plugin (installed: "
                      f"{', '.join(installed) or 'none'}){suggestion(name, installed)}", OracleEnvWarning,
                      stacklevel=3)


class Registry:
    """Registered kernels, in plugin load order, with what else plugins contribute."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.kernels: list[KernelSpec] = []
        self.by_name: dict[str, KernelSpec] = {}
        self.backend_owner: dict[str, str] = {}
        self.failures: list[PluginFailure] = []
        self.policy_files: list[tuple[str, Path]] = []
        self.insertions: list[TierInsertion] = []
        self.commands: dict[str, PluginCommand] = {}
        self.plugins: list[PluginInfo] = []
        self.skipped: list[str] = []            # entry points left out by the allow-list
        self._checks: dict[str, str] = {}          # kernel name -> the plugin whose can_implement checks it
        self._callers: dict[str, Any] = {}          # plugin -> its can_implement alone (pluggy subset caller)
        self.generation = next(_generation)

    # ---- loading ---------------------------------------------------------------------
    @classmethod
    def from_entry_points(cls, group: str = ENTRY_POINT_GROUP, *,
                          allow: frozenset[str] | None = None) -> "Registry":
        """Every plugin of the entry-point group, or only those named in `allow` (the rest are not imported)."""
        registry = cls()
        try:
            found = sorted(importlib.metadata.entry_points(group=group), key=_load_order)
        except Exception as exc:  # broken metadata must not take the engine down
            registry.failures.append(PluginFailure("<entry points>", "import", str(exc)))
            found = []
        for ep in found:
            if allow is not None and ep.name not in allow:
                registry.skipped.append(ep.name)
                continue
            dist = getattr(ep, "dist", None)
            try:
                plugin = ep.load()
            except (Exception, SystemExit) as exc:  # a plugin's bug or sys.exit is its own failure
                registry.failures.append(PluginFailure(ep.name, "import", describe(exc)))
                continue
            registry.add_plugin(plugin, ep.name, distribution=getattr(dist, "name", None),
                                version=getattr(dist, "version", None))
        if allow:
            _warn_unknown_plugins(allow, [ep.name for ep in found])
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
        """Register one plugin object and collect what its hooks declare."""
        if not self._register(plugin, name):
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

        def insert(tier: str, *, after: str | None = None, before: str | None = None,
                   ops: Iterable[str] = (), formats: Iterable[str] = ()) -> None:
            if (after is None) == (before is None):
                raise OracleError(f"insert({tier!r}): give exactly one of after= or before=")
            caller = sys._getframe(1)
            self.insertions.append(TierInsertion(
                name, normalize_backend(tier), after and normalize_backend(after),
                before and normalize_backend(before), tuple(ops), tuple(formats),
                f"{display_path(Path(caller.f_code.co_filename))}:{caller.f_lineno}"))

        def register_command(command: Any) -> None:
            self._add_command(command, name)

        for hook, kwargs in (("register_kernels", {"register": register_kernels}),
                             ("register_policies", {"register": register_policy}),
                             ("register_tiers", {"insert": insert}),
                             ("register_commands", {"register": register_command})):
            try:
                returned = self._own_caller(plugin, hook)(**kwargs)
            except (Exception, SystemExit) as exc:  # the plugin's failure, recorded; the others go on
                self.failures.append(PluginFailure(name, hook, describe(exc)))
                continue
            if returned:  # pluggy collects what implementations return; registration hooks return nothing
                self.failures.append(PluginFailure(
                    name, hook, f"returned {short(returned[0])} instead of calling its argument (register/insert) "
                                "for each item; nothing it returns is used"))
        self._declare_checks(plugin, name, declared)
        self.plugins.append(PluginInfo(name, distribution, version, tuple(declared)))
        self._callers.clear()   # a subset caller leaves out the plugins it knew of; a new one must be left out too
        self.generation = next(_generation)

    def _declare_checks(self, plugin: Any, name: str, declared: list[str]) -> None:
        """Which of the plugin's kernels its `can_implement` checks: those whose kernels file says
        `can_implement: true`, or, when a file says nothing, every kernel of a plugin that implements it."""
        implements = any(impl.plugin is plugin for impl in self.pm.hook.can_implement.get_hookimpls())
        for kernel in declared:
            wanted = self.by_name[kernel].can_implement
            if wanted is None:
                wanted = implements
            if wanted and not implements:
                self.failures.append(PluginFailure(name, "kernels file", f"kernel {kernel} declares can_implement: "
                                                   "true but the plugin implements no can_implement hook"))
                continue
            if wanted:
                self._checks[kernel] = name

    def _register(self, plugin: Any, name: str) -> bool:
        """pluggy's registration and `check_pending`: a hook no spec declares is this plugin's error."""
        try:
            self.pm.register(plugin, name=name)
        except Exception as exc:  # e.g. an implementation asking for an argument the spec lacks
            self.failures.append(PluginFailure(name, "register", f"{type(exc).__name__}: {exc}"))
            return False
        known = ", ".join(sorted(n for n in dir(hookspecs) if hasattr(getattr(hookspecs, n), "oracle_spec")))
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            self.pm.unregister(plugin)
            self.failures.append(PluginFailure(name, "register", f"{exc}; the hooks are: {known}"))
            return False
        if not self.pm.get_hookcallers(plugin):   # an int, a function, a module without hooks: not a plugin
            self.pm.unregister(plugin)
            self.failures.append(PluginFailure(name, "register", f"the entry point's object ({_kind(plugin)}) "
                                               f"implements no oracle hook; a plugin implements some of: {known}"))
            return False
        return True

    def _own_caller(self, plugin: Any, hook: str) -> Any:
        """pluggy's caller for `hook` with every other plugin left out (one plugin's implementation)."""
        others = [p for p in self.pm.get_plugins() if p is not plugin]
        return self.pm.subset_hook_caller(hook, remove_plugins=others)

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
            problem = self._ownership_problem(spec, plugin)
            if problem:
                self.failures.append(PluginFailure(plugin, "kernels file", f"{problem}; {spec.name} is skipped"))
                continue
            self.backend_owner.setdefault(spec.backend, plugin)
            self.kernels.append(spec)
            self.by_name[spec.name] = spec
            added.append(spec.name)
        return added

    def record_failure(self, plugin: str, stage: str, message: str) -> None:
        """Record a failure once (policy files are loaded again for every policy)."""
        failure = PluginFailure(plugin, stage, message)
        if failure not in self.failures:
            self.failures.append(failure)

    def _ownership_problem(self, spec: KernelSpec, plugin: str) -> str | None:
        """A backend belongs to the first plugin that declares it; a kernel name to one declaration."""
        other = self.by_name.get(spec.name)
        if other is not None:
            return (f"duplicate kernel name {spec.name!r} at {spec.source}; already declared by plugin "
                    f"{other.plugin} at {other.source}")
        owner = self.backend_owner.get(spec.backend)
        if owner is not None and owner != plugin:
            return (f"backend {spec.backend!r} (kernel {spec.name} at {spec.source}) belongs to plugin {owner}; "
                    "a plugin may declare kernels only for its own backends")
        return None

    def _add_command(self, command: Any, plugin: str) -> None:
        name = getattr(command, "NAME", None)
        if not isinstance(name, str) or not callable(getattr(command, "add_parser", None)) \
                or not callable(getattr(command, "run", None)):
            raise OracleError("a command needs NAME (str), add_parser(subparsers) and run(args) -> int")
        other = self.commands.get(name)
        if other is not None:
            raise OracleError(f"command {name!r} is already added by plugin {other.plugin}")
        self.commands[name] = PluginCommand(plugin, name, command)

    # ---- queries -----------------------------------------------------------------------
    @property
    def env_keys(self) -> tuple[str, ...]:
        """Environment variables the plugins' hooks read (their kernels files' `env:`); they key the cache."""
        return tuple(sorted({key for spec in self.kernels for key in spec.env}))

    def backends(self) -> list[str]:
        return sorted({k.backend for k in self.kernels})

    def kernels_for(self, op: str, weight_format: str) -> list[KernelSpec]:
        return [k for k in self.kernels if k.serves(op, weight_format)]

    def can_implement_caller(self, kernel_name: str) -> Any:
        """pluggy's caller of the `can_implement` of the plugin that declared `kernel_name` (only that
        plugin's), or None when the kernel declares no code check."""
        plugin = self._checks.get(kernel_name)
        if plugin is None:
            return None
        caller = self._callers.get(plugin)
        if caller is None:
            caller = self._callers[plugin] = self._own_caller(self.pm.get_plugin(plugin), "can_implement")
        return caller

    def is_backend(self, name: str) -> bool:
        return normalize_backend(name) in self.backend_owner

    def require_backend(self, name: str, *, field: str, source: str | None = None) -> str:
        """`name` normalised; "auto" or a registered backend, else an error listing the registered ones."""
        normalized = normalize_backend(name)
        if normalized != "auto" and not self.is_backend(normalized):
            raise UnknownBackendError(
                f"unknown backend {normalized!r}; registered backends: auto, {', '.join(self.backends())}"
                + suggestion(normalized, self.backends()), field=field, source=source)
        return normalized


def describe(exc: BaseException) -> str:
    """'SystemExit: 3' style text for a failure of plugin code."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _kind(obj: Any) -> str:
    import types
    if isinstance(obj, types.ModuleType):
        return f"module {obj.__name__}"
    return short(obj)


def _load_order(ep: Any) -> tuple[bool, str]:
    """Shipped plugins first, then the others; by entry-point name within each."""
    dist = getattr(getattr(ep, "dist", None), "name", None)
    return (dist not in SHIPPED_DISTRIBUTIONS, ep.name)


def short(value: Any) -> str:
    """A value as a short text for an error message (type and the start of its repr)."""
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"
