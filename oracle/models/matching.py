"""Matching checkpoint module names against the name lists of quantization configs.

Checkpoints name modules in `ignore`, `modules_to_not_convert`, `exclude_modules`,
`targets` and `quantized_layers`. One documented rule serves all of them. An entry
matches a module name when

- it equals the name;
- it names an enclosing module, on a dot boundary ("model.layers.0.self_attn"
  matches "model.layers.0.self_attn.q_proj", but "mlp.gate" never matches "mlp.gate_proj");
- it is a dotted suffix of the name ("lm_head" matches "language_model.lm_head"),
  because multimodal checkpoints prefix the text model's names;
- it contains `*` or `?` and matches the name, or an enclosing module, as a glob;
- it starts with `re:` and the rest matches the start of the name as a Python
  regular expression (`re.match`), as compressed-tensors defines it.
"""
from __future__ import annotations

import fnmatch
import re
from typing import Iterable

from ..errors import InputError
from ..saferegex import compile_user_pattern

_LAYER = re.compile(r"layers\.(\d+)\.")
_WILDCARD = re.compile(r"[*?\[]")


def _layer_key(text: str) -> str | None:
    """The first decoder-layer index in `text` ('...layers.7.' -> '7'), used to bucket globs."""
    m = _LAYER.search(text)
    return m.group(1) if m else None


class NameMatcher:
    """Compiled name list; `match(name)` returns the entry that matched, or None."""

    def __init__(self, entries: Iterable[str], *, source: str = "", field: str = ""):
        self.exact: dict[str, str] = {}
        self.globs: list[tuple[re.Pattern, str]] = []
        self._glob_buckets: dict[str | None, list[tuple[re.Pattern, str]]] = {}
        self.regexes: list[tuple[re.Pattern, str]] = []
        for entry in entries:
            if entry.startswith("re:"):
                compiled = compile_user_pattern(entry[3:], lambda message: InputError(
                    message, source=source or None, field=field or None), entry)   # refuses patterns that could hang
                self.regexes.append((compiled, entry))
            elif "*" in entry or "?" in entry:
                self.globs.append((re.compile(fnmatch.translate(entry)), entry))
                # a glob can only match names that start with its literal head; bucket by its layer index
                head = entry[:_WILDCARD.search(entry).start()]
                self._glob_buckets.setdefault(_layer_key(head), []).append(self.globs[-1])
            else:
                self.exact.setdefault(entry, entry)
        self._cache: dict[str, str | None] = {}

    def __bool__(self) -> bool:
        return bool(self.exact or self.globs or self.regexes)

    def match(self, name: str) -> str | None:
        try:
            return self._cache[name]
        except KeyError:
            found = self._cache[name] = self._match(name)
            return found

    def _globs_for(self, name: str) -> list[tuple[re.Pattern, str]]:
        """The globs that can match `name` (or an enclosing module): those of its layer and unindexed ones."""
        if len(self._glob_buckets) <= 1:
            return self.globs
        key = _layer_key(name)
        return self._glob_buckets.get(key, []) + (self._glob_buckets.get(None, []) if key is not None else [])

    def entries(self) -> list[str]:
        """Every entry, in the order given."""
        return [*self.exact, *(e for _, e in self.globs), *(e for _, e in self.regexes)]

    def matched_entries(self, names: Iterable[str]) -> set[str]:
        """The entries that match at least one of `names` (not only the first hit per name)."""
        found: set[str] = set()
        pending_globs = list(self.globs)
        pending_regexes = list(self.regexes)
        total = len(self.exact) + len(self.globs) + len(self.regexes)
        for name in names:
            if len(found) == total:
                break
            parts = name.split(".")
            if self.exact:
                for i in range(len(parts), 0, -1):            # the name and its enclosing modules
                    hit = self.exact.get(".".join(parts[:i]))
                    if hit is not None:
                        found.add(hit)
                for i in range(1, len(parts)):                 # its dotted suffixes
                    hit = self.exact.get(".".join(parts[i:]))
                    if hit is not None:
                        found.add(hit)
            if pending_globs:
                prefixes = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
                found |= {e for pat, e in self._globs_for(name)
                          if e not in found and any(pat.match(p) for p in prefixes)}
                pending_globs = [(pat, e) for pat, e in pending_globs if e not in found]
            if pending_regexes:
                hits = {e for pat, e in pending_regexes if pat.match(name)}
                found |= hits
                pending_regexes = [(pat, e) for pat, e in pending_regexes if e not in hits]
        return found

    def _match(self, name: str) -> str | None:
        parts = name.split(".")
        # the name and each enclosing module ("a.b.c", "a.b", "a")
        prefixes = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
        for prefix in prefixes:
            if prefix in self.exact:
                return self.exact[prefix]
        # dotted suffixes ("b.c", "c") of the name
        for i in range(1, len(parts)):
            suffix = ".".join(parts[i:])
            if suffix in self.exact:
                return self.exact[suffix]
        for pattern, entry in self._globs_for(name):
            if any(pattern.match(p) for p in prefixes):
                return entry
        for pattern, entry in self.regexes:
            if pattern.match(name):
                return entry
        return None
