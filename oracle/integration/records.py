"""Per-layer records of an engine run (one JSON object a layer), their summary, and reading them back.

An engine adapter writes one `layer` record per quantized layer (what the engine chose,
what the oracle chose and why, which of the two runs it) and one `summary` record when
loading ends. The records go to a JSON-lines file and, one per line, into the engine's
own log, so `read_records` accepts either: it takes every line holding a record object,
whatever prefix the engine's logger put before it. `render_table` is what
`oracle vllm-report FILE` prints: the per-layer table without writing code.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from ..errors import InputError

MARK = "kernel_oracle"           # every record carries {"kernel_oracle": "layer" | "summary"}


def layer_record(*, engine: str, mode: str, layer: Any, decision: Any, engine_kernel: str | None,
                 engine_backend: str | None, runs: str, note: str = "") -> dict[str, Any]:
    """The record of one layer. `engine_kernel`: the engine's own kernel class or MoE backend (None:
    the engine has none for it); `engine_backend`: the oracle backend name that kernel belongs to, if
    any; `runs`: "oracle" or "engine", the kernel that serves the layer in this run."""
    fields = layer.model_dump(exclude={"name", "op"})
    selected = decision.status == "selected"
    if engine_kernel is None:
        agree = "engine_has_none"
    elif not selected:
        agree = "oracle_has_none"
    else:
        agree = "agree" if engine_backend is not None and engine_backend == decision.backend else "differ"
    platform = getattr(decision, "platform", None)
    return {MARK: "layer", "engine": engine, "mode": mode, "name": layer.name, "op": layer.op,
            "device": platform.describe() if platform is not None else None,
            "layer": {k: (list(v) if isinstance(v, tuple) else v) for k, v in fields.items()},
            "engine_kernel": engine_kernel, "engine_backend": engine_backend,
            "oracle": {"status": decision.status, "backend": decision.backend, "kernel": decision.kernel,
                       "mode": decision.mode, "activation_format": decision.activation_format,
                       "selected_by": decision.selected_by, "requested_backend": decision.requested_backend,
                       "notes": list(decision.notes)},
            "rejected": [{"kernel": c.kernel, "mode": c.mode, "stage": c.stage, "reason": c.reason, "rule": c.rule}
                         for c in decision.rejected],
            "agree": agree, "runs": runs, "note": note}


def summary_record(records: Iterable[dict[str, Any]], *, engine: str, mode: str) -> dict[str, Any]:
    layers = [r for r in records if r.get(MARK) == "layer"]
    return {MARK: "summary", "engine": engine, "mode": mode, "layers": len(layers),
            "agree": dict(sorted(Counter(r["agree"] for r in layers).items())),
            "runs": dict(sorted(Counter(r["runs"] for r in layers).items()))}


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, default=str)


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Every record in a JSON-lines file or an engine log (other lines are skipped)."""
    p = Path(path)
    try:
        text = p.read_text(errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read the engine log ({exc.strerror or exc})", source=str(p)) from None
    found = []
    for line in text.splitlines():
        start = line.find("{")
        if start < 0 or MARK not in line:
            continue
        try:
            obj = json.loads(line[start:])
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get(MARK) in ("layer", "summary"):
            found.append(obj)
    if not found:
        raise InputError("no kernel-oracle records found; was the engine run with mode shadow or enforce "
                         "(and, for a log file, at INFO level)?", source=str(p))
    return found


def _fmt(layer: dict[str, Any]) -> str:
    fields = layer.get("layer", {})
    act = fields.get("activation_scale") or fields.get("activation_format") or "a16"
    return f"{fields.get('weight_format', '?')}/{act}"


def render_table(records: list[dict[str, Any]], *, rejected: bool = False) -> str:
    """The per-layer table (and, with `rejected`, every rejected candidate under its layer)."""
    layers = [r for r in records if r.get(MARK) == "layer"]
    rows = [("layer", "op", "format", "engine kernel", "oracle kernel", "agree", "runs")]
    for r in layers:
        o = r["oracle"]
        oracle = f"{o['kernel']} [{o['mode']}]" if o["status"] == "selected" else o["status"]
        rows.append((r["name"], r["op"], _fmt(r), r["engine_kernel"] or "(none)", oracle, r["agree"], r["runs"]))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    out = []
    for n, row in enumerate(rows):
        out.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
        if n and rejected:
            r = layers[n - 1]
            out += [f"    - {c['kernel']}: {c['reason']} ({c['rule']})" for c in r["rejected"]]
            if r.get("note"):
                out.append(f"    note: {r['note']}")
    summaries = [r for r in records if r.get(MARK) == "summary"]
    for s in summaries:
        agree = ", ".join(f"{k} {v}" for k, v in s["agree"].items())
        runs = ", ".join(f"{k} {v}" for k, v in s["runs"].items())
        out.append(f"summary ({s['engine']}, mode {s['mode']}): {s['layers']} layers; {agree}; runs: {runs}")
    return "\n".join(out)
