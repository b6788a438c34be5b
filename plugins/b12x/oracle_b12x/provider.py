"""Which b12x implementation `import b12x` actually runs, and whether its version is supported.

Two distributions can provide the `b12x` module: the standalone `b12x` package, and
flashinfer-python (0.7.2 ships an embedded copy under `flashinfer/experimental/b12x` plus a
top-level `b12x/__init__.py` shim that loads it). Installed after b12x, flashinfer's shim
overwrites b12x's `__init__.py`, so `import b12x` runs flashinfer's copy while the `b12x`
distribution metadata still says 1.5.1. The provider is therefore read from where the
imported module's code lives, never from metadata; the version that matters is then the
provider's own (b12x's, or flashinfer-python's for the embedded copy).
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from .errors import B12xUnavailableError

STANDALONE = "b12x"
FLASHINFER = "flashinfer-python"
#: The plugin's declarations: the one home of each provider's supported version range.
KERNELS_FILE = Path(__file__).with_name("kernels.yaml")
INSTALL = {STANDALONE: "pip install oracle-b12x (pulls b12x==1.5.1 and triton)",
           FLASHINFER: "pip install 'flashinfer-python==0.7.2' (or uninstall it to use the standalone b12x)"}


@lru_cache(maxsize=None)
def supported(provider: str) -> str:
    """The version range kernels.yaml declares for `provider`: b12x's in the backend's
    `requires.packages.b12x`, flashinfer-python's in the kernel that needs flashinfer itself."""
    from oracle.sources import load_yaml_file
    data = load_yaml_file(KERNELS_FILE)
    if provider == STANDALONE:
        return str(data["requires"]["packages"][STANDALONE]["version"])
    for kernel in data["kernels"]:
        package = ((kernel.get("requires") or {}).get("packages") or {}).get(provider)
        if package and package.get("version"):
            return str(package["version"])
    raise B12xUnavailableError(f"{KERNELS_FILE} declares no version range for {provider}")


@dataclass(frozen=True)
class Provider:
    """The implementation behind `import b12x`."""

    name: str               # STANDALONE or FLASHINFER
    version: str | None     # the provider distribution's version
    location: str           # directory the b12x code is loaded from

    @property
    def supported(self) -> str:
        return supported(self.name)

    def describe(self) -> str:
        what = "standalone b12x" if self.name == STANDALONE else "b12x embedded in flashinfer-python"
        return f"{what} {self.version or '(unknown version)'} from {self.location}"


def active_provider() -> Provider:
    """The provider of `import b12x` in this environment, checked; else B12xUnavailableError."""
    provider = detect()
    check_provider_version(provider)
    return provider


@lru_cache(maxsize=1)
def detect() -> Provider:
    """Import the top-level `b12x` (cheap: its ops load lazily) and see where its code came from."""
    if importlib.util.find_spec("b12x") is None:
        raise B12xUnavailableError(f"package b12x is not installed; install it with `{INSTALL[STANDALONE]}`")
    try:
        module = importlib.import_module("b12x")
    except Exception as exc:  # e.g. flashinfer's shim left behind without flashinfer
        raise B12xUnavailableError(
            f"`import b12x` fails ({type(exc).__name__}: {exc}); a flashinfer-python b12x shim may point to "
            f"a missing or broken flashinfer: reinstall flashinfer-python, or `pip install --force-reinstall "
            f"b12x==1.5.1` to restore the standalone package") from None
    origin = getattr(module, "__file__", None)
    if not origin:
        raise B12xUnavailableError("`import b12x` gave a module without a file; cannot tell which b12x runs")
    location = Path(origin).resolve().parent
    flashinfer_dir = _package_dir("flashinfer")
    if flashinfer_dir is not None and location.is_relative_to(flashinfer_dir):
        return Provider(FLASHINFER, _version(FLASHINFER), str(location))
    return Provider(STANDALONE, _version(STANDALONE), str(location))


def check_provider_version(provider: Provider) -> None:
    """Raise the clear error for a provider version outside its supported range."""
    if provider.version is None:
        raise B12xUnavailableError(f"{provider.describe()}: its {provider.name} distribution is not installed, "
                                   f"so its version is unknown; `{INSTALL[provider.name]}`")
    try:
        ok = Version(provider.version) in SpecifierSet(provider.supported, prereleases=True)
    except InvalidVersion:
        ok = False
    if not ok:
        raise B12xUnavailableError(f"{provider.describe()}: oracle-b12x needs {provider.name}{provider.supported} "
                                   f"for this provider; `{INSTALL[provider.name]}`")


def environment_check(spec: Any, platform: Any) -> tuple[bool, str]:
    """kernels.yaml `requires.environment`: which b12x runs here, and is it supported."""
    try:
        provider = active_provider()
    except B12xUnavailableError as exc:
        return False, str(exc)
    return True, f"b12x provider: {provider.describe()}"


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)     # a top-level name: finds without importing
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).resolve().parent


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
