"""Coverage: does what a quantization config names exist among the derived modules?

A config names modules in targets, ignore lists, config groups and `quantized_layers`.
When those names do not exist in the model (the checkpoint calls its modules in words
the name tables do not know, a regex is wrong, the architecture is read generically),
layers are reported unquantized and the report looks fine: a silent wrong answer. So
after the layers are derived, every entry is matched against every name that stands for
a derived module (`oracle.models.checkpoint_names`: derived names, the checkpoint's own
spellings, fused tensors, every expert):

- an entry that matches nothing is kept, with the derived names nearest to it;
- entries naming what the report deliberately does not list (normalization weights,
  vision towers, multi-token-prediction layers, biases) are counted apart: matching
  nothing there is expected;
- **errors** (`Coverage.error`; `oracle explain` exits 1): the checkpoint declares
  quantization but no derived layer is quantized; or a config group quantizes no derived
  module, or a `quantized_layers` entry names none, unless the user accepts partial
  coverage (`--accept-partial-coverage`), which turns those into warnings;
- **warnings** (`Coverage.warnings`): every other unmatched entry (ignore lists, single
  targets of a group that did quantize something, class targets).

Messages are bounded whatever the config's size: one line per class of entry (its file
and key) with the count and at most `EXAMPLES` examples, each cut to `EXAMPLE_CHARS`.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from .matching import NameMatcher

#: Entries naming these are outside the layers the report lists (matching nothing is expected).
_OUTSIDE = re.compile(r"norm|vision|visual|multi_modal_projector|mm_projector|audio|image|patch_embed|patch_merge|"
                      r"rotary|e_score_correction_bias|(^|[.:*])mtp([.*]|$)|\bbias$", re.IGNORECASE)
_LAYER_INDEX = re.compile(r"layers\.(\d+)\.")
#: Unmatched kinds that make the report wrong unless partial coverage is accepted.
BLOCKING_KINDS = frozenset({"config_group", "quantized_layers"})
EXAMPLES = 3
EXAMPLE_CHARS = 100


def _cut(text: str, limit: int = EXAMPLE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


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
        near = f" (nearest derived names: {', '.join(_cut(n) for n in self.nearest)})" if self.nearest else ""
        ckpt = f" [names checkpoint module {_cut(self.in_checkpoint)}]" if self.in_checkpoint else ""
        return f"'{_cut(self.entry)}'{near}{ckpt}"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "key": self.key, "kind": self.kind, "entry": self.entry,
                "nearest": list(self.nearest), "in_checkpoint": self.in_checkpoint}


@dataclass
class Coverage:
    """What the quantization config named, against what was derived."""

    declared: bool                          # the checkpoint declares quantization
    quantized_layers: int
    names_from: str                         # where the derived module names came from
    accept_partial: bool = False            # blocking entries are warnings (--accept-partial-coverage)
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
    def blocking(self) -> list[Unmatched]:
        """Unmatched config groups and quantized_layers entries (an error unless partial coverage is accepted)."""
        return [u for u in self.unmatched if u.kind in BLOCKING_KINDS]

    @property
    def error(self) -> str | None:
        """Set when the report would be wrong: nothing quantized, or a group/quantized_layers entry unused (exit 1)."""
        if self.status == "none":
            files = ", ".join(dict.fromkeys(u.source for u in self.unmatched)) or "the quantization config"
            return (f"{files}: the checkpoint declares quantization, but no derived layer is quantized (names from "
                    f"{self.names_from}); entries that matched no derived module: {summarize(self.unmatched)}")
        if self.blocking and not self.accept_partial:
            files = ", ".join(dict.fromkeys(u.source for u in self.blocking))
            return (f"{files}: quantization declared for modules this model does not have (names from "
                    f"{self.names_from}): {summarize(self.blocking)}; the report would show those weights "
                    "unquantized. Pass --accept-partial-coverage to accept that")
        return None

    @property
    def warnings(self) -> list[str]:
        if self.status != "partial":
            return []
        shown = [u for u in self.unmatched if u.kind not in BLOCKING_KINDS or self.accept_partial]
        if not shown:
            return []
        return [f"partial quantization coverage: {len(shown)} entr{'y' if len(shown) == 1 else 'ies'} matched "
                f"no derived module: {summarize(shown)}"]

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "declared": self.declared, "quantized_layers": self.quantized_layers,
                "names_from": self.names_from, "accept_partial": self.accept_partial, "error": self.error,
                "warnings": self.warnings, "unmatched_count": len(self.unmatched),
                "unmatched": [u.to_dict() for u in _examples(self.unmatched)],
                "outside_listed_layers_count": len(self.outside),
                "outside_listed_layers": [u.to_dict() for u in _examples(self.outside)]}


def _classes(items: list[Unmatched]) -> dict[tuple[str, str], list[Unmatched]]:
    out: dict[tuple[str, str], list[Unmatched]] = {}
    for u in items:
        out.setdefault((u.key, u.kind), []).append(u)
    return out


def _examples(items: list[Unmatched]) -> list[Unmatched]:
    """At most EXAMPLES entries of each class (file key and kind), in order."""
    return [u for group in _classes(items).values() for u in group[:EXAMPLES]]


def summarize(items: list[Unmatched]) -> str:
    """One clause per class: 'KEY (KIND): COUNT, e.g. ...'; its size does not grow with the count."""
    if not items:
        return "none"
    parts = []
    for (key, kind), group in _classes(items).items():
        examples = "; ".join(u.describe() for u in group[:EXAMPLES])
        more = f" (and {len(group) - EXAMPLES} more)" if len(group) > EXAMPLES else ""
        parts.append(f"{_cut(key, 80)} ({kind}): {len(group)}, e.g. {examples}{more}")
    return " | ".join(parts)


def check_coverage(scheme: Any, names: Any, quantized: int, *, names_from: str,
                   checkpoint: Iterable[str] = (), blocks: int | None = None,
                   accept_partial: bool = False) -> Coverage:
    """Match every entry of `scheme`'s name lists against every name standing for a derived module.

    `names` is the model's `CheckpointNames`. `checkpoint` are the checkpoint's own module names
    (a safetensors index): an entry that matches only those is still unmatched (no derived
    layer carries it), and the report shows the checkpoint module it names beside the nearest
    derived names. Nearest names are worked out for the examples shown only.
    """
    cov = Coverage(declared=scheme.dialect != "none", quantized_layers=quantized, names_from=names_from,
                   accept_partial=accept_partial)
    if not cov.declared:
        return cov
    all_names = sorted(set(names.all_names(experts=names.names_experts)))
    derived = sorted({n for m in names.modules for n in (m.name, *m.parts)})
    candidates = _representatives(derived)
    known = set(derived)
    checkpoint = list(checkpoint)
    shown: dict[tuple[str, str], int] = {}
    for lst in scheme.name_lists():
        entries = lst.matcher.entries()
        if not entries:
            continue
        hit = lst.matcher.matched_entries(all_names)
        for entry in entries:
            if entry in hit:
                continue
            if _is_outside(entry, blocks):
                cov.outside.append(Unmatched(lst.source, lst.key, lst.kind, entry))
                continue
            n = shown[(lst.key, lst.kind)] = shown.get((lst.key, lst.kind), 0) + 1
            if n <= EXAMPLES:
                cov.unmatched.append(Unmatched(lst.source, lst.key, lst.kind, entry, _nearest(entry, candidates, known),
                                               _in_checkpoint(entry, checkpoint, lst.matcher.rule)))
            else:
                cov.unmatched.append(Unmatched(lst.source, lst.key, lst.kind, entry))
    ops = {m.op for m in names.modules}
    for key, cls in getattr(scheme, "class_targets", lambda: [])():
        wanted = {"Linear": {"linear", "moe"}, "Embedding": {"embedding"}}.get(cls, set())
        if not wanted & ops:
            cov.unmatched.append(Unmatched(scheme.source, key, "class_target", cls,
                                           () if wanted else ("Linear", "Embedding")))
    for key, what in scheme.unused_groups():
        cov.unmatched.append(Unmatched(scheme.source, key, "config_group", f"{what} quantizes no derived layer"))
    return cov


def _in_checkpoint(entry: str, checkpoint: list[str], rule: str) -> str | None:
    if not checkpoint:
        return None
    one = NameMatcher([entry], rule=rule)
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
