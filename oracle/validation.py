"""pydantic validation of loaded YAML, with errors pointing at file:line."""
from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError


class Revalidating(BaseModel):
    """Frozen models with cached derived values: a copy is a new, validated instance.

    pydantic's `model_copy` copies `__dict__`, cached_property values included, and skips
    validation; a copy with changed fields would keep a stale cache key.
    """

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        data = {name: getattr(self, name) for name in type(self).model_fields}
        data.update(update or {})
        return type(self).model_validate(data)

from .errors import InputError, PolicyError
from .sources import SourcedDict, SourcedList, where

M = TypeVar("M", bound=BaseModel)


def require_type(value: Any, cls: type, field: str, hint: str) -> None:
    """InputError (not AttributeError later) when an API argument is not a `cls`."""
    if not isinstance(value, cls):
        raise InputError(f"expected a {cls.__name__}, got {type(value).__name__} {value!r:.60}; {hint}",
                         field=field)


def locate(data: Any, loc: tuple) -> str:
    """The file:line nearest to a pydantic error location inside loaded YAML."""
    best = where(data)
    node = data
    for part in loc:
        if isinstance(node, SourcedDict) and part in node:
            best = node.where(part)
            node = node[part]
        elif isinstance(node, SourcedList) and isinstance(part, int) and part < len(node):
            best = node.where(part)
            node = node[part]
        elif isinstance(node, SourcedDict) and part not in node:
            continue  # pydantic union/tag segment; keep walking with the same node
        else:
            break
    return best


def _data_path(data: Any, loc: tuple) -> tuple:
    """The parts of a pydantic location that exist in the data (drops union-branch tags)."""
    path: list = []
    node = data
    for part in loc:
        if part == "[key]":
            path.append(part)
            break
        if isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            path.append(part)
            node = node[part]
    return tuple(path)


def validate(model: type[M], data: Any, what: str) -> M:
    """`model.model_validate(data)`, turning the first error into a PolicyError at its line."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        err = errors[0]
        path = _data_path(data, tuple(err["loc"]))
        places = {_data_path(data, tuple(e["loc"])) for e in errors}
        if path and path[-1] == "[key]":
            path = path[:-1]
            field = ".".join(str(p) for p in path[:-1])
            message = f"{err['input']!r} is not a valid key here; {err['msg'].replace('Input should be', 'expected')}"
        else:
            field = ".".join(str(p) for p in path) or "(top level)"
            message = err["msg"]
            if err["type"] == "extra_forbidden":
                message = "unknown key"
            elif err["type"] == "missing":
                field = ".".join(str(p) for p in (*path, err["loc"][-1]))
                message = "required key is missing"
        more = f" (and {len(places) - 1} more)" if len(places) > 1 else ""
        raise PolicyError(f"{what}: {field}: {message}{more}", source=locate(data, path)) from None
