"""The JSON rendering of an explain report: one object, every candidate of every layer.

Measured figures are written once: every layer of one signature shares its candidates' figures, so
each distinct (candidate, figures) table goes into the top-level `measurements` and a candidate names
it by `measured_ref`. The report then grows with the model's distinct signatures, not its layer count
(a maximal tuning file for qwen3-30b-a3b made a 2.5 MB report when every layer repeated them).
"""
from __future__ import annotations

from typing import Any

from ..jsonsafe import dumps
from .report import Report


class MeasuredTables:
    """Interns each candidate's measured figures: one id per distinct (kernel, mode, activations, figures)."""

    def __init__(self) -> None:
        self._ids: dict[tuple, str] = {}
        self.tables: dict[str, dict[str, Any]] = {}

    def candidate(self, c: Any) -> dict[str, Any]:
        """`c.to_dict()` with its figures replaced by a reference into `tables`."""
        out = c.to_dict()
        if not c.timings:
            return out
        del out["measured"]
        key = (c.kernel, c.mode, c.activation_format, c.timings)
        ref = self._ids.get(key)
        if ref is None:
            ref = self._ids[key] = f"t{len(self._ids)}"
            self.tables[ref] = {"kernel": c.kernel, "mode": c.mode, "activation_format": c.activation_format,
                                "measured": [{"m": m, "ms": ms, "method": how} for m, ms, how in c.timings]}
        out["measured_ref"] = ref
        return out


def report_dict(report: Report) -> dict[str, Any]:
    m, p = report.model, report.platform
    tables = MeasuredTables()
    layers = []
    for row, d in zip(m.layers, report.decisions):
        layer = row.layer
        layers.append({
            "name": layer.name, "block": row.block, "role": row.role, "op": layer.op,
            "weight_format": layer.weight_format,
            "activation_format": d.activation_format,
            "checkpoint_activation_format": getattr(layer, "activation_format", None),
            "status": d.status, "backend": d.backend, "kernel": d.kernel, "mode": d.mode,
            "selected_by": d.selected_by,
            "candidates": [tables.candidate(c) for c in d.candidates], "notes": list(d.notes),
            "unquantized_reason": row.quant_note or None, "parts": list(row.parts),
            "shape": layer.model_dump(exclude={"name", "op", "weight_format", "activation_format"}),
        })
    return {
        "model": {"name": m.name, "files": m.files, "architecture": m.architecture, "model_type": m.model_type,
                  "dialect": m.dialect, "quantization": m.dialect_detail, "generic_fallback": m.generic,
                  "example": m.example, "tp": m.tp, "ep": m.ep, "notes": m.notes,
                  "derivation": getattr(m, "derivation", None)},
        "platform": {"description": p.describe(), "vendor": p.vendor, "device_name": p.device_name,
                     "capability": list(p.capability) if p.capability else None, "simulated": p.simulated,
                     "preset": p.preset_name, "environment": report.environment},
        "config": {**report.config.describe(), "tp": m.tp, "ep": m.ep, "policy_files": report.policy_files},
        "plugin_errors": report.plugin_errors,
        "layers": layers,
        "measurements": tables.tables,
        "summary": report.summary(),
    }


def render_json(report: Report) -> str:
    return dumps(report_dict(report), indent=1)  # valid JSON: never a bare NaN/Infinity
