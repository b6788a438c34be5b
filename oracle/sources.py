"""YAML loading that remembers where every value came from.

Uses `yaml.SafeLoader` to compose the node tree (no Python objects, no tags beyond the
safe set) and converts it by hand so that each mapping and list knows the line of each
of its entries. `explain` relies on this to say *which line* rejected a candidate.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import PolicyError


class SourcedDict(dict):
    """A dict that knows its file and the line of each key."""

    source: str = "<memory>"
    line: int = 0
    key_lines: dict

    def where(self, key: Any | None = None) -> str:
        line = self.key_lines.get(key, self.line) if key is not None else self.line
        return f"{self.source}:{line}"


class SourcedList(list):
    """A list that knows its file and the line of each item."""

    source: str = "<memory>"
    line: int = 0
    item_lines: list

    def where(self, index: int | None = None) -> str:
        line = self.item_lines[index] if index is not None else self.line
        return f"{self.source}:{line}"


def where(value: Any, key: Any | None = None, default: str = "<memory>") -> str:
    """file:line of a loaded value (or of one of its keys), or `default` for plain data."""
    if isinstance(value, (SourcedDict, SourcedList)):
        return value.where(key)
    return default


def display_path(path: Path) -> str:
    """A short name for a file that does not depend on the working directory.

    Files of this checkout (policies, plugins) are named from its root; installed ones from
    site-packages; other files relative to the working directory when inside it, else absolute.
    """
    resolved = path.resolve()
    for base in (_checkout_root(), Path.cwd().resolve()):
        if base is not None and resolved.is_relative_to(base):
            return str(resolved.relative_to(base))
    parts = resolved.parts
    if "site-packages" in parts:
        return "/".join(parts[parts.index("site-packages") + 1:])
    return str(resolved)


def _checkout_root() -> Path | None:
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() and (root / "policies").is_dir() else None


def load_yaml_file(path: str | Path) -> Any:
    """Parse a YAML file safely; errors name the file and line."""
    p = Path(path)
    label = display_path(p)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError("file not found", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"cannot read: {exc}", source=str(path)) from None
    return load_yaml_text(text, label)


def load_yaml_text(text: str, source: str) -> Any:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        return _convert(node, loader, source)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise PolicyError(f"invalid YAML: {exc.problem or exc}", source=f"{source}{line}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"invalid YAML: {exc}", source=source) from None
    finally:
        loader.dispose()


_PLAIN_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:omap"}


def _convert(node: yaml.Node, loader: yaml.SafeLoader, source: str) -> Any:
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in _PLAIN_TAGS:
        raise PolicyError(f"invalid YAML: tag {node.tag!r} is not allowed (plain data only)",
                          source=f"{source}:{node.start_mark.line + 1}")
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        out = SourcedDict()
        out.source, out.line, out.key_lines = source, node.start_mark.line + 1, {}
        for key_node, value_node in node.value:
            key = _convert(key_node, loader, source)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise PolicyError("mapping keys must be plain scalars",
                                  source=f"{source}:{key_node.start_mark.line + 1}")
            if key in out:
                raise PolicyError(f"duplicate key {key!r}", source=f"{source}:{key_node.start_mark.line + 1}")
            out[key] = _convert(value_node, loader, source)
            out.key_lines[key] = key_node.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        out_list = SourcedList()
        out_list.source, out_list.line = source, node.start_mark.line + 1
        out_list.item_lines = []
        for item in node.value:
            out_list.append(_convert(item, loader, source))
            out_list.item_lines.append(item.start_mark.line + 1)
        return out_list
    return loader.construct_object(node, deep=True)
