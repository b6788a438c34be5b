"""Step 4 of selection: among the candidates that pass, the fastest measured one wins.

`order` takes the passing (kernel, mode) pairs in policy order and the layer's figures,
ranks them with `objective.rank`, and says for each why it won or lost (slower, unmeasured,
failed, testing-only); the engine writes that into the trace. When no candidate is
measured the policy order stands. Pure: figures in, an order out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .objective import rank
from .tuning.measurements import CandidateTimes, MeasurementSet

MEASUREMENTS_RULE = "measurements"


def timing_text(timings: Sequence[tuple[int, float, str]]) -> str:
    """'0.095 ms @M=1 (graph), 1.21 ms @M=4096 (graph)'."""
    return ", ".join(f"{ms:.3g} ms @M={m} ({how})" for m, ms, how in timings)


def measured_summary(decision: object) -> str | None:
    """'torch.linear.fp8_block 0.095 ms @M=1 (graph) — fastest measured of 3 (objective decode)'."""
    if getattr(decision, "selected_by", None) != "measured":
        return None
    best = next((c for c in decision.candidates if c.verdict == "selected"), None)  # type: ignore[attr-defined]
    if best is None:
        return None
    return f"{best.kernel} {best.reason}"


@dataclass(frozen=True)
class Order:
    """How measurements order the passing candidates (given in policy order).

    `winner` indexes them; `by_measurement` is False when nothing was measured (the policy
    order stands). `verdicts` holds, per passing candidate, the (reason, rule) the trace shows
    for it when `by_measurement`: the winner's "fastest measured" line, every other one's
    reason for losing.
    """

    winner: int
    by_measurement: bool
    verdicts: tuple[tuple[str, str], ...] = ()
    #: when nothing ranks by measurement although figures exist (an objective at unmeasured Ms): why
    note: str | None = None


def order(passing: Sequence[tuple[Any, Any]], table: dict[tuple, CandidateTimes], mset: MeasurementSet) -> Order:
    """Rank the passing (kernel, mode) pairs by their figures in `table` at the set's objective."""
    keys = [(spec.name, mode.name, mode.activation) for spec, mode in passing]
    times: dict[tuple, dict[int, float]] = {}
    failed: list[tuple] = []
    held_back: set[tuple] = set()
    for key, (spec, _mode) in zip(keys, passing):
        found = table.get(key)
        if found is None:
            continue
        if found.error is not None:
            failed.append(key)
        elif (spec.testing_only or found.testing_only) and not mset.allow_testing_only:
            held_back.add(key)
        else:
            times[key] = found.times
    measured_ms = {m for t in times.values() for m in t}
    weights = mset.objective.weights_for(measured_ms)
    ranked = rank(keys, times, failed, weights)
    winner_key, winner_score = ranked[0]
    winner = keys.index(winner_key)
    if winner_score is None:
        note = None
        if times and not weights:  # measured, but not where the objective looks: say so, never silently
            note = (f"measurements: policy order, as objective {mset.objective} names no token count these "
                    f"candidates were measured at (M={','.join(map(str, sorted(measured_ms)))})")
        return Order(winner, False, note=note)
    scores = {k: s for k, s in ranked if s is not None}
    objective = f"objective {mset.objective}" + (f" over M={','.join(map(str, sorted(weights)))}"
                                                 if mset.objective.name in ("balanced", "custom") else "")
    rule = ", ".join(mset.names) or MEASUREMENTS_RULE
    verdicts = []
    for key in keys:
        if key == winner_key:
            shown = [t for t in table[key].timings() if t[0] in weights]
            why = f"{timing_text(shown)} \u2014 fastest measured of {len(scores)} ({objective})"
        elif key in scores:
            why = (f"measured slower: {scores[key]:.3g} ms against {winner_score:.3g} ms for {winner_key[0]} "
                   f"({objective})")
        elif key in failed:
            why = f"failed during tuning, never chosen by measurement: {table[key].error}"
        elif key in held_back:
            why = ("testing-only kernel: measured, but may win by measurement only with "
                   "measurements.allow_testing_only")
        else:
            why = "not measured at the objective's token counts; measured candidates rank first"
        verdicts.append((why, rule))
    return Order(winner, True, tuple(verdicts))
