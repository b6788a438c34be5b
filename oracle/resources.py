"""Where the files that ship with the engine live, installed or in a checkout."""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """`policies` or `examples`: inside the installed package, or beside it in a checkout."""
    inside = PACKAGE_DIR / "_data" / name
    if inside.is_dir():
        return inside
    return PACKAGE_DIR.parent / name


def policy_file(name: str) -> Path:
    return data_dir("policies") / name
