"""Matching checkpoint module names against the name lists of quantization configs.

Checkpoints name modules in `ignore`, `modules_to_not_convert`, `exclude_modules`,
`targets` and `quantized_layers`, and each writer's library reads its own lists by its
own rule. A `NameMatcher` is built with the rule of the library that reads the list:

- ``"transformers"`` (modules_to_not_convert, ignored_layers, GPTQ `dynamic` skips), as
  transformers' `quantizers_utils.should_convert_module` reads them: an entry matches a
  name when it equals it, names an enclosing module on a dot boundary
  ("model.layers.0.self_attn" matches "model.layers.0.self_attn.q_proj", but "mlp.gate"
  never matches "mlp.gate_proj"), is a dotted suffix of it ("lm_head" matches
  "language_model.lm_head"), or contains `*`/`?` and matches the name or an enclosing
  module as a glob; `re:` entries match the start of the name as a regular expression.
- ``"compressed-tensors"`` (targets and ignore), as compressed-tensors'
  `utils.match.match_name` reads them: an entry starting with `re:` matches when the
  rest matches the start of the name (`re.match`); any other entry matches only the
  exact module name (a container's name does not reach its children).
- ``"modelopt"`` (exclude_modules), as vLLM's ModelOpt configs read them
  (`fnmatch(prefix, pattern)`: "modelopt exclude modules are not simple strings, they are
  wildcards"): the whole name must match the entry as a shell wildcard; an entry without
  wildcards matches only the exact name.
- ``"modelopt-layers"`` (quantized_layers keys): a key names a module exactly, or the
  module enclosing it (`layers.3.ffn.experts` covers every expert tensor under it).
"""
from __future__ import annotations

import fnmatch
import re
from typing import Iterable

from ..errors import InputError
from ..saferegex import compile_user_pattern

_LAYER = re.compile(r"layers\.(\d+)\.")
_WILDCARD = re.compile(r"[*?\[]")

#: rule -> (entries may name an enclosing module, dotted suffixes match, `*`/`?` are wildcards, `re:` is a regex)
RULES = {
    "transformers": (True, True, True, True),
    "compressed-tensors": (False, False, False, True),
    "modelopt": (False, False, True, False),
    "modelopt-layers": (True, False, False, False),
}


def _layer_key(text: str) -> str | None:
    """The first decoder-layer index in `text` ('...layers.7.' -> '7'), used to bucket globs."""
    m = _LAYER.search(text)
    return m.group(1) if m else None


class NameMatcher:
    """Compiled name list read by one library's rule; `match(name)` returns the entry that matched, or None."""

    def __init__(self, entries: Iterable[str], *, source: str = "", field: str = "", rule: str = "transformers"):
        if rule not in RULES:
            raise ValueError(f"unknown matching rule {rule!r}; expected one of {', '.join(RULES)}")
        self.rule = rule
        self.enclosing, self.suffixes, wildcards, regexes = RULES[rule]
        self.exact: dict[str, str] = {}
        self.globs: list[tuple[re.Pattern, str]] = []
        self._glob_buckets: dict[str | None, list[tuple[re.Pattern, str]]] = {}
        self.regexes: list[tuple[re.Pattern, str]] = []
        for entry in entries:
            if regexes and entry.startswith("re:"):
                compiled = compile_user_pattern(entry[3:], lambda message: InputError(
                    message, source=source or None, field=field or None), entry)   # refuses patterns that could hang
                self.regexes.append((compiled, entry))
            elif wildcards and _WILDCARD.search(entry):
                self.globs.append((re.compile(fnmatch.translate(entry)), entry))
                # a glob can only match names that start with its literal head; bucket by its layer index
                head = entry[:_WILDCARD.search(entry).start()]
                self._glob_buckets.setdefault(_layer_key(head), []).append(self.globs[-1])
            else:
                self.exact.setdefault(entry, entry)
        self._cache: dict[str, str | None] = {}

    def __bool__(self) -> bool:
        return bool(self.exact or self.globs or self.regexes)

    def __len__(self) -> int:
        return len(self.exact) + len(self.globs) + len(self.regexes)

    def match(self, name: str) -> str | None:
        try:
            return self._cache[name]
        except KeyError:
            found = self._cache[name] = self._match(name)
            return found

    def match_any(self, names: Iterable[str]) -> str | None:
        """The first entry that matches any of `names` (a module's checkpoint aliases), or None."""
        for name in names:
            hit = self.match(name)
            if hit is not None:
                return hit
        return None

    def _globs_for(self, name: str) -> list[tuple[re.Pattern, str]]:
        """The globs that can match `name` (or an enclosing module): those of its layer and unindexed ones."""
        if len(self._glob_buckets) <= 1:
            return self.globs
        key = _layer_key(name)
        return self._glob_buckets.get(key, []) + (self._glob_buckets.get(None, []) if key is not None else [])

    def entries(self) -> list[str]:
        """Every entry, in the order given."""
        return [*self.exact, *(e for _, e in self.globs), *(e for _, e in self.regexes)]

    def _heads(self, parts: list[str]) -> list[str]:
        """The names an entry may equal: the name, and its enclosing modules when the rule allows."""
        if not self.enclosing:
            return [".".join(parts)]
        return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]

    def _tails(self, parts: list[str]) -> list[str]:
        return [".".join(parts[i:]) for i in range(1, len(parts))] if self.suffixes else []

    def matched_entries(self, names: Iterable[str]) -> set[str]:
        """The entries that match at least one of `names` (not only the first hit per name)."""
        found: set[str] = set()
        pending_globs = list(self.globs)
        pending_regexes = list(self.regexes)
        total = len(self)
        for name in names:
            if len(found) == total:
                break
            parts = name.split(".")
            heads = self._heads(parts)
            if self.exact:
                found.update(self.exact[h] for h in (*heads, *self._tails(parts)) if h in self.exact)
            if pending_globs:
                found |= {e for pat, e in self._globs_for(name)
                          if e not in found and any(pat.match(p) for p in heads)}
                pending_globs = [(pat, e) for pat, e in pending_globs if e not in found]
            if pending_regexes:
                hits = {e for pat, e in pending_regexes if pat.match(name)}
                found |= hits
                pending_regexes = [(pat, e) for pat, e in pending_regexes if e not in hits]
        return found

    def _match(self, name: str) -> str | None:
        parts = name.split(".")
        heads = self._heads(parts)
        for head in heads:
            if head in self.exact:
                return self.exact[head]
        for tail in self._tails(parts):
            if tail in self.exact:
                return self.exact[tail]
        for pattern, entry in self._globs_for(name):
            if any(pattern.match(p) for p in heads):
                return entry
        for pattern, entry in self.regexes:
            if pattern.match(name):
                return entry
        return None
