"""Which checkpoint names stand for each derived module: the one home for that fact.

The oracle names a module the way it reports it (`oracle.models.architectures` and `meta`:
vLLM's fusion of q/k/v and gate/up, one MoE layer per block, the tables' or transformers'
spelling). A checkpoint names the same weights in its writer's words: `ffn` or
`block_sparse_moe` for `mlp`, `attn` for `self_attn`, `w1/w3/w2` for
`gate_proj/up_proj/down_proj`, per-expert tensors `experts.E.*` or stacked 3-D
`experts.gate_up_proj`, one tensor for two projections (`fused_wqa_wkv`), `backbone.` or
`language_model.` in front of `layers.N`. Quantization lists (targets, ignore,
exclude_modules, quantized_layers) and safetensors indexes use the checkpoint's words, so
everything that reads them asks this layer. It imports nothing heavy (no torch).

API::

    names = CheckpointNames.build(modules, index=tensor_module_names, targets=[...], lists=[...])
    names.spelling(part)          the checkpoint's own name for one derived part (a `Module.parts`
                                  entry), e.g. 'layers.3.ffn.experts.0.w1' -> '...experts.0.gate_proj'
    names.aliases(part)           every checkpoint name standing for the part: its spelling first, then
                                  tensors that hold it fused with others ('attn.fused_wqa_wkv', and,
                                  when the index has them, stacked experts 'experts.gate_up_proj')
    names.expert_aliases(part, e) the same for expert e of a MoE part ('experts.0.' -> 'experts.e.')
    names.experts_named(module)   expert indices the lists name for this MoE module (always has 0)
    names.owner(name)             reverse: (Module, part, expert or None) a checkpoint module name
                                  (index tensor name less its last segment) stands for, or None
    names.owner_of_tensor(t)      the same for a tensor name, with its suffix ('weight_packed', ...)
    names.all_names(experts=True) every checkpoint name of every module (coverage matches lists here)
    names.renamed                 {derived shape: checkpoint shape} where they differ (report notes)

How the spelling is chosen: each table below lists the spellings of one fact. Every derived
part name is reduced to its shape (numbers -> '#'); for each shape, every combination of
spellings is instantiated on up to three real parts and scored by (names present in the
safetensors index, quantization-list entries matched, fewest changes). The derived spelling
wins ties, so nothing is renamed without evidence, and a checkpoint whose dense layers say
`mlp` while its MoE layers say `block_sparse_moe` keeps both.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from .matching import NameMatcher
from .model import Module

#: Where decoder layers live: checkpoints put the same `layers.N` under different prefixes.
DECODER_PREFIXES = ("model.", "backbone.", "language_model.model.", "model.language_model.", "transformer.", "")
#: Container segments with several spellings in checkpoints (same module, other words).
SEGMENT_SPELLINGS = (
    ("mlp", "ffn", "block_sparse_moe", "feed_forward"),
    ("self_attn", "attn", "attention"),
    ("shared_experts", "shared_expert"),
    ("embed_tokens", "embed", "tok_embeddings"),
)
#: A gated MLP's projections: transformers' names and the original Mixtral / DeepSeek ones.
PROJECTION_SPELLINGS = (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2"))
#: The output head, a top-level name.
HEAD_SPELLINGS = ("lm_head", "head", "output", "language_model.lm_head")
#: One checkpoint tensor that holds several derived parts (the writer fused them).
CHECKPOINT_FUSED = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "gate_up_proj": ("gate_proj", "up_proj"),
    "w13": ("w1", "w3"),
    "fused_wqa_wkv": ("wq_a", "wkv"),
    "fused_qkv_a_proj": ("q_a_proj", "kv_a_proj_with_mqa"),
}
#: Per-expert tensors in the derived names ('...experts.0.w1'); stacked checkpoints drop the index.
_EXPERT = re.compile(r"^(?P<base>.*\.experts)\.(?P<e>\d+)\.(?P<proj>[^.]+)$")
_NUMBER = re.compile(r"(?<=\.)\d+(?=\.|$)")
_SAMPLES = 3

_SEGMENT_OPTIONS = {s: group for group in SEGMENT_SPELLINGS for s in group}
_PROJECTION_OPTIONS = {s: pair for pair in PROJECTION_SPELLINGS for s in pair}
_FUSED_BY_PART = {p: f for f, parts in CHECKPOINT_FUSED.items() for p in parts}


def shape_of(name: str) -> str:
    """'model.layers.12.mlp.experts.3.w1' -> 'model.layers.#.mlp.experts.#.w1'."""
    return _NUMBER.sub("#", name)


def _fill(shape: str, numbers: list[str]) -> str:
    it = iter(numbers)
    return re.sub(r"#", lambda _: next(it), shape)


def spellings(shape: str) -> list[tuple[str, int]]:
    """Every spelling of a name shape the tables allow, with how many facts each changes."""
    if shape in HEAD_SPELLINGS:
        return [(h, int(h != shape)) for h in HEAD_SPELLINGS]
    prefix = max((p for p in DECODER_PREFIXES if p and shape.startswith(p)), key=len, default="")
    segs = shape[len(prefix):].split(".")
    options: list[list[tuple[str, int]]] = []
    for i, seg in enumerate(segs):
        group = _SEGMENT_OPTIONS.get(seg) or (_PROJECTION_OPTIONS.get(seg) if i == len(segs) - 1 else None)
        options.append([(s, int(s != seg)) for s in group] if group else [(seg, 0)])
    prefixes = [(p, int(p != prefix)) for p in DECODER_PREFIXES] if prefix or segs[0] == "layers" else [("", 0)]
    out = []
    for (p, pc), *rest in itertools.product(prefixes, *options):
        out.append((p + ".".join(s for s, _ in rest), pc + sum(c for _, c in rest)))
    return out


def fused_containers(name: str, *, stacked: bool = True) -> list[str]:
    """Checkpoint names of tensors that hold `name` together with other parts."""
    parent, _, leaf = name.rpartition(".")
    out = [f"{parent}.{_FUSED_BY_PART[leaf]}"] if leaf in _FUSED_BY_PART and parent else []
    m = _EXPERT.match(name)
    if m and stacked:     # transformers 5 stacks experts: experts.gate_up_proj [E, 2I, H], experts.down_proj
        base, proj = m.group("base"), m.group("proj")
        out += [f"{base}.{proj}"] + ([f"{base}.{_FUSED_BY_PART[proj]}"] if proj in _FUSED_BY_PART else [])
    return out


@dataclass
class CheckpointNames:
    """Derived part names -> the checkpoint's names for them (see the module docstring)."""

    modules: list[Module]
    index: frozenset[str] = frozenset()
    _spelled: dict[str, str] = field(default_factory=dict)       # derived shape -> checkpoint shape
    _experts_named: dict[str, tuple[int, ...]] = field(default_factory=dict)
    _owners: dict[str, tuple[Module, str, int | None]] | None = None

    @classmethod
    def build(cls, modules: list[Module], *, index: Iterable[str] = (), targets: Iterable[NameMatcher] = (),
              lists: Iterable[NameMatcher] = ()) -> "CheckpointNames":
        """`targets`: lists that say what IS quantized (targets, quantized_layers), the stronger evidence
        of the checkpoint's spelling; `lists`: the others (ignore, exclude_modules, ...)."""
        names = cls(list(modules), frozenset(index))
        targets = [m for m in targets if m]
        lists = [m for m in lists if m]
        samples: dict[str, list[str]] = {}
        for m in names.modules:
            for part in m.parts:
                bucket = samples.setdefault(shape_of(part), [])
                if len(bucket) < _SAMPLES and part not in bucket:
                    bucket.append(part)
        for shape, parts in samples.items():
            names._spelled[shape] = names._choose(shape, parts, targets, lists)
        names._experts_named = names._find_named_experts(targets + lists)
        return names

    # ---- choosing -----------------------------------------------------------------------
    def _choose(self, shape: str, parts: list[str], targets: list[NameMatcher], lists: list[NameMatcher]) -> str:
        numbers = [_NUMBER.findall(p) for p in parts]
        best, best_score = shape, None
        for candidate, changes in spellings(shape):
            concrete = [_fill(candidate, n) for n in numbers]
            if self.index:
                in_index = sum(1 for c in concrete for a in (c, *fused_containers(c)) if a in self.index)
            else:
                in_index = 0
            probe = [a for c in concrete for a in (c, *fused_containers(c, stacked=False))]
            targeted = sum(len(lst.matched_entries(probe)) for lst in targets)
            matched = sum(len(lst.matched_entries(probe)) for lst in lists)
            score = (in_index, targeted, matched, -changes)
            if best_score is None or score > best_score:
                best, best_score = candidate, score
        return best

    def _find_named_experts(self, lists: list[NameMatcher]) -> dict[str, tuple[int, ...]]:
        """Per MoE module, the expert indices that list entries name ('experts.17.w1'), plus expert 0."""
        wanted: dict[str, set[int]] = {}
        pattern = re.compile(r"experts\.(\d+)\.")
        for lst in lists:
            for entry in lst.entries():
                for m in pattern.finditer(entry):
                    wanted.setdefault(entry[:m.start()], set()).add(int(m.group(1)))
        out: dict[str, tuple[int, ...]] = {}
        for module in self.modules:
            if module.op != "moe" or not wanted:
                continue
            n = int(module.shape.get("num_experts", 1))
            found = {0}
            for part in module.parts:
                m = _EXPERT.match(self.spelling(part))
                if m is None:
                    continue
                head = m.group("base")[:-len("experts")]          # '...layers.3.block_sparse_moe.'
                found |= {e for e in wanted.get(head, ()) if e < n}
            out[module.name] = tuple(sorted(found))
        return out

    @property
    def names_experts(self) -> bool:
        """Whether some list entry names an expert other than expert 0 (then every expert is checked)."""
        return any(len(v) > 1 for v in self._experts_named.values())

    # ---- questions ------------------------------------------------------------------------
    def spelling(self, part: str) -> str:
        """The checkpoint's own name for a derived part name (the derived name when nothing says otherwise)."""
        shape = shape_of(part)
        spelled = self._spelled.get(shape)
        if spelled is None or spelled == shape:
            return part
        return _fill(spelled, _NUMBER.findall(part))

    def aliases(self, part: str) -> tuple[str, ...]:
        """Every checkpoint name standing for `part`: its spelling, then tensors holding it fused."""
        name = self.spelling(part)
        stacked = [c for c in fused_containers(name) if c in self.index]
        fused = [c for c in fused_containers(name, stacked=False)]
        return tuple(dict.fromkeys([name, *fused, *stacked]))

    def expert_aliases(self, part: str, expert: int) -> tuple[str, ...]:
        """`aliases` of expert `expert`'s tensor for a MoE part named with expert 0."""
        m = _EXPERT.match(part)
        if m is None:
            return self.aliases(part)
        return self.aliases(f"{m.group('base')}.{expert}.{m.group('proj')}")

    def experts_named(self, module: Module) -> tuple[int, ...]:
        """Expert indices whose own entries must be checked (expert 0 and every one a list names)."""
        return self._experts_named.get(module.name, (0,))

    def all_names(self, *, experts: bool = True) -> Iterator[str]:
        """Every derived name and checkpoint alias (all experts of MoE modules when `experts`)."""
        for m in self.modules:
            yield m.name
            for part in m.parts:
                yield part
                if experts and m.op == "moe" and _EXPERT.match(part):
                    for e in range(int(m.shape.get("num_experts", 1))):
                        yield from self.expert_aliases(part, e)
                else:
                    yield from self.aliases(part)

    def owner(self, name: str) -> tuple[Module, str, int | None] | None:
        """The (module, derived part, expert) a checkpoint module name stands for, or None."""
        if self._owners is None:
            owners: dict[str, tuple[Module, str, int | None]] = {}
            for m in self.modules:
                for part in m.parts:
                    if m.op == "moe" and _EXPERT.match(part):
                        for e in range(int(m.shape.get("num_experts", 1))):
                            for a in self.expert_aliases(part, e):
                                owners.setdefault(a, (m, part, e))
                    else:
                        for a in self.aliases(part):
                            owners.setdefault(a, (m, part, None))
            self._owners = owners
        return self._owners.get(name)

    def owner_of_tensor(self, tensor: str) -> tuple[Module, str, int | None, str] | None:
        """(module, derived part, expert, tensor suffix) for a safetensors tensor name, or None.

        'layers.5.ffn.experts.17.up_proj.weight_packed' -> (the layer-5 MoE module,
        'layers.5.ffn.experts.0.w3', 17, 'weight_packed').
        """
        module_name, _, suffix = tensor.rpartition(".")
        found = self.owner(module_name)
        return (*found, suffix) if found is not None else None

    @property
    def renamed(self) -> dict[str, str]:
        """{derived shape: checkpoint shape} for every shape the checkpoint spells differently."""
        return {s: c for s, c in self._spelled.items() if s != c}


# ---------------------------------------------------------------- generated documentation
def _facts(shape: str) -> list[str]:
    """The facts (FACT_TABLE rows) that let a checkpoint spell `shape` differently."""
    out = []
    prefix = max((p for p in DECODER_PREFIXES if p and shape.startswith(p)), key=len, default="")
    if prefix or shape.startswith("layers."):
        out.append("prefix")
    segs = shape[len(prefix):].split(".")
    for i, seg in enumerate(segs):
        if seg in _SEGMENT_OPTIONS or (i == len(segs) - 1 and seg in _PROJECTION_OPTIONS):
            out.append(f"`{seg}`")
    if shape in HEAD_SPELLINGS:
        out.append("head")
    return out


def render_facts() -> str:
    """One row per table of this module: the spellings a checkpoint may use for one fact."""
    rows = ["| fact | spellings (any one stands for the others) |", "|---|---|",
            "| prefix (where `layers.N` lives) | " + ", ".join(f"`{p or '(none)'}`" for p in DECODER_PREFIXES) + " |"]
    rows += [f"| container `{g[0]}` | " + ", ".join(f"`{s}`" for s in g) + " |" for g in SEGMENT_SPELLINGS]
    rows += [f"| projection `{a}` | `{a}`, `{b}` |" for a, b in PROJECTION_SPELLINGS]
    rows.append("| head | " + ", ".join(f"`{h}`" for h in HEAD_SPELLINGS) + " |")
    rows += [f"| one tensor `{f}` | holds " + ", ".join(f"`{p}`" for p in parts) + " |"
             for f, parts in CHECKPOINT_FUSED.items()]
    rows.append("| stacked experts | `experts.E.P` is also held by `experts.P` and `experts.<fused P>` "
                "(3-D tensors; used when the safetensors index has them) |")
    return "\n".join(rows)


def render_markdown(models: Iterable[tuple[str, list[Module]]]) -> str:
    """The facts table, then every derived name shape per architecture with the facts that apply to it
    and the checkpoint tensors that may hold it fused (docs/models.md is generated from this)."""
    lines = [render_facts(), "", "| architecture | derived name (N = layer, E = expert) | may be spelled differently "
             "(facts above) | may be stored inside |", "|---|---|---|---|"]
    for arch, modules in models:
        seen: dict[str, str] = {}
        for m in modules:
            for part in m.parts:
                seen.setdefault(_NUMBER.sub("#", part), part)
        for shape, part in seen.items():
            concrete = _NUMBER.sub("0", part)
            shown = re.sub(r"experts\.#\.", "experts.E.", shape).replace("#", "N")
            held = [re.sub(r"experts\.0\.", "experts.E.", c).replace(".0.", ".N.") for c in fused_containers(concrete)]
            lines.append(f"| {arch} | `{shown}` | {', '.join(_facts(shape)) or '-'} | "
                         f"{', '.join(f'`{h}`' for h in held) or '-'} |")
            arch = ""           # the architecture once per block of rows
    return "\n".join(lines)
