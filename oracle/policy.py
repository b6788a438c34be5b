"""Policy files -> one validated `Policy`, merged in layers, each value keeping its file:line.

Layers, lowest first: the built-in `policies/default.yaml`, files contributed by
plugins (`register_policies`), then plugins' tier insertions (`register_tiers`), then the
user's files (`--policy`, in the order given). Mappings merge key by key; lists and
scalars replace. The explicit `KernelConfig`
of a call sits above all of them (see engine.py).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, field_validator

from .catalog import normalize_backend
from .envvars import DISABLED_KERNELS, MEASUREMENTS
from .objective import parse_objective
from .errors import PolicyError
from .formats import ActivationFormat, Op, WeightFormat
from .policy_checks import check_policy_names
from .resources import policy_file
from .sources import SourcedDict, SourcedList, display_path, load_yaml_file
from .validation import validate

BackendChoice = str | dict[str, str]
#: A weight format, or `default` for the formats a table does not list.
FormatKey = WeightFormat | Literal["default"]
#: An activation format, or `checkpoint`: the format the checkpoint declares, when it declares one.
ActivationChoice = ActivationFormat | Literal["checkpoint"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ForceBF16(_Strict):
    """An environment switch that forces A16 (unquantized) activations."""

    env: list[str] = Field(default_factory=list, description="variables; the value '1' switches it on")
    ops: list[Op] = Field(default_factory=list, description="ops it applies to")
    formats: list[WeightFormat] = Field(default_factory=list, description="weight formats it applies to")


class PlatformDefault(_Strict):
    """Backends a platform uses by default, below the deployment's `backends`."""

    when: dict[str, Any] = Field(description="match on vendor (list) and capability_family (list of majors)")
    backends: dict[Op, BackendChoice] = Field(default_factory=dict)

    @field_validator("when")
    @classmethod
    def _known_keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        unknown = set(v) - {"vendor", "capability_family", "device"}
        if unknown:
            raise ValueError(f"unknown match keys {sorted(unknown)}; expected vendor, capability_family, device")
        return v

    def matches(self, platform: Any) -> bool:
        vendors = self.when.get("vendor")
        if vendors is not None and platform.vendor not in _as_list(vendors):
            return False
        families = self.when.get("capability_family")
        if families is not None and (platform.capability is None or platform.capability[0] not in _as_list(families)):
            return False
        device = self.when.get("device")
        if device is not None and platform.preset_name not in _as_list(device):
            return False
        return True


class Measurements(_Strict):
    """Tuning files (`oracle tune`) that rank the candidates passing their constraints by measured time."""

    files: list[StrictStr] = Field(default_factory=list,
                             description="tuning files (relative paths: from the current directory); also "
                                         "env ORACLE_MEASUREMENTS and `--measurements` (which replace these)")
    objective: StrictStr = Field("balanced", description="decode (smallest measured M), prefill (largest), balanced "
                                                   "(every measured M alike) or M:weight,... e.g. 1:0.7,4096:0.3")
    allow_testing_only: StrictBool = Field(
        False, description="may testing-only kernels (emulation, BF16 weights) win by measurement (true or false, "
                           "nothing else); by default they keep their policy place after every measured kernel")

    @field_validator("objective")
    @classmethod
    def _objective(cls, v: str) -> str:
        try:
            parse_objective(v, field="objective")
        except Exception as exc:
            raise ValueError(str(exc)) from None
        return v


class Policy(_Strict):
    """The effective selection policy. Every key is documented in docs/policy-reference.md."""

    version: Literal[1] = Field(1, description="policy schema version")
    ordering: dict[Op, dict[FormatKey, list[str]]] = Field(
        default_factory=dict,
        description="per op, per weight format (or `default`): tiers or backends tried in order by auto selection")
    auto_select: dict[str, dict[Op, bool]] = Field(
        default_factory=dict,
        description="per backend, per op: may automatic selection pick it (overrides the kernel's own flag)")
    activations: dict[Op, dict[FormatKey, list[ActivationChoice]]] = Field(
        default_factory=dict,
        description="per op, per weight format (or `default`): activation formats to try, in order, when the "
                    "checkpoint declares none; `checkpoint` marks where a declared format is honoured")
    checkpoint_fallback: dict[Op, dict[FormatKey, list[ActivationFormat]]] = Field(
        default_factory=dict,
        description="per op, per weight format (or `default`): activation formats tried after the one the "
                    "checkpoint declares, when no candidate can serve that one (the trace says why)")
    force_bf16_activations: ForceBF16 = Field(default_factory=ForceBF16,
                                              description="environment switch forcing A16 activations")
    on_unsupported: Literal["error", "fallback"] = Field(
        "error", description="an explicit backend that has a kernel which cannot serve a layer: error, or fall "
                             "back to automatic selection")
    backends: dict[Op, BackendChoice] = Field(
        default_factory=dict, description="deployment default backend per op (a name or a per-format map)")
    platforms: list[PlatformDefault] = Field(default_factory=list,
                                             description="platform default backends, matched in order")
    disabled_kernels: list[str] = Field(default_factory=list,
                                        description="kernel names never selected (also env ORACLE_DISABLED_KERNELS)")
    measurements: Measurements = Field(default_factory=Measurements,
                                       description="rank viable candidates by measured time (oracle tune)")

    @field_validator("ordering")
    @classmethod
    def _ordering_names(cls, v: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
        return {op: {fmt: [normalize_backend(t) for t in tiers] for fmt, tiers in table.items()}
                for op, table in v.items()}

    @field_validator("auto_select")
    @classmethod
    def _backend_names(cls, v: dict[str, dict[str, bool]]) -> dict[str, dict[str, bool]]:
        return {normalize_backend(k): t for k, t in v.items()}


class EffectivePolicy:
    """A validated Policy plus where each value came from and a stable fingerprint."""

    def __init__(self, policy: Policy, provenance: dict[str, str], files: list[str],
                 plugin_env: Iterable[str] = ()):
        self.policy = policy
        self.provenance = provenance
        self.files = files
        blob = json.dumps(policy.model_dump(mode="json"), sort_keys=True)
        self.fingerprint = hashlib.sha1(blob.encode()).hexdigest()[:16]
        # every variable a decision may read keys the decision cache (plugins declare theirs: `env:`)
        self.env_keys = tuple(sorted(set(policy.force_bf16_activations.env)
                                     | {DISABLED_KERNELS, MEASUREMENTS} | set(plugin_env)))

    def __getattr__(self, name: str) -> Any:  # policy fields read through
        return getattr(self.policy, name)

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EffectivePolicy) and other.fingerprint == self.fingerprint

    def where(self, *path: str) -> str:
        """file:line of the value at `path` (or of its nearest recorded parent)."""
        parts = list(path)
        while parts:
            found = self.provenance.get(".".join(parts))
            if found:
                return found
            parts.pop()
        return self.files[0] if self.files else "<default>"

    def ordering_for(self, op: str, weight_format: str) -> tuple[list[str], str]:
        table = self.policy.ordering.get(op, {})
        if weight_format in table:
            return table[weight_format], self.where("ordering", op, weight_format)
        return table.get("default", []), self.where("ordering", op, "default")

    def activations_for(self, op: str, weight_format: str) -> tuple[list[str], str]:
        table = self.policy.activations.get(op, {})
        if weight_format in table:
            return table[weight_format], self.where("activations", op, weight_format)
        return table.get("default", ["bf16"]), self.where("activations", op, "default")

    def checkpoint_fallback_for(self, op: str, weight_format: str) -> tuple[list[str], str]:
        table = self.policy.checkpoint_fallback.get(op, {})
        key = weight_format if weight_format in table else "default"
        return list(table.get(key, [])), self.where("checkpoint_fallback", op, key)

    def auto_select_for(self, backend: str, op: str) -> tuple[bool | None, str]:
        value = self.policy.auto_select.get(backend, {}).get(op)
        return value, self.where("auto_select", backend, op)

    def describe(self) -> list[tuple[str, Any, str]]:
        """(dotted key, value, file:line) for every leaf, for `oracle policy show`."""
        rows: list[tuple[str, Any, str]] = []
        _leaves(self.policy.model_dump(mode="json"), [], rows, self)
        return rows


def _leaves(value: Any, path: list[str], rows: list, eff: EffectivePolicy) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _leaves(v, path + [str(k)], rows, eff)
    else:
        key = ".".join(path)
        rows.append((key, value, eff.where(*path)))


def _as_list(v: Any) -> list:
    return v if isinstance(v, list) else [v]


def _record(data: Any, path: list[str], provenance: dict[str, str]) -> None:
    """Record file:line for every key path in a loaded document."""
    if isinstance(data, SourcedDict):
        for key, value in data.items():
            sub = path + [str(key)]
            provenance[".".join(sub)] = data.where(key)
            _record(value, sub, provenance)
    elif isinstance(data, SourcedList):
        for i, value in enumerate(data):
            _record(value, path + [str(i)], provenance)


def _merge(base: dict, top: Mapping, path: list[str], provenance: dict[str, str]) -> dict:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) and key != "when":
            out[key] = _merge(out[key], value, path + [str(key)], provenance)
        else:
            prefix = ".".join(path + [str(key)])
            for stale in [p for p in provenance if p.startswith(prefix + ".")]:
                del provenance[stale]
            out[key] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def load_policy(user_files: Iterable[str | Path] = (), *, registry: Any = None) -> EffectivePolicy:
    """Merge the built-in default, the registry's plugin policy files and tier insertions, and the user's files.

    A pure function of its arguments: with no `registry`, no plugin contributes
    (`oracle.session.load_policy` passes the process's registry).
    """
    layers: list[tuple[str, Path]] = [("default", policy_file("default.yaml"))]
    if registry is not None:
        layers += [(f"plugin {name}", path) for name, path in registry.policy_files]
    insertions = list(getattr(registry, "insertions", ()))
    merged: dict = {}
    provenance: dict[str, str] = {}
    files: list[str] = []
    for origin, path in [*layers, *(("user", Path(p)) for p in user_files)]:
        if origin == "user" and insertions:
            merged = _insert_tiers(merged, insertions, provenance)
            insertions = []
        label = display_path(path)
        try:
            data = _load_layer(path, label, origin, registry)
        except PolicyError as exc:
            if not origin.startswith("plugin "):
                raise
            registry.record_failure(origin[len("plugin "):], "policy file", str(exc))  # isolated: skipped
            continue
        if data is None:
            continue
        found: dict[str, str] = {}
        _record(data, [], found)
        merged = _merge(merged, data, [], provenance)
        provenance.update(found)
        files.append(label)
    if insertions:
        merged = _insert_tiers(merged, insertions, provenance)
    policy = validate(Policy, merged, "merged policy")
    return EffectivePolicy(policy, provenance, files, getattr(registry, "env_keys", ()))


def _load_layer(path: Path, label: str, origin: str, registry: Any) -> Any:
    """One policy file, loaded, validated and its names checked; errors point at its lines."""
    data = load_yaml_file(path)
    if data is None:
        return None
    if not isinstance(data, dict):
        raise PolicyError("a policy file must be a mapping of policy keys", source=label)
    validate(Policy, data, f"policy ({origin})")
    builtin = origin == "default" or path.resolve() == policy_file("default.yaml").resolve()
    check_policy_names(data, f"policy ({origin})", None if builtin else registry)
    return data


def _insert_tiers(merged: dict, insertions: Iterable[Any], provenance: dict[str, str]) -> dict:
    """Apply plugins' `register_tiers` insertions to every ordering list that holds the anchor.

    Several insertions after one anchor keep their order (each goes after the previous
    one's name); provenance of a changed list keeps its file:line and adds the insert() call's.
    """
    ordering = {op: {fmt: list(tiers) for fmt, tiers in table.items()}
                for op, table in merged.get("ordering", {}).items()}
    last_after: dict[tuple[str, str, str], str] = {}
    for ins in insertions:
        for op, table in ordering.items():
            if ins.ops and op not in ins.ops:
                continue
            for fmt, tiers in table.items():
                if (ins.formats and fmt not in ins.formats) or ins.name in tiers or ins.anchor not in tiers:
                    continue
                at = tiers.index(ins.anchor)
                if ins.after:
                    previous = last_after.get((op, fmt, ins.anchor))
                    at = (tiers.index(previous) if previous in tiers else at) + 1
                    last_after[(op, fmt, ins.anchor)] = ins.name
                tiers.insert(at, ins.name)
                key = f"ordering.{op}.{fmt}"
                provenance[key] = f"{provenance.get(key, '<default>')} + {ins.name} by plugin {ins.plugin} " \
                                  f"({ins.source})"
    return {**merged, "ordering": ordering} if ordering else merged


def policy_schema() -> dict:
    """JSON schema of a policy file, for editors and `oracle schema`."""
    return Policy.model_json_schema()
