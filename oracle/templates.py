"""Reason templates (`"needs {hidden_size} divisible by 256"`): checked once, rendered safely.

Rules and requirements carry human reasons that interpolate values. A template is checked
when its file loads: it must parse, name only known fields (plain names; `activation_params.X`
where allowed), use no positional `{}` or attribute/index syntax, and its format spec and
conversion must apply to a sample of the field's kind (`{dtype:d}` is refused there, not when
the first matching layer is decided). Rendering never raises: a value that still does not fit
its spec (an optional field that is unset) is shown plainly.
"""
from __future__ import annotations

import string
from typing import Any, Callable

_FORMATTER = string.Formatter()
_MISSING = object()


def fields_of(template: str) -> list[tuple[str, str, str | None]]:
    """(name, format spec, conversion) of each placeholder; ValueError names what is malformed."""
    try:
        parsed = list(_FORMATTER.parse(template))
    except ValueError as exc:
        raise ValueError(f"reason {template!r} is not a valid template ({exc}); write a literal brace as "
                         "{{ or }}") from None
    out = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name or name.isdigit():
            raise ValueError(f"reason {template!r} has a positional placeholder {{{name}}}; name a field instead")
        if conversion not in (None, "r", "s", "a"):
            raise ValueError(f"reason {template!r}: unknown conversion !{conversion} in {{{name}}}")
        if "{" in (spec or ""):
            raise ValueError(f"reason {template!r}: nested placeholders in a format spec are not supported")
        out.append((name, spec or "", conversion))
    return out


def check(template: str, sample: Callable[[str], Any], unknown: Callable[[str], str]) -> list[str]:
    """Validate `template`; `sample(name)` gives a value of the field's kind, or raises KeyError
    when the name is unknown (`unknown(name)` is then the message). Returns the names used."""
    names = []
    for name, spec, conversion in fields_of(template):
        try:
            value = sample(name)
        except KeyError:
            raise ValueError(unknown(name)) from None
        try:
            _format(value, spec, conversion)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"reason {template!r}: {{{name}:{spec}}} does not apply to a "
                             f"{type(value).__name__} ({exc})") from None
        names.append(name)
    return names


def render(template: str, lookup: Callable[[str], Any]) -> str:
    """Fill a checked template; `lookup(name)` returns the value or raises KeyError (shown as {name})."""
    out = []
    for literal, name, spec, conversion in _FORMATTER.parse(template):
        out.append(literal)
        if name is None:
            continue
        try:
            value = lookup(name)
        except KeyError:
            out.append(f"{{{name}}}")
            continue
        try:
            out.append(_format(value, spec or "", conversion))
        except (ValueError, TypeError):
            out.append(str(value))
    return "".join(out)


def _format(value: Any, spec: str, conversion: str | None) -> str:
    if conversion:
        value = _FORMATTER.convert_field(value, conversion)
    return format(value, spec)
