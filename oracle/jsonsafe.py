"""JSON output that is always valid JSON: no bare NaN or Infinity tokens.

`json.dumps` writes float('nan') as `NaN`, which no strict JSON parser accepts. Values
that reach a report are validated to be finite, so this is the last line of defence:
a non-finite float becomes the string "NaN", "Infinity" or "-Infinity".
"""
from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """`value` with every non-finite float (at any depth) replaced by its name as a string."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """`json.dumps` that never writes NaN/Infinity (and would raise rather than do so)."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)
