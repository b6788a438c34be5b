"""Lazy, checked access to the b12x package, and feature detection across its versions.

Every kernel class reaches b12x through `load()`: a b12x that is missing, whose
provider (standalone b12x, or the copy embedded in flashinfer-python; see
`provider`) is outside its supported version range, or that fails at import (b12x
imports triton and cutlass without declaring triton) becomes one
`B12xUnavailableError` that says which, and how to fix it, instead of a traceback
from deep inside b12x.
"""
from __future__ import annotations

import importlib
import importlib.metadata
from functools import lru_cache
from types import ModuleType

from .errors import B12xUnavailableError
from .provider import FLASHINFER, STANDALONE, active_provider, supported

__all__ = ["B12xUnavailableError", "attr", "has", "installed_version", "load"]


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("b12x")
    except importlib.metadata.PackageNotFoundError:
        return None


def load(module: str) -> ModuleType:
    """Import `b12x.<module>` after the provider check; import failures name the module and cause."""
    active_provider()
    return _import(f"b12x.{module}")


@lru_cache(maxsize=None)
def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or str(exc)
        hint = " (b12x imports triton without declaring it: pip install triton)" if missing == "triton" else ""
        raise B12xUnavailableError(f"{name} failed to import: missing module {missing!r}{hint}") from None
    except Exception as exc:  # a broken install must surface as one clear error
        raise B12xUnavailableError(f"{name} failed to import: {type(exc).__name__}: {exc}") from None


def attr(module: ModuleType, name: str, purpose: str):
    """`module.name`, or a clear error saying which b12x feature this version lacks."""
    try:
        return getattr(module, name)
    except AttributeError:
        raise B12xUnavailableError(
            f"{module.__name__}.{name} is missing from {active_provider().describe()}; it is needed for {purpose} "
            f"(oracle-b12x is tested with b12x{supported(STANDALONE)} and flashinfer-python{supported(FLASHINFER)})"
        ) from None
    except Exception as exc:  # lazy attributes import submodules, which may fail
        raise B12xUnavailableError(f"{module.__name__}.{name} failed to load: {type(exc).__name__}: {exc}") from None


def has(module: ModuleType, name: str) -> bool:
    """Feature detection without assuming one b12x version."""
    try:
        return getattr(module, name, None) is not None
    except Exception:
        return False


def enum_has(enum_type, value: str) -> bool:
    try:
        enum_type(value)
        return True
    except Exception:
        return False
