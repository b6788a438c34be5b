"""User regular expressions (`re:` entries of modules_to_not_convert, ignore lists) that cannot hang.

Python's `re` backtracks and has no time-out, so a pattern such as `(a+)+$` or `(.*)*x` takes
exponential time on a name that almost matches. Module names are short and plain, and the
patterns real checkpoints use are too (`re:.*\\.mlp\\..*`), so instead of a time-out the
pattern's structure is checked once, when it is read: refused are a repeat inside a repeat
(`(a+)+`), alternation inside a repeat (`(a|aa)+`), back-references, and more than
MAX_UNBOUNDED_REPEATS unbounded repeats (polynomial blow-up: `.*.*.*.*.*x`).
Every other pattern runs in time about linear to quadratic in the name's length.
"""
from __future__ import annotations

import re
from typing import Any

try:  # Python 3.11+
    import re._constants as _c  # type: ignore[import-not-found]
    import re._parser as _parser  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _parser  # type: ignore[no-redef]

#: Longest user pattern (real ones are tens of characters).
MAX_PATTERN_CHARS = 1000
#: Most unbounded repeats (`*`, `+`, `{n,}`) in one pattern.
MAX_UNBOUNDED_REPEATS = 4

_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT, *([_c.POSSESSIVE_REPEAT] if hasattr(_c, "POSSESSIVE_REPEAT") else [])}


def backtracking_risk(pattern: str) -> str | None:
    """Why `pattern` could take exponential (or steep polynomial) time, or None when it cannot."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"longer than {MAX_PATTERN_CHARS} characters"
    try:
        parsed = _parser.parse(pattern)
    except re.error:
        return None          # re.compile reports the syntax error itself
    counts = {"wild": 0}
    problem = _walk(list(parsed), inside_repeat=False, counts=counts)
    if problem is None and counts["wild"] > MAX_UNBOUNDED_REPEATS:
        problem = (f"{counts['wild']} unbounded repeats (at most {MAX_UNBOUNDED_REPEATS}: each one multiplies "
                   "the backtracking)")
    return problem


def _walk(items: list, *, inside_repeat: bool, counts: dict) -> str | None:
    for op, av in items:
        if op in _REPEATS:
            low, high, body = av
            unbounded = high == _c.MAXREPEAT or high > 1
            if inside_repeat and unbounded:
                return "a repeat inside a repeat, such as (a+)+, backtracks exponentially"
            if high == _c.MAXREPEAT:
                counts["wild"] += 1
            found = _walk(list(body), inside_repeat=inside_repeat or unbounded, counts=counts)
            if found:
                return found
        elif op == _c.BRANCH:
            if inside_repeat:
                return "alternation inside a repeat, such as (a|aa)+, backtracks exponentially"
            for branch in av[1]:
                found = _walk(list(branch), inside_repeat=inside_repeat, counts=counts)
                if found:
                    return found
        elif op == _c.SUBPATTERN:
            found = _walk(list(av[-1]), inside_repeat=inside_repeat, counts=counts)
            if found:
                return found
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            found = _walk(list(av[1]), inside_repeat=inside_repeat, counts=counts)
            if found:
                return found
        elif op in (_c.GROUPREF, _c.GROUPREF_EXISTS):
            return "back-references are not supported in name patterns"
        elif op == getattr(_c, "ATOMIC_GROUP", None):
            found = _walk(list(av), inside_repeat=inside_repeat, counts=counts)
            if found:
                return found
    return None


def compile_user_pattern(pattern: str, make_error: Any, shown: str | None = None) -> re.Pattern:
    """re.compile(pattern), refusing a pattern that could hang: `make_error(message)` is raised.
    `shown` is how the user wrote it (e.g. with its `re:` prefix)."""
    shown = (shown or pattern)[:80]
    risk = backtracking_risk(pattern)
    if risk is not None:
        raise make_error(f"regular expression {shown!r} refused: {risk}; write it without nested or "
                         "alternated repeats (oracle runs no pattern that could hang)")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise make_error(f"invalid regular expression {shown!r}: {exc}") from None
