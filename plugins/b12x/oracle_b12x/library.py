"""Lazy, checked access to the b12x package, and feature detection across its versions.

Every kernel class reaches b12x through `load()`: a b12x that is missing, outside
the supported version range, or that fails at import (b12x imports triton and
cutlass without declaring triton) becomes one `B12xUnavailableError` that says
which, and how to fix it, instead of a traceback from deep inside b12x.
"""
from __future__ import annotations

import importlib
import importlib.metadata
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from oracle.errors import OracleError
from oracle.sources import load_yaml_file

#: The plugin's declarations; also the one home of the supported b12x range (`packages.b12x`).
KERNELS_FILE = Path(__file__).with_name("kernels.yaml")



@lru_cache(maxsize=None)
def declared() -> tuple[str, str]:
    """(supported b12x range, install hint), read once from kernels.yaml's `packages.b12x` requirement."""
    requirement = load_yaml_file(KERNELS_FILE)["requires"]["packages"]["b12x"]
    return str(requirement["version"]), str(requirement["install"])


class B12xUnavailableError(OracleError, ImportError):
    """b12x (or one of its modules) cannot be used in this environment."""


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("b12x")
    except importlib.metadata.PackageNotFoundError:
        return None


def check_version(version: str | None) -> None:
    """Raise the clear error for a missing or unsupported b12x version."""
    supported, install = declared()
    if version is None:
        raise B12xUnavailableError(f"package b12x is not installed; install it with `{install}`")
    try:
        ok = Version(version) in SpecifierSet(supported, prereleases=True)
    except InvalidVersion:
        ok = False
    if not ok:
        raise B12xUnavailableError(
            f"b12x {version} is installed but oracle-b12x needs b12x{supported}; `{install}`")


def load(module: str) -> ModuleType:
    """Import `b12x.<module>` after the version check; import failures name the module and cause."""
    check_version(installed_version())
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
            f"{module.__name__}.{name} is missing from b12x {installed_version()}; it is needed for {purpose} "
            f"(oracle-b12x is tested with b12x{declared()[0]})") from None
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
