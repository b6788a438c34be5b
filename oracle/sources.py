"""YAML loading that remembers where every value came from.

Uses `yaml.SafeLoader` to compose the node tree (no Python objects, no tags beyond the
safe set) and converts it by hand so that each mapping and list knows the line of each
of its entries. `explain` relies on this to say *which line* rejected a candidate.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import InputError, PolicyError


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


#: Limits of one YAML document (stated in docs/user-guide.md, "Limits").
MAX_YAML_BYTES = 1 << 20        # 1 MiB: policy and kernels files are a few KiB
MAX_YAML_DEPTH = 64             # nesting of mappings and lists
MAX_YAML_VALUES = 100_000       # values after aliases are counted out (a "billion laughs" is refused)


def read_bounded_text(path: Path, limit: int, what: str, error: type[InputError], label: str | None = None) -> str:
    """A regular UTF-8 file of at most `limit` bytes (oracle.safeio); every way that fails is one `error`."""
    from .safeio import read_text
    return read_text(path, limit, what=what, error=error, label=label)


def load_yaml_file(path: str | Path) -> Any:
    """Parse a YAML file safely; errors name the file and line."""
    p = Path(path)
    label = display_path(p)
    return load_yaml_text(read_bounded_text(p, MAX_YAML_BYTES, "a policy or kernels file", PolicyError, label), label)


def load_yaml_text(text: str, source: str) -> Any:
    """Parse YAML text into Sourced containers.

    Aliases keep PyYAML's meaning (every `*a` is the same object as `&a`), are converted
    once, and are counted out against `MAX_YAML_VALUES` without being expanded, so a
    "billion laughs" document is refused in milliseconds. A self-referencing alias,
    nesting deeper than `MAX_YAML_DEPTH` and characters YAML forbids (NUL) are errors.
    """
    if len(text) > MAX_YAML_BYTES:
        raise PolicyError(f"document is larger than {MAX_YAML_BYTES} characters", source=source)
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # checks for unprintable characters such as NUL
        node = loader.get_single_node()
        if node is None:
            return None
        return _Converter(loader, source).convert(node, 0)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise PolicyError(f"invalid YAML: {exc.problem or exc}", source=f"{source}{line}") from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        char = chr(exc.character) if isinstance(exc.character, int) else exc.character
        raise PolicyError(f"invalid YAML: unacceptable character {char!r} "
                          f"(position {exc.position}); YAML allows printable characters only",
                          source=f"{source}:{line}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"invalid YAML: {exc}", source=source) from None
    except RecursionError:
        raise PolicyError(f"invalid YAML: nested deeper than {MAX_YAML_DEPTH} levels", source=source) from None
    finally:
        if loader is not None:
            loader.dispose()


_PLAIN_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:omap"}
_IN_PROGRESS = object()


class _Converter:
    """Node tree -> Sourced containers, one conversion per node (aliases share the result)."""

    def __init__(self, loader: yaml.SafeLoader, source: str):
        self.loader = loader
        self.source = source
        self.done: dict[int, tuple[Any, int]] = {}   # id(node) -> (value, values it stands for)
        self.total = 0

    def at(self, node: yaml.Node) -> str:
        return f"{self.source}:{node.start_mark.line + 1}"

    def convert(self, node: yaml.Node, depth: int) -> Any:
        return self._convert(node, depth)[0]

    def _convert(self, node: yaml.Node, depth: int) -> tuple[Any, int]:
        found = self.done.get(id(node))
        if found is not None:
            if found[0] is _IN_PROGRESS:
                raise PolicyError("invalid YAML: an alias refers to a node that contains it (recursive data)",
                                  source=self.at(node))
            self._count(found[1], node)
            return found
        if depth > MAX_YAML_DEPTH:
            raise PolicyError(f"invalid YAML: nested deeper than {MAX_YAML_DEPTH} levels", source=self.at(node))
        if not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            value = self.loader.construct_object(node, deep=True)
            self._count(1, node)
            return value, 1
        if node.tag not in _PLAIN_TAGS:
            raise PolicyError(f"invalid YAML: tag {node.tag!r} is not allowed (plain data only)", source=self.at(node))
        self.done[id(node)] = (_IN_PROGRESS, 0)
        before = self.total
        if isinstance(node, yaml.MappingNode):
            value = self._mapping(node, depth)
        else:
            value = self._sequence(node, depth)
        result = (value, self.total - before + 1)
        self._count(1, node)
        self.done[id(node)] = result
        return result

    def _count(self, values: int, node: yaml.Node) -> None:
        self.total += values
        if self.total > MAX_YAML_VALUES:
            raise PolicyError(f"invalid YAML: the document stands for more than {MAX_YAML_VALUES} values once "
                              "aliases are counted out (an alias bomb?)", source=self.at(node))

    def _mapping(self, node: yaml.MappingNode, depth: int) -> "SourcedDict":
        self.loader.flatten_mapping(node)
        out = SourcedDict()
        out.source, out.line, out.key_lines = self.source, node.start_mark.line + 1, {}
        for key_node, value_node in node.value:
            key = self.convert(key_node, depth + 1)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise PolicyError("mapping keys must be plain scalars", source=self.at(key_node))
            if key in out:
                raise PolicyError(f"duplicate key {key!r}", source=self.at(key_node))
            out[key] = self.convert(value_node, depth + 1)
            out.key_lines[key] = key_node.start_mark.line + 1
        return out

    def _sequence(self, node: yaml.SequenceNode, depth: int) -> "SourcedList":
        out = SourcedList()
        out.source, out.line, out.item_lines = self.source, node.start_mark.line + 1, []
        for item in node.value:
            out.append(self.convert(item, depth + 1))
            out.item_lines.append(item.start_mark.line + 1)
        return out
