"""Coverage: does what a quantization config names exist among the derived modules?

A config names modules in targets, ignore lists, config groups and `quantized_layers`.
When those names do not exist in the derived model (the checkpoint calls its modules
differently, a regex is wrong, the architecture is read generically), every layer is
reported unquantized and the report looks fine: a silent wrong answer. So after the
layers are derived, every entry is matched against every derived module name:

- an entry that matches nothing is listed, with the derived names nearest to it;
- entries that name modules the report deliberately does not list (normalization
  weights, vision towers, multi-token-prediction layers, biases) are counted apart,
  because matching nothing there is expected;
- a config that declares quantization while no derived layer ends up quantized is an
  error (`Coverage.error`; `oracle explain` exits 1);
- any other unmatched entry or unused config group is a warning (`Coverage.warnings`).
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from .matching import NameMatcher
from .model import Module

#: Entries naming these are outside the layers the report lists (matching nothing is expected).
_OUTSIDE = re.compile(r"norm|vision|visual|multi_modal_projector|mm_projector|audio|image|patch_embed|"
                      r"rotary|e_score_correction_bias|(^|[.:*])mtp([.*]|$)|\bbias$", re.IGNORECASE)
_LAYER_INDEX = re.compile(r"layers\.(\d+)\.")
_MAX_LISTED = 20


@dataclass(frozen=True)
class Unmatched:
    """A config entry (or group) that matched no derived module."""

    source: str                   # the file that declares it
    key: str                      # its field, e.g. quantization_config.ignore
    kind: str                     # target | ignore | quantized_layers | config_group | class_target
    entry: str
    nearest: tuple[str, ...] = ()
    in_checkpoint: str | None = None   # a checkpoint module (safetensors index) it does name

    def describe(self) -> str:
        near = f" (nearest derived names: {', '.join(self.nearest)})" if self.nearest else ""
        ckpt = f" [names checkpoint module {self.in_checkpoint}]" if self.in_checkpoint else ""
        return f"{self.key}: {self.entry!r}{near}{ckpt}"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "key": self.key, "kind": self.kind, "entry": self.entry,
                "nearest": list(self.nearest), "in_checkpoint": self.in_checkpoint}


@dataclass
class Coverage:
    """What the quantization config named, against what was derived."""

    declared: bool                          # the checkpoint declares quantization
    quantized_layers: int
    names_from: str                         # where the derived module names came from
    unmatched: list[Unmatched] = field(default_factory=list)
    outside: list[Unmatched] = field(default_factory=list)   # expected: names not listed by design

    @property
    def status(self) -> str:
        if not self.declared:
            return "unquantized"
        if self.quantized_layers == 0:
            return "none"
        return "partial" if self.unmatched else "complete"

    @property
    def error(self) -> str | None:
        """Set when quantization is declared but no layer is quantized (exit 1)."""
        if self.status != "none":
            return None
        listed = "; ".join(u.describe() for u in self.unmatched[:_MAX_LISTED]) or "none"
        more = f" (and {len(self.unmatched) - _MAX_LISTED} more)" if len(self.unmatched) > _MAX_LISTED else ""
        files = ", ".join(dict.fromkeys(u.source for u in self.unmatched)) or "the quantization config"
        return (f"{files}: the checkpoint declares quantization, but no derived layer is quantized (names from "
                f"{self.names_from}); entries that matched no derived module: {listed}{more}")

    @property
    def warnings(self) -> list[str]:
        if self.status != "partial":
            return []
        shown = [u.describe() for u in self.unmatched[:_MAX_LISTED]]
        if len(self.unmatched) > _MAX_LISTED:
            shown.append(f"... and {len(self.unmatched) - _MAX_LISTED} more")
        return [f"partial quantization coverage: {len(self.unmatched)} entr"
                f"{'y' if len(self.unmatched) == 1 else 'ies'} matched no derived module: " + "; ".join(shown)]

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "declared": self.declared, "quantized_layers": self.quantized_layers,
                "names_from": self.names_from, "error": self.error, "warnings": self.warnings,
                "unmatched": [u.to_dict() for u in self.unmatched],
                "outside_listed_layers": [u.to_dict() for u in self.outside]}


def check_coverage(scheme: Any, modules: list[Module], quantized: int, *, names_from: str,
                   checkpoint: Iterable[str] = (), blocks: int | None = None) -> Coverage:
    """Match every entry of `scheme`'s name lists against the derived modules' names.

    `checkpoint` are the checkpoint's own module names (a safetensors index): an entry that
    matches only those is still unmatched (no derived layer carries it), and the report shows
    the checkpoint module it names beside the nearest derived names.
    """
    cov = Coverage(declared=scheme.dialect != "none", quantized_layers=quantized, names_from=names_from)
    if not cov.declared:
        return cov
    names = sorted({n for m in modules for n in (m.name, *m.parts)})
    name_set = set(names)
    candidates = _representatives(names)
    for lst in scheme.name_lists():
        entries = lst.matcher.entries()
        if not entries:
            continue
        hit = lst.matcher.matched_entries(names)
        for entry in entries:
            if entry in hit:
                continue
            if _is_outside(entry, blocks):
                cov.outside.append(Unmatched(lst.source, lst.key, lst.kind, entry))
                continue
            cov.unmatched.append(Unmatched(lst.source, lst.key, lst.kind, entry,
                                           _nearest(entry, candidates, name_set), _in_checkpoint(entry, checkpoint)))
    ops = {m.op for m in modules}
    for key, cls in getattr(scheme, "class_targets", lambda: [])():
        wanted = {"Linear": {"linear", "moe"}, "Embedding": {"embedding"}}.get(cls, set())
        if not wanted & ops:
            cov.unmatched.append(Unmatched(scheme.source, key, "class_target", cls,
                                           () if wanted else ("Linear", "Embedding")))
    for key, what in scheme.unused_groups():
        cov.unmatched.append(Unmatched(scheme.source, key, "config_group", f"{what} quantizes no derived layer"))
    return cov


def _in_checkpoint(entry: str, checkpoint: Iterable[str]) -> str | None:
    one = NameMatcher([entry])
    return next((n for n in checkpoint if one.match(n) is not None), None)


def _representatives(names: list[str]) -> list[str]:
    """One name per shape of name (layer index written N), so suggestions stay short and fast."""
    seen: dict[str, str] = {}
    for n in names:
        seen.setdefault(_LAYER_INDEX.sub("layers.N.", n), n)
    return sorted(seen.values())


def _nearest(entry: str, candidates: list[str], names: set[str]) -> tuple[str, ...]:
    """The derived names closest to `entry`, shown at the entry's own layer index when it has one."""
    text = entry[3:] if entry.startswith("re:") else entry
    text = re.sub(r"[\\^$()|?+*\[\]{}]", "", text).lstrip(".")
    layer = _LAYER_INDEX.search(text)
    if layer:
        at_layer = (_LAYER_INDEX.sub(f"layers.{layer.group(1)}.", c, count=1) for c in candidates)
        candidates = sorted({c for c in at_layer if c in names}) or candidates
    return tuple(difflib.get_close_matches(text, candidates, n=3, cutoff=0.3))


def _is_outside(entry: str, blocks: int | None) -> bool:
    if _OUTSIDE.search(entry):
        return True
    if blocks is not None:
        m = _LAYER_INDEX.search(entry)
        if m and int(m.group(1)) >= blocks:      # a layer past the decoder: MTP
            return True
    return False
