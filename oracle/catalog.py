"""Kernel declarations: what a plugin's YAML says each kernel is, serves and needs.

A plugin's kernels file::

    backend: b12x
    tier: b12x                      # default tier for the kernels below
    requires: {vendor: [nvidia], capability: {family: [12]}, packages: {b12x: {version: ">=1.5.1"}}}
    kernels:
      - name: b12x.moe
        op: moe
        implementation: oracle_b12x.moe:B12xMoE   # imported only by instantiate()
        auto_select: false
        modes:
          - {weight: mxfp4, activation: mxfp8, name: w4a8_mx, params: {w13_layout: w31}}
        constraints: [...]                         # see oracle.rules

File-level `backend`, `tier` and `requires` are defaults that each kernel may override.
"""
from __future__ import annotations

import functools
import importlib
import re
from typing import Annotated, Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, field_validator

from . import templates
from .errors import PolicyError
from .formats import ActivationFormat, Op, WeightFormat
from .kernel import Kernel
from .rules import Rule, compile_rules
from .sources import SourcedDict, where
from .validation import validate

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.\-]*$")


#: Placeholders a requirement's `reason` may use; each is always filled in.
REQUIREMENT_PLACEHOLDERS = ("backend", "kernel", "device_name", "vendor", "sm", "capability", "required",
                            "package", "installed", "install", "detail")


def render_reason(template: str, values: dict[str, Any]) -> str:
    """Fill a requirement reason; placeholders were checked at load time, so none is missing."""
    return templates.render(template, lambda name: values.get(name, ""))


def _check_placeholders(reason: str | None) -> str | None:
    """Every placeholder is one of REQUIREMENT_PLACEHOLDERS (all text) and its format spec fits text."""
    if reason is None:
        return None

    def sample(name: str) -> str:
        if name not in REQUIREMENT_PLACEHOLDERS:
            raise KeyError(name)
        return "x"
    templates.check(reason, sample, lambda name: f"reason uses unknown placeholder(s) {{{name}}}; available: "
                                                 f"{', '.join(REQUIREMENT_PLACEHOLDERS)}")
    return reason


def normalize_backend(name: str) -> str:
    """Backend names are case-insensitive and '-' equals '_'."""
    return name.strip().lower().replace("-", "_")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Reasoned(_Frozen):
    """A requirement with an optional human `reason`, whose placeholders are checked on load."""

    @field_validator("reason", check_fields=False)
    @classmethod
    def _reason_placeholders(cls, v: str | None) -> str | None:
        return _check_placeholders(v)


class Mode(_Frozen):
    """One (weight, activation) combination a kernel serves, with the kernel's name for it."""

    weight: WeightFormat = Field(description="weight format this mode serves")
    activation: ActivationFormat = Field(description="activation format it runs with (bf16: unquantized, A16)")
    name: str = Field(description="the kernel's own name for the mode (w4a8_mx, w4a16, ...)")
    params: dict[str, Any] = Field(default_factory=dict,
                                   description="free-form values passed to the implementation (layouts, recipes)")

    def __hash__(self) -> int:
        return hash((self.weight, self.activation, self.name))


class CapabilityReq(_Reasoned):
    family: list[int] | None = Field(None, description="accepted major versions, e.g. [12] for SM12x")
    min: str | None = Field(None, description='at least this capability, "8.9"')
    max: str | None = Field(None, description='at most this capability, "9.0"')
    reason: str | None = Field(None, description="the trace's reason when unmet")

    @field_validator("min", "max", mode="before")
    @classmethod
    def _as_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, (int, float)) else v

    @field_validator("min", "max")
    @classmethod
    def _capability(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"\d+\.\d+", v):
            raise ValueError(f"capability {v!r} must look like '8.9'")
        return v

    def accepts(self, capability: tuple[int, int] | None) -> bool:
        if capability is None:
            return False
        if self.family is not None and capability[0] not in self.family:
            return False
        if self.min is not None and capability < _cap(self.min):
            return False
        if self.max is not None and capability > _cap(self.max):
            return False
        return True

    def describe(self) -> str:
        parts = []
        if self.family:
            parts.append(" or ".join(f"SM{f}x" for f in self.family))
        if self.min:
            parts.append(f">= {self.min}")
        if self.max:
            parts.append(f"<= {self.max}")
        return ", ".join(parts) or "any"


def _version_range(spec: str, prefix: str = "") -> str:
    """`spec` if it is a PEP 440 range, else the error a file's reader sees (`prefix` names the entry)."""
    try:
        SpecifierSet(spec)
    except InvalidSpecifier:
        raise ValueError(f"{prefix}{spec!r} is not a version range such as '>=1.5.1,<1.6'") from None
    return spec


class PackageReq(_Reasoned):
    version: str = Field("", description='a PEP 440 range such as ">=1.5.1,<1.6"; "" = any version')
    install: str | None = Field(None, description="the command that installs it, shown when missing")
    reason: str | None = Field(None, description="the trace's reason when unmet")

    @field_validator("version")
    @classmethod
    def _specifier(cls, v: str) -> str:
        return _version_range(v)


class RuntimeReq(_Reasoned):
    check: str = Field(description='"module:function"(spec, platform) -> (ok, detail)')
    reason: str | None = Field(None, description="the trace's reason when it fails ({detail} available)")


class EnvironmentReq(RuntimeReq):
    versions: dict[str, str] = Field(
        default_factory=dict, description="the supported version range of each distribution that can provide "
                                          "what the check looks for (the check reads them; stated with "
                                          "--with-package, their versions describe the target machine)")

    @field_validator("versions")
    @classmethod
    def _ranges(cls, v: dict[str, str]) -> dict[str, str]:
        for name, spec in v.items():
            _version_range(spec, f"{name}: ")
        return v


class VendorReq(_Reasoned):
    any_of: list[Literal["nvidia", "amd", "intel", "cpu"]] = Field(description="accepted vendors")
    reason: str | None = Field(None, description="the trace's reason when unmet")


class Requirements(_Frozen):
    vendor: VendorReq | None = Field(None, description="device vendors the kernel runs on")
    capability: CapabilityReq | None = Field(None, description="compute capability range or families")
    packages: dict[str, PackageReq] = Field(default_factory=dict,
                                            description="distributions that must be installed, by name")
    runtime: RuntimeReq | None = Field(None, description="a check that must run on the real device")
    environment: EnvironmentReq | None = Field(
        None, description="the one judge of a requirement that package metadata cannot decide (e.g. which "
                          "distribution provides an importable module): (ok, detail) from the platform's "
                          "stated packages, else this Python environment, for detected and simulated devices "
                          "alike; a detail on success is shown as a note")

    @field_validator("vendor", mode="before")
    @classmethod
    def _vendor_list(cls, v: Any) -> Any:
        return {"any_of": v} if isinstance(v, list) else v

    @field_validator("packages", mode="before")
    @classmethod
    def _package_shorthand(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {k: ({"version": s} if isinstance(s, str) else ({} if s is None else s)) for k, s in v.items()}
        return v


class _KernelEntry(_Frozen):
    name: str = Field(description="unique across all plugins, e.g. b12x.moe")
    op: Op = Field(description="the layer op it serves")
    implementation: str = Field(description='"package.module:Class", imported only by Decision.instantiate(layer)')
    modes: list[Mode] = Field(min_length=1, description="(weight, activation) combinations it serves")
    backend: str | None = Field(None, description="backend name (defaults to the file's)")
    tier: str | None = Field(None, description="ordering tier it joins (defaults to the file's, then the backend)")
    auto_select: bool = Field(True, description="may automatic selection pick it (the policy may override)")
    testing_only: bool = Field(False, description="a slow reference path: every decision ending on it says so")
    note: str = Field("", description="shown in traces of decisions that choose it")
    requires: Requirements | None = Field(None, description="platform requirements, merged over the file's")
    constraints: Any = Field(None, description="list of constraint rules (see below)")
    can_implement: bool | None = Field(None, description="is the plugin's can_implement hook called for it (after "
                                                         "its constraints pass); defaults to the file's")

    @field_validator("implementation")
    @classmethod
    def _dotted(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", v):
            raise ValueError(f"{v!r} must be 'package.module:ClassName'")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"{v!r} must be lower-case letters, digits, '.', '-' or '_'")
        return v


class _KernelFile(_Frozen):
    backend: str | None = Field(None, description="default backend of the kernels below")
    tier: str | None = Field(None, description="default ordering tier of the kernels below")
    requires: Requirements | None = Field(None, description="default platform requirements")
    env: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = Field(
        default_factory=list, description="environment variables the plugin's hooks read (they key the "
                                          "decision cache; hooks read them with oracle.envvars.decision_env())")
    can_implement: bool | None = Field(
        None, description="is the plugin's can_implement hook called for the kernels below (unset: for every "
                          "kernel of a plugin that implements the hook)")
    kernels: list[Any] = Field(min_length=1, description="the kernel declarations")


class KernelSpec(_Frozen):
    """A declared kernel, ready for selection. `constraints` are compiled rules."""

    name: str
    backend: str
    tier: str
    op: Op
    implementation: str
    modes: tuple[Mode, ...]
    auto_select: bool = True
    testing_only: bool = False
    note: str = ""
    requires: Requirements = Requirements()
    constraints: tuple[Rule, ...] = ()
    source: str = "<memory>"
    plugin: str = "<memory>"
    #: environment variables the plugin's hooks read for this kernel (the file's `env:`)
    env: tuple[str, ...] = ()
    #: is the plugin's can_implement called for it (None: when the plugin implements the hook)
    can_implement: bool | None = None
    #: file:line of each requirement and of auto_select, for the trace.
    lines: dict[str, str] = Field(default_factory=dict)

    def __hash__(self) -> int:
        return hash(self.name)

    def modes_for(self, weight_format: str) -> tuple[Mode, ...]:
        return tuple(m for m in self.modes if m.weight == weight_format)

    def serves(self, op: str, weight_format: str) -> bool:
        return self.op == op and any(m.weight == weight_format for m in self.modes)

    def load_implementation(self) -> type:
        """Import the implementation class; only `instantiate()` and `check_implementation` call this."""
        try:
            impl = import_object(self.implementation, f"kernel {self.name}")
        except PolicyError as exc:
            raise PolicyError(str(exc), source=self.source) from None
        if not (isinstance(impl, type) and issubclass(impl, Kernel)):
            raise PolicyError(f"kernel {self.name}: implementation {self.implementation} is "
                              f"{_kind(impl)}, not a subclass of oracle.kernel.Kernel", source=self.source)
        return impl


def kernels_schema() -> dict:
    """The JSON schema of a kernels file: the file's own fields and one kernel's (`oracle schema kernels`)."""
    return {"file": _KernelFile.model_json_schema(), "kernel": _KernelEntry.model_json_schema()}


def check_implementation(spec: KernelSpec) -> str | None:
    """Why `spec`'s implementation cannot be used (import fails, missing, not a Kernel), or None.

    For `oracle verify`: selection never imports implementations, so without this a missing
    class is found only by `Decision.instantiate()`.
    """
    try:
        spec.load_implementation()
    except PolicyError as exc:   # import failures and sys.exit included (import_object)
        return str(exc)
    for what in ("runtime", "environment"):   # a check that names nothing would fail only on the device
        req = getattr(spec.requires, what)
        if req is None:
            continue
        where = spec.lines.get(what, spec.source)
        try:
            check = import_object(req.check, f"kernel {spec.name} requires.{what}.check")
        except PolicyError as exc:
            return f"{where}: {exc}"
        if not callable(check):
            return f"{where}: kernel {spec.name}: requires.{what}.check {req.check} is {_kind(check)}, not a function"
    return None


def _kind(obj: Any) -> str:
    return f"the class {obj.__qualname__}" if isinstance(obj, type) else f"a {type(obj).__name__}"


def import_object(dotted: str, owner: str) -> Any:
    module_name, _, attr = dotted.partition(":")
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # a plugin bug must surface as a clear error, not a crash
        raise PolicyError(f"{owner}: cannot import {dotted}: {type(exc).__name__}: {exc}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise PolicyError(f"{owner}: cannot import {dotted}: module {module_name} has no {attr!r}") from None


def load_kernel_file(data: Any, *, plugin: str, what: str) -> list[KernelSpec]:
    """Validate one kernels YAML document into KernelSpecs (rules compiled, lines kept)."""
    if not isinstance(data, dict):
        raise PolicyError(f"{what}: expected a mapping with 'kernels'", source=where(data))
    head = validate(_KernelFile, data, "kernels file")
    specs = []
    kernels = data["kernels"]
    for i, raw in enumerate(kernels):
        if not isinstance(raw, dict):
            raise PolicyError(f"{what}: each kernel must be a mapping", source=where(kernels, i))
        label = f"kernel {raw['name']}" if isinstance(raw.get("name"), str) else f"kernel #{i + 1}"
        entry = validate(_KernelEntry, raw, label)
        backend = entry.backend or head.backend
        tier = entry.tier or head.tier or backend
        if not backend:
            raise PolicyError(f"{what}: kernel {entry.name} has no backend (set it on the kernel or the file)",
                              source=where(kernels, i))
        seen: set[tuple[str, str]] = set()
        for j, mode in enumerate(entry.modes):
            if mode.weight == "bf16" or (mode.weight, mode.activation) in seen:
                raise PolicyError(f"{what}: kernel {entry.name}: duplicate mode {mode.weight}/{mode.activation}",
                                  source=where(raw.get("modes"), j))
            seen.add((mode.weight, mode.activation))
        requires = _merge_requires(head.requires, entry.requires)
        lines = _requirement_lines(data.get("requires"), raw.get("requires"))
        lines["auto_select"] = where(raw, "auto_select") if "auto_select" in raw else where(kernels, i)
        specs.append(KernelSpec(
            name=entry.name, backend=normalize_backend(backend), tier=normalize_backend(tier), op=entry.op,
            implementation=entry.implementation, modes=tuple(entry.modes), auto_select=entry.auto_select,
            testing_only=entry.testing_only, note=entry.note, requires=requires,
            constraints=compile_rules(raw.get("constraints"), entry.op, f"kernel {entry.name}",
                                      where(raw, "constraints")),
            source=where(kernels, i), plugin=plugin, lines=lines, env=tuple(head.env),
            can_implement=entry.can_implement if entry.can_implement is not None else head.can_implement,
        ))
    return specs


def _merge_requires(base: Requirements | None, own: Requirements | None) -> Requirements:
    if base is None:
        return own or Requirements()
    if own is None:
        return base
    merged = base.model_dump()
    for key, value in own.model_dump(exclude_unset=True).items():
        if key == "packages":
            merged["packages"] = {**merged["packages"], **value}
        else:
            merged[key] = value
    return Requirements.model_validate(merged)


def _requirement_lines(*blocks: Any) -> dict[str, str]:
    lines: dict[str, str] = {}
    for block in blocks:
        if not isinstance(block, SourcedDict):
            continue
        for key in block:
            lines[key] = block.where(key)
        packages = block.get("packages")
        if isinstance(packages, SourcedDict):
            for name in packages:
                lines[f"package:{name}"] = packages.where(name)
    return lines


@functools.lru_cache(maxsize=64)
def _cap(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def version_satisfies(installed: str, spec: str) -> bool:
    if not spec:
        return True
    try:
        return Version(installed) in SpecifierSet(spec, prereleases=True)
    except InvalidVersion:
        return False
