"""Step 4 of selection: among the candidates that pass, the fastest measured one wins.

`choose` takes the passing (kernel, mode) pairs in policy order and their trace
entries, ranks them with `objective.rank`, and rewrites the trace so every passing
candidate that lost says why (slower, unmeasured, failed, testing-only). When no
candidate is measured the policy order stands and the trace is the static one.
"""
from __future__ import annotations

from dataclasses import replace
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


def attach_timings(candidates: list[Any], table: dict | None) -> list[Any]:
    """Every candidate of the trace with the figures the table holds for it."""
    if not table:
        return candidates
    out = []
    for c in candidates:
        found = table.get((c.kernel, c.mode, c.activation_format))
        out.append(replace(c, timings=found.timings()) if found is not None and found.times else c)
    return out


def choose(passing: Sequence[tuple[Any, Any]], trace: list[Any], table: dict[tuple, CandidateTimes],
           mset: MeasurementSet) -> tuple[int, list[Any], bool]:
    """(index of the winner in `passing`, the rewritten trace, chosen by measurement?)."""
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
    index = keys.index(winner_key)
    trace = attach_timings(trace, table)
    positions = [i for i, c in enumerate(trace) if c.verdict == "selected"]  # one per passing pair, in order
    if winner_score is None:  # nothing measured: the policy order stands, trace as without measurements
        return index, trace[:positions[index] + 1], False
    scored = [(k, s) for k, s in ranked if s is not None]
    objective = f"objective {mset.objective}" + (f" over M={','.join(map(str, sorted(weights)))}"
                                                 if mset.objective.name in ("balanced", "custom") else "")
    best = trace[positions[index]]
    shown = [t for t in best.timings if t[0] in weights]
    trace[positions[index]] = replace(
        best, reason=f"{timing_text(shown)} \u2014 fastest measured of {len(scored)} ({objective})",
        rule=", ".join(mset.names) or MEASUREMENTS_RULE)
    scores = dict(scored)
    for key, pos in zip(keys, positions):
        if key == winner_key:
            continue
        c = trace[pos]
        if key in scores:
            why = (f"measured slower: {scores[key]:.3g} ms against {winner_score:.3g} ms for {winner_key[0]} "
                   f"({objective})")
        elif key in failed:
            why = f"failed during tuning, never chosen by measurement: {table[key].error}"
        elif key in held_back:
            why = ("testing-only kernel: measured, but may win by measurement only with "
                   "measurements.allow_testing_only")
        else:
            why = "not measured at the objective's token counts; measured candidates rank first"
        rule = ", ".join(mset.names) or MEASUREMENTS_RULE
        trace[pos] = replace(c, verdict="rejected", stage="measurement", reason=why, rule=rule,
                             reasons=(why,), rules=(rule,))
    return index, trace, True
