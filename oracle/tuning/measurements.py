"""Measurement sets: tuning files the engine ranks candidates by, checked against the platform.

A set is loaded once per (files, objective) and cached; a file changed on disk is read
again only after `oracle.reload()`, so decisions never change under a running process
unasked. Per platform, a file whose metadata differs (see metadata.py) is ignored with
a `StaleMeasurementsWarning` naming each difference.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..objective import Objective, parse_objective
from .metadata import mismatches
from .schema import TuningFile
from .store import read

CandidateKey = tuple[str, str, str]  # kernel, mode, activation format


class StaleMeasurementsWarning(UserWarning):
    """A tuning file measured on another device or with other versions; it is ignored."""


class UnusedMeasurementsWarning(UserWarning):
    """Entries of a tuning file that no registered kernel, mode or layer can use (they are skipped, said once)."""


_LAYER_TYPES = ("LinearLayer", "MoELayer", "EmbeddingLayer")


def _layer_key_problem(key: str) -> str | None:
    """Why `key` cannot be a layer key oracle files figures under (None when it can)."""
    try:
        data = json.loads(key)
    except ValueError:
        return "not canonical JSON"
    if not isinstance(data, dict) or data.get("type") not in _LAYER_TYPES:
        return f"no layer type ({', '.join(_LAYER_TYPES)})"
    return None


def unusable(data: TuningFile, registry: Any) -> list[str]:
    """Each kind of entry of `data` that nothing here can use, counted, with up to 3 examples."""
    kinds: dict[str, list[str]] = {}
    checked_keys: dict[str, str | None] = {}
    for e in data.entries:
        spec = registry.by_name.get(e.kernel)
        if spec is None:
            kinds.setdefault("kernels no registered plugin declares", []).append(e.kernel)
        elif not any(m.name == e.mode and m.activation == e.activation_format for m in spec.modes):
            kinds.setdefault(f"modes kernel {e.kernel} does not declare", []).append(
                f"{e.mode}/{e.activation_format}")
        if e.layer_key not in checked_keys:
            checked_keys[e.layer_key] = _layer_key_problem(e.layer_key)
        if checked_keys[e.layer_key] is not None:
            kinds.setdefault(f"layer keys that are {checked_keys[e.layer_key]}", []).append(e.layer_key[:40])
    out = []
    for what, names in kinds.items():
        shown = ", ".join(sorted(set(names))[:3]) + (", ..." if len(set(names)) > 3 else "")
        out.append(f"{len(names)} entries name {what} ({shown})")
    return out


@dataclass
class CandidateTimes:
    """One candidate's figures for one layer signature."""

    times: dict[int, float] = field(default_factory=dict)     # M -> median ms
    methods: dict[int, str] = field(default_factory=dict)     # M -> graph | eager
    error: str | None = None                                  # the first failure, if any
    testing_only: bool = False

    def timings(self) -> tuple[tuple[int, float, str], ...]:
        return tuple((m, self.times[m], self.methods.get(m, "eager")) for m in sorted(self.times))


@dataclass
class Table:
    """The figures of every file that matches one platform, by layer key then candidate."""

    by_layer: dict[str, dict[CandidateKey, CandidateTimes]]
    ignored: list[str]                                         # files ignored, with why

    def for_layer(self, key: str) -> dict[CandidateKey, CandidateTimes] | None:
        return self.by_layer.get(key)


class MeasurementSet:
    """Tuning files plus the objective and whether testing-only kernels may win by measurement."""

    def __init__(self, files: Sequence[tuple[str, TuningFile]], objective: Objective,
                 allow_testing_only: bool = False):
        self.files = list(files)
        self.objective = objective
        self.allow_testing_only = allow_testing_only
        digest = hashlib.sha1()
        for name, data in self.files:
            digest.update(name.encode())
            digest.update(data.metadata.updated.encode())
            digest.update(str(len(data.entries)).encode())
        digest.update(f"{objective}|{allow_testing_only}".encode())
        self.fingerprint = digest.hexdigest()[:16]
        self._tables: dict[Any, Table] = {}
        self._lock = threading.Lock()

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MeasurementSet) and other.fingerprint == self.fingerprint

    def __repr__(self) -> str:
        return f"<MeasurementSet {[n for n, _ in self.files]} objective={self.objective}>"

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.files]

    def table(self, platform: Any, registry: Any) -> Table:
        """The figures that apply on `platform`; stale files are ignored with a warning (once)."""
        key = (platform, registry.generation)
        found = self._tables.get(key)
        if found is None:
            found = self._build(platform, registry)
            with self._lock:
                self._tables[key] = found
        return found

    def _build(self, platform: Any, registry: Any) -> Table:
        by_layer: dict[str, dict[CandidateKey, CandidateTimes]] = {}
        ignored: list[str] = []
        for name, data in self.files:
            differences = mismatches(data.metadata, platform, registry)
            if differences:
                text = (f"measurements {name} ignored: measured on {data.metadata.device_name} with other "
                        f"versions or hardware than {platform.describe()} ({'; '.join(differences)}); "
                        "re-run `oracle tune` here")
                ignored.append(text)
                warnings.warn(text, StaleMeasurementsWarning, stacklevel=2)
                continue
            problems = unusable(data, registry)
            if problems:
                text = f"measurements {name}: skipped, nothing here can use them: {'; '.join(problems)}"
                ignored.append(text)
                warnings.warn(text, UnusedMeasurementsWarning, stacklevel=2)
            for e in data.entries:
                slot = by_layer.setdefault(e.layer_key, {}).setdefault(
                    (e.kernel, e.mode, e.activation_format), CandidateTimes())
                slot.testing_only = e.testing_only
                if e.status == "failed":
                    slot.error = slot.error or f"{e.error} (M={e.m})"
                elif e.median_ms is not None:
                    slot.times[e.m] = e.median_ms
                    slot.methods[e.m] = e.method or "eager"
        return Table(by_layer, ignored)


def load_measurements(paths: Iterable[str | Path], objective: str | Objective = "balanced", *,
                      allow_testing_only: bool = False) -> MeasurementSet:
    """Read tuning files (errors name the file and field) into a set."""
    obj = objective if isinstance(objective, Objective) else parse_objective(objective, field="objective")
    files = [(str(p), read(p)) for p in paths]
    return MeasurementSet(files, obj, allow_testing_only)


_cache: dict[tuple, MeasurementSet] = {}
_cache_lock = threading.Lock()


def cached_measurements(paths: tuple[str, ...], objective: str, allow_testing_only: bool) -> MeasurementSet:
    """load_measurements, remembered until `clear_cache()` (oracle.reload())."""
    key = (paths, objective, allow_testing_only)
    found = _cache.get(key)
    if found is None:
        found = load_measurements(paths, objective, allow_testing_only=allow_testing_only)
        with _cache_lock:
            _cache[key] = found
    return found


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def env_paths(value: str | None) -> tuple[str, ...]:
    """ORACLE_MEASUREMENTS: tuning files separated by the path separator (':' on Linux)."""
    if not value:
        return ()
    return tuple(p for p in value.split(os.pathsep) if p.strip())
