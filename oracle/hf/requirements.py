"""The transformers oracle.hf needs, checked once before any of its own imports can fail.

Why: oracle.hf maps checkpoint names through transformers' conversion mapping and builds models from its
classes; an older transformers fails deep inside that with an ImportError traceback (transformers 5.17 on a
lent GPU machine did, in the twenty-eighth pass). The extra pins the floor the suite runs on; this turns a
missing or older transformers into one error that names the package, the version found and the fix.
"""
from __future__ import annotations

import re

from ..errors import InputError

#: The oldest transformers oracle.hf is tested with (the hf extra's floor in pyproject.toml; scripts/dev-setup
#: installs it for the suite).
MIN_TRANSFORMERS = (5, 23)


def transformers_version(text: str) -> tuple[int, ...]:
    """'5.23.0', '5.24.0.dev0', '6.0.0rc1' -> (5, 23, 0), (5, 24, 0), (6, 0, 0): the release numbers only."""
    numbers = []
    for part in text.split("."):
        m = re.match(r"\d+", part)
        if m is None:
            break
        numbers.append(int(m.group()))
        if m.end() < len(part):
            break
    return tuple(numbers)


def require_transformers(field: str | None = None) -> None:
    """InputError (field: the option that asked for it) unless transformers imports and is at least
    MIN_TRANSFORMERS; torch is the other half of the hf extra and is checked with it."""
    fix = "pip install -U 'kernel-oracle[hf]'"
    floor = ".".join(map(str, MIN_TRANSFORMERS))
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError as exc:
        raise InputError(f"needs the hf extra, torch and transformers >= {floor} ({fix}): {exc}",
                         field=field) from None
    found = str(getattr(transformers, "__version__", "unknown"))
    if transformers_version(found)[:2] < MIN_TRANSFORMERS:
        raise InputError(f"needs transformers >= {floor}, found {found} ({fix})", field=field)
