"""Objectives (which token counts matter, and how much) and the ranking by measured time.

`decode` weighs the smallest measured M, `prefill` the largest, `balanced` every
measured M equally; `1:0.7,4096:0.3` names Ms and weights. A candidate's score is the
weighted geometric mean of its median times over the objective's Ms (ratios, so a
large M does not drown a small one). Ranking is a pure function: measured candidates
fastest first, then unmeasured ones in policy order, then ones that failed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Iterable, Mapping, Sequence, TypeVar

from .errors import InputError

NAMED = ("decode", "prefill", "balanced")
C = TypeVar("C", bound=Hashable)


@dataclass(frozen=True)
class Objective:
    """A named objective, or explicit (M, weight) pairs."""

    name: str                                   # decode | prefill | balanced | custom
    weights: tuple[tuple[int, float], ...] = ()  # only for custom

    def __str__(self) -> str:
        if self.name != "custom":
            return self.name
        return ",".join(f"{m}:{w:g}" for m, w in self.weights)

    def weights_for(self, measured: Iterable[int]) -> dict[int, float]:
        """The objective's M -> weight among the Ms measured; empty when it names none of them."""
        ms = sorted(set(measured))
        if not ms:
            return {}
        if self.name == "decode":
            return {ms[0]: 1.0}
        if self.name == "prefill":
            return {ms[-1]: 1.0}
        if self.name == "balanced":
            return {m: 1.0 for m in ms}
        return {m: w for m, w in self.weights if m in ms and w > 0}

    def named_ms(self) -> tuple[int, ...]:
        return tuple(m for m, _ in self.weights)


def parse_objective(text: str, *, field: str = "--objective") -> Objective:
    """`decode`, `prefill`, `balanced` or `M:weight,...` (M > 0, weight >= 0, some weight > 0)."""
    value = str(text).strip().lower()
    if value in NAMED:
        return Objective(value)
    pairs: list[tuple[int, float]] = []
    for item in value.split(","):
        m_text, sep, w_text = item.strip().partition(":")
        try:
            m, w = int(m_text), float(w_text) if sep else 1.0
        except ValueError:
            raise InputError(f"{text!r} is not decode, prefill, balanced or M:weight,... (e.g. 1:0.7,4096:0.3)",
                             field=field) from None
        if m <= 0:
            raise InputError(f"M must be a positive token count, got {m}", field=field)
        if w < 0 or not math.isfinite(w):
            raise InputError(f"weights must be finite and >= 0, got {w_text} for M={m}", field=field)
        pairs.append((m, w))
    if not pairs or not any(w > 0 for _, w in pairs):
        raise InputError(f"{text!r} names no M with a positive weight", field=field)
    return Objective("custom", tuple(pairs))


def score(times: Mapping[int, float], weights: Mapping[int, float]) -> float | None:
    """Weighted geometric mean of `times` over `weights`' Ms; None when one is missing."""
    if not weights or any(m not in times for m in weights):
        return None
    if len(weights) == 1:  # one M: the time itself (exactly, not through exp(log))
        return times[next(iter(weights))]
    total = sum(weights.values())
    return math.exp(sum(w * math.log(max(times[m], 1e-9)) for m, w in weights.items()) / total)


def rank(candidates: Sequence[C], times: Mapping[C, Mapping[int, float]], failed: Iterable[C],
         weights: Mapping[int, float]) -> list[tuple[C, float | None]]:
    """Candidates (given in policy order) with their scores, best first.

    Measured at every objective M (and not failed): by score, ties kept in policy order;
    then the unmeasured, in policy order; then the failed, in policy order (score None).
    """
    bad = set(failed)
    measured, unmeasured, broken = [], [], []
    for i, c in enumerate(candidates):
        if c in bad:
            broken.append((c, None))
            continue
        s = score(times.get(c, {}), weights)
        if s is None:
            unmeasured.append((c, None))
        else:
            measured.append((s, i, c))
    measured.sort(key=lambda t: (t[0], t[1]))
    return [(c, s) for s, _, c in measured] + unmeasured + broken
