"""Checkpoint names -> the transformers model's names, by transformers' own conversion mapping.

Checkpoints keep the names their architecture was released with (Mixtral's
`block_sparse_moe.experts.<e>.w1`, per-expert `mlp.experts.<e>.gate_proj`), while
transformers 5 builds other modules (`mlp.experts.gate_up_proj`) and converts the names
as it loads. The loader follows the same conventions by asking transformers for the
model's mapping (`get_model_conversion_mapping`) instead of keeping a copy: renamings
move a module (`.block_sparse_moe.` -> `.mlp.`), converters gather per-expert tensors
into one fused parameter (experts stacked along a new first dim, the sources of one
expert concatenated in the converter's order, as transformers' MergeModulelist +
Concatenate do). The front end (oracle.models) names modules as the checkpoint does;
this module is where those names meet the model's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..checkpoints import CheckpointError


@dataclass
class Gathered:
    """One fused model parameter and the checkpoint tensors it is built from (expert -> sources in order)."""

    target: str
    experts: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    concat_dim: int | None = None

    def names(self) -> list[list[str]]:
        """Checkpoint names per expert (0..E-1), each list in the converter's source order."""
        return [[n for _, n in sorted(self.experts[e])] for e in sorted(self.experts)]


class ModelNames:
    """Where each checkpoint name lands in a transformers model (and which names build fused parameters)."""

    def __init__(self, model: Any):
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming

        transforms = get_model_conversion_mapping(model)
        self.renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
        self.converters = [t for t in transforms if isinstance(t, WeightConverter)]

    def module(self, checkpoint_module: str) -> str:
        """The model's module for a checkpoint module name (renamings only: converters act on tensors)."""
        return _renamed(checkpoint_module + ".weight", self.renamings)[: -len(".weight")]

    def checkpoint(self, model_name: str) -> str:
        """The reverse of `module`: a model name in the checkpoint's words (transformers' renamings undone,
        last first, as its save_pretrained does)."""
        reverse = [r.reverse_transform() for r in reversed(self.renamings)]
        return _renamed(model_name, reverse)

    def expert_templates(self, model_name: str) -> list[str] | None:
        """For a fused expert parameter (`...experts.gate_up_proj`), the per-expert checkpoint names it is
        gathered from, in order, with `{e}` for the expert (Mixtral: `...block_sparse_moe.experts.{e}.w1.weight`,
        then `w3`); None for any other parameter."""
        for converter in self.converters:
            for target in converter._original_target_patterns:
                stem = target.lstrip(".")
                if model_name.endswith(stem) and (model_name == stem or model_name[-len(stem) - 1] == "."):
                    prefix = model_name[: -len(stem)]
                    return [self.checkpoint(prefix + src.lstrip(".")).replace("*", "{e}")
                            for src in converter._original_source_patterns]
        return None

    def tensors(self, names: Iterable[str]) -> tuple[dict[str, str], dict[str, Gathered]]:
        """Checkpoint names -> (model name of each plain tensor, fused parameters gathered from several)."""
        plain: dict[str, str] = {}
        gathered: dict[str, Gathered] = {}
        for name in names:
            renamed = _renamed(name, self.renamings)
            target, pattern = _converted(renamed, self.converters)
            if pattern is None:
                plain[name] = renamed
                continue
            converter = next(c for c in self.converters if pattern in c.source_patterns)
            g = gathered.setdefault(target, Gathered(target, concat_dim=_concat_dim(converter, name)))
            expert = _expert_index(renamed, pattern, name)
            g.experts.setdefault(expert, []).append((converter.source_patterns.index(pattern), name))
        return plain, gathered


def _renamed(name: str, renamings: list[Any]) -> str:
    """name after each of transformers' renamings in turn. Through WeightTransform.rename_source_key, which
    transformers 5.17 already has: its module-level apply_renamings came in 5.21."""
    for renaming in renamings:
        name, _ = renaming.rename_source_key(name)
    return name


def _converted(name: str, converters: list[Any]) -> tuple[str, str | None]:
    """name after the first of transformers' converters that matches it, and that converter's source pattern
    (None: none matched). At most one converter acts on a tensor, as transformers' loader has it."""
    for converter in converters:
        target, pattern = converter.rename_source_key(name)
        if pattern is not None:
            return target, pattern
    return name, None


def _expert_index(renamed: str, pattern: str, original: str) -> int:
    """The `*` of a converter pattern like `.experts.*.w1.weight` in a tensor name."""
    regex = re.escape(pattern).replace(r"\*", r"(\d+)")
    m = re.search(regex, renamed)
    if m is None or not m.groups():
        raise CheckpointError(f"transformers' conversion pattern {pattern!r} has no expert index here",
                              tensor=original)
    return int(m.group(1))


def _concat_dim(converter: Any, name: str) -> int | None:
    """Accept only the conversions the loader reproduces: stack experts, then concatenate their sources."""
    from transformers.core_model_loading import Concatenate, MergeModulelist

    concat = None
    for op in converter.operations:
        if isinstance(op, MergeModulelist) and op.dim == 0:
            continue
        if isinstance(op, Concatenate):
            concat = op.dim
            continue
        raise CheckpointError(f"transformers converts this tensor with {type(op).__name__}, which oracle.hf does "
                              "not reproduce; expected per-expert tensors stacked and concatenated", tensor=name)
    return concat
