"""Which b12x implementation `import b12x` runs, and whether its version is supported: the one
judge of "is b12x here" (kernels.yaml `requires.environment`; there is no `b12x` package check).

Two distributions can provide the `b12x` module: the standalone `b12x` package, and
flashinfer-python (0.7.2 ships an embedded copy under `flashinfer/experimental/b12x` plus a
top-level `b12x/__init__.py` shim that loads it; `flashinfer-python[b12x]` installs it with no
`b12x` distribution at all). Installed after b12x, flashinfer's shim overwrites b12x's
`__init__.py`, so `import b12x` runs flashinfer's copy while the `b12x` distribution metadata
still says 1.5.1. The provider is therefore read from where the imported module's code lives,
never from metadata; the version that matters is then the provider's own (b12x's, or
flashinfer-python's for the embedded copy). When both are installed, both are reported.

A platform that states package versions (`--with-package`, `Platform.with_packages`) describes
another machine: its stated b12x / flashinfer-python versions are judged instead of this
environment.
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
PROVIDERS = (STANDALONE, FLASHINFER)
#: The plugin's declarations: the one home of each provider's supported version range.
KERNELS_FILE = Path(__file__).with_name("kernels.yaml")
#: FlashInfer's own SM12x kernels (a backend of their own, declared by this plugin).
FLASHINFER_KERNELS_FILE = Path(__file__).with_name("flashinfer_kernels.yaml")
INSTALL = {STANDALONE: "pip install oracle-b12x (pulls b12x==1.5.1 and triton)",
           FLASHINFER: "pip install 'flashinfer-python==0.7.2' (or uninstall it to use the standalone b12x)"}
NOT_INSTALLED = (f"b12x is not installed: neither the b12x distribution nor flashinfer-python (which embeds "
                 f"b12x from 0.7.2) provides `import b12x`; `{INSTALL[STANDALONE]}`, or "
                 f"`pip install 'flashinfer-python[b12x]==0.7.2'`")


@lru_cache(maxsize=None)
def supported(provider: str) -> str:
    """The version range kernels.yaml declares for `provider` (`requires.environment.versions`)."""
    from oracle.sources import load_yaml_file
    versions = load_yaml_file(KERNELS_FILE)["requires"]["environment"].get("versions") or {}
    if provider not in versions:
        raise B12xUnavailableError(f"{KERNELS_FILE} declares no version range for {provider}")
    return str(versions[provider])


def version_ok(name: str, version: str | None) -> bool:
    if version is None:
        return False
    try:
        return Version(version) in SpecifierSet(supported(name), prereleases=True)
    except InvalidVersion:
        return False


@dataclass(frozen=True)
class Provider:
    """The implementation behind `import b12x`, and the other provider when both are installed."""

    name: str               # STANDALONE or FLASHINFER
    version: str | None     # the provider distribution's version
    location: str           # directory the b12x code is loaded from ("" when stated, not found)
    other_version: str | None = None   # the other provider's distribution, also installed (or stated)

    @property
    def supported(self) -> str:
        return supported(self.name)

    @property
    def other(self) -> str:
        return FLASHINFER if self.name == STANDALONE else STANDALONE

    def describe(self) -> str:
        what = "standalone b12x" if self.name == STANDALONE else "b12x embedded in flashinfer-python"
        text = f"{what} {self.version or '(unknown version)'}"
        text += f" from {self.location}" if self.location else " (stated)"
        if self.other_version is not None:
            text += (f"; {self.other} {self.other_version} is installed too, and `import b12x` does not run its "
                     f"copy" if self.location else f"; {self.other} {self.other_version} is there too")
        return text


def active_provider() -> Provider:
    """The provider of `import b12x` in this environment, checked; else B12xUnavailableError."""
    provider = detect()
    check_provider_version(provider)
    return provider


@lru_cache(maxsize=1)
def detect() -> Provider:
    """Import the top-level `b12x` (cheap: its ops load lazily) and see where its code came from."""
    if importlib.util.find_spec("b12x") is None:
        raise B12xUnavailableError(NOT_INSTALLED)
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
        return Provider(FLASHINFER, _version(FLASHINFER), str(location), _version(STANDALONE))
    embeds = flashinfer_dir is not None and (flashinfer_dir / "experimental" / "b12x").is_dir()
    return Provider(STANDALONE, _version(STANDALONE), str(location), _version(FLASHINFER) if embeds else None)


def stated_provider(platform: Any) -> Provider:
    """The provider on the machine `platform` describes, from its stated versions (either may provide
    `import b12x` there, by install order: the first whose version is supported is judged)."""
    versions = {name: platform.package_version(name) for name in PROVIDERS}
    present = [name for name in PROVIDERS if versions[name] is not None]
    if not present:
        raise B12xUnavailableError(NOT_INSTALLED + " (on the stated machine)")
    name = next((n for n in present if version_ok(n, versions[n])), present[0])
    other = FLASHINFER if name == STANDALONE else STANDALONE
    return Provider(name, versions[name], "", versions[other])


def check_provider_version(provider: Provider) -> None:
    """Raise the clear error for a provider version outside its supported range."""
    if provider.version is None:
        raise B12xUnavailableError(f"{provider.describe()}: its {provider.name} distribution is not installed, "
                                   f"so its version is unknown; `{INSTALL[provider.name]}`")
    if not version_ok(provider.name, provider.version):
        raise B12xUnavailableError(f"{provider.describe()}: oracle-b12x needs {provider.name}{provider.supported} "
                                   f"for this provider; `{INSTALL[provider.name]}`")


def states_provider(platform: Any) -> bool:
    """Does `platform` describe another machine's b12x providers (rather than this environment)?"""
    stated = {name for name, _ in getattr(platform, "packages", ())}
    return not getattr(platform, "packages_from_environment", True) or bool(stated & set(PROVIDERS))


def environment_check(spec: Any, platform: Any) -> tuple[bool, str]:
    """kernels.yaml `requires.environment`: which b12x runs on `platform`, and is it supported."""
    try:
        if states_provider(platform):
            provider = stated_provider(platform)
            check_provider_version(provider)
        else:
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
