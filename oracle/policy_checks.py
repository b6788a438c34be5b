"""Names in a policy file checked against the vocabulary and the registry, with did-you-mean.

pydantic checks a policy's structure; these checks catch values that are well-formed but
name nothing: a misspelt backend in `auto_select` or `backends`, an unknown kernel in
`disabled_kernels`, a weight format no table knows, a vendor, device or capability family
in `platforms[].when` that no platform can have. Each used to pass `oracle verify` and
change nothing. Vocabulary checks apply to every file; registry checks (backends,
kernels) to plugin and user files, since the built-in default is written for the shipped
plugins, which may not be installed. `ordering` tiers are not checked: a portable policy may
order the tier of a plugin that this machine lacks.
"""
from __future__ import annotations

from typing import Any, Iterable

from .catalog import normalize_backend
from .errors import PolicyError
from .formats import WEIGHT_FORMATS
from .names import unknown
from .platform import is_device_name, preset_names
from .sources import where

VENDORS = ("nvidia", "amd", "intel", "cpu")
_FORMAT_KEYS = (*WEIGHT_FORMATS, "default")


def check_policy_names(data: Any, what: str, registry: Any | None) -> None:
    """Raise PolicyError at the file:line of the first name in `data` that names nothing."""
    if not isinstance(data, dict):
        return
    for i, entry in enumerate(_items(data.get("platforms"))):
        if isinstance(entry, dict):
            _check_when(entry.get("when"), f"{what}: platforms[{i}].when")
    for field, _, table in _backend_tables(data):
        for fmt in table if isinstance(table, dict) else ():
            if fmt not in _FORMAT_KEYS:
                raise PolicyError(f"{what}: {field}: {unknown('weight format', fmt, _FORMAT_KEYS)}",
                                  source=where(table, fmt))
    if registry is None:
        return
    backends = set(registry.backends())
    kernels = set(registry.by_name)
    for name in _keys(data.get("auto_select")):
        if normalize_backend(str(name)) not in backends:
            raise PolicyError(f"{what}: auto_select: {unknown('backend', name, backends)}",
                              source=where(data["auto_select"], name))
    listed = data.get("disabled_kernels")
    for i, name in enumerate(_items(listed)):
        if name not in kernels:
            raise PolicyError(f"{what}: disabled_kernels[{i}]: {unknown('kernel', name, kernels)}",
                              source=where(listed, i))
    for field, (parent, op), table in _backend_tables(data):
        pairs = table.items() if isinstance(table, dict) else [(None, table)]
        for fmt, name in pairs:
            if isinstance(name, str) and normalize_backend(name) not in backends | {"auto"}:
                raise PolicyError(f"{what}: {field}: {unknown('backend', name, backends | {'auto'})}",
                                  source=where(table, fmt) if fmt is not None else where(parent, op))


def _check_when(when: Any, field: str) -> None:
    if not isinstance(when, dict):
        return
    for key, allowed, ok in (("vendor", VENDORS, lambda v: v in VENDORS),
                             ("capability_family", None, _is_family),
                             ("device", None, is_device_name)):
        values = when.get(key)
        for i, value in enumerate(values if isinstance(values, list) else [values] if values is not None else []):
            if ok(value):
                continue
            loc = where(values, i) if isinstance(values, list) else where(when, key)
            if key == "capability_family":
                raise PolicyError(f"{field}.{key}: {value!r} is not a compute capability major version "
                                  "(an integer such as 12 for SM12x)", source=loc)
            raise PolicyError(f"{field}.{key}: {unknown(key, value, allowed or preset_names())}"
                              + (" or a capability such as sm120" if key == "device" else ""), source=loc)


def _is_family(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 99


def _backend_tables(data: dict) -> Iterable[tuple[str, tuple[Any, Any], Any]]:
    """(field name, (its mapping, key), choice) for `backends.<op>` and `platforms[i].backends.<op>`."""
    tables = [("backends", data.get("backends"))]
    tables += [(f"platforms[{i}].backends", e.get("backends"))
               for i, e in enumerate(_items(data.get("platforms"))) if isinstance(e, dict)]
    for field, table in tables:
        for op in _keys(table):
            yield f"{field}.{op}", (table, op), table[op]


def _keys(value: Any) -> list:
    return list(value) if isinstance(value, dict) else []


def _items(value: Any) -> list:
    return value if isinstance(value, list) else []
