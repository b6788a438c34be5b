"""'Did you mean' hints for names checked against a known vocabulary."""
from __future__ import annotations

import difflib
from typing import Iterable


def suggestion(name: str, known: Iterable[str]) -> str:
    """'; did you mean X?' for the closest known name (case-insensitive first), else ''."""
    choices = sorted(set(known))
    folded = {c.lower().replace("-", "_"): c for c in choices}
    exact = folded.get(str(name).lower().replace("-", "_"))
    if exact is not None:
        return f"; did you mean {exact!r}?"
    close = difflib.get_close_matches(str(name), choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def unknown(what: str, name: object, known: Iterable[str]) -> str:
    """"unknown backend 'bx12'; did you mean 'b12x'? (known: a, b)" as one message."""
    choices = sorted(set(known))
    listed = ", ".join(choices) if choices else "none"
    return f"unknown {what} {name!r}{suggestion(str(name), choices)} (known: {listed})"
