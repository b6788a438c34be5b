"""pydantic validation of loaded YAML, with errors pointing at file:line."""
from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import PolicyError
from .sources import SourcedDict, SourcedList, where

M = TypeVar("M", bound=BaseModel)


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


def validate(model: type[M], data: Any, what: str) -> M:
    """`model.model_validate(data)`, turning the first error into a PolicyError at its line."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"])
        field = ".".join(str(p) for p in loc) or "(top level)"
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown key"
        elif err["type"] == "missing":
            message = "required key is missing"
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise PolicyError(f"{what}: {field}: {message}{more}", source=locate(data, loc)) from None
