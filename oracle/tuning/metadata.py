"""The live platform as a tuning file records it, and how a file's record differs from it.

Compared (a difference makes the file stale): vendor, compute capability, device name
(when the platform is detected, not simulated), the torch, triton and oracle versions,
and the version of every plugin distribution the file names. Recorded only: the
driver and CUDA versions (an upgrade there rarely reorders kernels; re-tune when in doubt).
"""
from __future__ import annotations

import datetime as _dt
import shutil
import subprocess
import sys
from typing import Any

from ..platform import installed_version
from ..version import __version__
from .schema import Metadata

COMPARED_PACKAGES = ("torch", "triton")


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _oracle_version() -> str:
    return __version__


def _plugins(registry: Any) -> dict[str, str | None]:
    return {p.distribution: p.version for p in registry.plugins if p.distribution}


def _driver() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        return out.strip().splitlines()[0].strip() or None
    except Exception:
        return None


def live_metadata(platform: Any, registry: Any) -> Metadata:
    """Metadata for a file measured now on `platform` (a detected one)."""
    torch = sys.modules.get("torch")
    cuda = getattr(getattr(torch, "version", None), "cuda", None) if torch is not None else None
    stamp = now()
    return Metadata(vendor=platform.vendor, device_name=platform.device_name or platform.vendor,
                    capability=platform.capability_str if platform.capability else None,
                    driver=_driver() if platform.vendor == "nvidia" else None, cuda=cuda,
                    torch=installed_version("torch"), triton=installed_version("triton"),
                    oracle=_oracle_version(), plugins=_plugins(registry), created=stamp, updated=stamp)


def mismatches(meta: Metadata, platform: Any, registry: Any) -> list[str]:
    """Each way `meta` differs from `platform` and the installed versions, as 'what: file X, here Y'."""
    out: list[str] = []

    def differ(what: str, recorded: Any, live: Any) -> None:
        if recorded != live:
            out.append(f"{what}: file {recorded if recorded is not None else 'none'}, "
                       f"here {live if live is not None else 'none'}")

    differ("vendor", meta.vendor, platform.vendor)
    differ("capability", meta.capability, platform.capability_str if platform.capability else None)
    if not platform.simulated:
        differ("device_name", meta.device_name, platform.device_name or platform.vendor)
    for name in COMPARED_PACKAGES:
        differ(name, getattr(meta, name), platform.package_version(name))
    differ("oracle", meta.oracle, _oracle_version())
    live_plugins = _plugins(registry)
    for dist, version in sorted(meta.plugins.items()):
        differ(f"plugin {dist}", version, live_plugins.get(dist, platform.package_version(dist)))
    return out
