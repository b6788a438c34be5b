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
#: Most figures or token counts a trace reason spells out; longer lists keep their first and last few
#: and say how many there are. A reason is repeated for every layer of its signature, so it must not
#: grow with a tuning file's 64 token counts per candidate (the JSON report holds every figure once).
SHOWN = 6
#: Most characters of a tuning failure's error a reason quotes (a file may hold 2,000 per entry).
SHOWN_ERROR = 240


def elide(items: Sequence[str], what: str, limit: int | None = SHOWN, sep: str = ",") -> str:
    """Items joined by `sep` up to `limit`; beyond it the first and last few and how many `what` in all."""
    if limit is None or len(items) <= limit:
        return sep.join(items)
    return f"{sep.join(items[:limit - 2])}{sep}...{sep}{sep.join(items[-2:])} ({len(items)} {what})"


def error_text(error: str) -> str:
    """A failure's error, cut to SHOWN_ERROR characters with a pointer to the whole text."""
    if len(error) <= SHOWN_ERROR:
        return error
    return f"{error[:SHOWN_ERROR]}... ({len(error)} characters; the tuning file holds all of it)"


def ms_text(ms: Sequence[int]) -> str:
    """'1,16,256' or, for many token counts, '1,2,3,4,...,63,64 (64 token counts)'."""
    return elide([str(m) for m in sorted(ms)], "token counts")


def timing_text(timings: Sequence[tuple[int, float, str]], limit: int | None = None) -> str:
    """'0.095 ms @M=1 (graph), 1.21 ms @M=4096 (graph)'; at most `limit` figures spelled out."""
    return elide([f"{ms:.3g} ms @M={m} ({how})" for m, ms, how in timings], "figures", limit, ", ")


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
                    f"candidates were measured at (M={ms_text(measured_ms)})")
        return Order(winner, False, note=note)
    scores = {k: s for k, s in ranked if s is not None}
    objective = f"objective {mset.objective}" + (f" over M={ms_text(weights)}"
                                                 if mset.objective.name in ("balanced", "custom") else "")
    rule = ", ".join(mset.names) or MEASUREMENTS_RULE
    verdicts = []
    for key in keys:
        if key == winner_key:
            shown = [t for t in table[key].timings() if t[0] in weights]
            why = f"{timing_text(shown, SHOWN)} \u2014 fastest measured of {len(scores)} ({objective})"
        elif key in scores:
            why = (f"measured slower: {scores[key]:.3g} ms against {winner_score:.3g} ms for {winner_key[0]} "
                   f"({objective})")
        elif key in failed:
            why = f"failed during tuning, never chosen by measurement: {error_text(table[key].error)}"
        elif key in held_back:
            why = ("testing-only kernel: measured, but may win by measurement only with "
                   "measurements.allow_testing_only")
        else:
            why = "not measured at the objective's token counts; measured candidates rank first"
        verdicts.append((why, rule))
    return Order(winner, True, tuple(verdicts))
