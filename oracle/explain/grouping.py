"""Layers that read as one: same role, same layer signature, same decision ("layers 3-60 (x58)")."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Group:
    """Layers of one role with the same layer signature and decision."""

    role: str
    blocks: list[int | None]
    rows: list[Any]                      # ModelLayer
    decision: Any                        # Decision

    @property
    def first(self) -> Any:
        return self.rows[0]

    @property
    def label(self) -> str:
        return block_label(self.blocks)

    @property
    def count(self) -> int:
        return len(self.rows)


def group_layers(rows: list[Any], decisions: list[Any]) -> list[Group]:
    """Group by (role, layer signature, decision, why unquantized), in order of first appearance."""
    groups: dict[tuple, Group] = {}
    for row, decision in zip(rows, decisions):
        key = (row.role, row.layer.signature, id(decision), generic_note(row), tuple(decision.notes))
        group = groups.get(key)
        if group is None:
            groups[key] = Group(row.role, [row.block], [row], decision)
        else:
            group.blocks.append(row.block)
            group.rows.append(row)
    return list(groups.values())


def generic_note(row: Any) -> str:
    """Why a layer is unquantized, with its own layer index written N, so per-layer entries group."""
    note = row.quant_note
    if note and row.block is not None:
        note = note.replace(f".layers.{row.block}.", ".layers.N.")
    return note


def block_label(blocks: list[int | None]) -> str:
    """[3, 4, ..., 60] -> 'layers 3-60 (x58)'; [None] -> '' (model-level layers)."""
    indices = sorted(b for b in blocks if b is not None)
    if not indices:
        return ""
    if len(indices) == 1:
        return f"layer {indices[0]}"
    step = indices[1] - indices[0]
    if len(indices) > 2 and step > 1 and all(b - a == step for a, b in zip(indices, indices[1:])):
        return f"layers {indices[0]}-{indices[-1]} step {step} (x{len(indices)})"
    runs: list[str] = []
    start = prev = indices[0]
    for b in indices[1:] + [None]:  # type: ignore[list-item]
        if b is not None and b == prev + 1:
            prev = b
            continue
        runs.append(f"{start}-{prev}" if prev > start else f"{start}")
        if b is not None:
            start = prev = b
    return f"layers {','.join(runs)} (x{len(indices)})"

