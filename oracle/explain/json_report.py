"""The JSON rendering of an explain report: one object, every candidate of every layer."""
from __future__ import annotations

from typing import Any

from ..jsonsafe import dumps
from .report import Report


def report_dict(report: Report) -> dict[str, Any]:
    m, p = report.model, report.platform
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
            "candidates": [c.to_dict() for c in d.candidates], "notes": list(d.notes),
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
        "summary": report.summary(),
    }


def render_json(report: Report) -> str:
    return dumps(report_dict(report), indent=1)  # valid JSON: never a bare NaN/Infinity
