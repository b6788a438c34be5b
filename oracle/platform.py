"""The machine a decision is for: vendor, compute capability, device name, packages.

A `Platform` is either detected (`Platform.detect()`) or a preset from
`policies/devices.yaml` (`Platform.preset("rtx-pro-6000")`), in which case it is
`simulated`: checks that must run on the device itself are assumed, and the trace
says so. Package versions come from installed distribution metadata (no imports),
unless the caller states them.
"""
from __future__ import annotations

import functools
from functools import cached_property
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from typing import Literal, Mapping

from .validation import Revalidating
from pydantic import ConfigDict

from .errors import InputError
from .names import suggestion
from .resources import policy_file
from .sources import load_yaml_file, where

Vendor = Literal["nvidia", "amd", "intel", "cpu"]
_SM_NAME = re.compile(r"^sm_?(\d{1,2}?)(\d)a?$")


class Platform(Revalidating):
    model_config = ConfigDict(frozen=True, extra="forbid")

    vendor: Vendor
    capability: tuple[int, int] | None = None
    device_name: str = ""
    sm_count: int | None = None
    #: Package versions the caller states (name -> version, None = absent); they win.
    packages: tuple[tuple[str, str | None], ...] = ()
    #: Read versions of packages not stated from this environment's distribution metadata.
    packages_from_environment: bool = True
    simulated: bool = False
    preset_name: str | None = None
    @cached_property
    def cache_hash(self) -> int:
        return hash((self.vendor, self.capability, self.device_name, self.sm_count, self.packages,
                     self.packages_from_environment, self.simulated, self.preset_name))

    def __hash__(self) -> int:  # cached: platforms key the decision cache
        return self.cache_hash

    # ---- queries -----------------------------------------------------------------
    @property
    def capability_str(self) -> str:
        return f"{self.capability[0]}.{self.capability[1]}" if self.capability else "none"

    @property
    def sm(self) -> str:
        return f"SM{self.capability[0]}{self.capability[1]}" if self.capability else "no GPU"

    def describe(self) -> str:
        kind = "simulated" if self.simulated else "detected"
        cap = f", {self.sm} (capability {self.capability_str})" if self.capability else ""
        return f"{self.device_name or self.vendor}{cap}, {kind}"

    def package_version(self, name: str) -> str | None:
        """Version of distribution `name` on this platform, or None when absent."""
        key = _norm(name)
        for stated, version in self.packages:
            if stated == key:
                return version
        return installed_version(key) if self.packages_from_environment else None

    def with_packages(self, packages: Mapping[str, str | None], *, only: bool = False) -> "Platform":
        """The same platform with some package versions stated; `only` ignores the environment."""
        merged = dict(self.packages)
        merged.update({_norm(k): v for k, v in packages.items()})
        return self.model_copy(update={"packages": tuple(sorted(merged.items())),
                                       "packages_from_environment": not only and self.packages_from_environment})

    # ---- constructors --------------------------------------------------------------
    @classmethod
    def preset(cls, name: str, *, packages: Mapping[str, str | None] | None = None) -> "Platform":
        """A named GPU from policies/devices.yaml, or an `sm120`-style capability."""
        platform = _preset(_norm(check_device_name(name)))
        return platform.with_packages(packages) if packages else platform

    @classmethod
    def detect(cls) -> "Platform":
        """The GPU of this machine: torch.cuda if importable, else nvidia-smi, else CPU. Never fails."""
        return _detect()

    @classmethod
    def cpu(cls) -> "Platform":
        return cls(vendor="cpu", device_name="CPU")


#: Longest device name accepted (names in devices.yaml are a few dozen characters).
MAX_DEVICE_NAME = 64


def check_device_name(name: object, field: str = "--device") -> str:
    """`name` if it can name a device: a non-empty, printable string of sane length; else InputError.

    An empty `--device ''` used to mean "detect" silently; a non-string raised AttributeError.
    """
    if not isinstance(name, str):
        raise InputError(f"a device name must be a string such as 'rtx-pro-6000' or 'sm120', got "
                         f"{type(name).__name__}", field=field)
    if not name.strip():
        raise InputError("empty device name; name a device (oracle kernels --list-devices) or a capability "
                         "such as sm120, or use --detect", field=field)
    if len(name) > MAX_DEVICE_NAME or not name.isprintable():
        raise InputError(f"{name[:MAX_DEVICE_NAME]!r}... is not a device name (printable, at most "
                         f"{MAX_DEVICE_NAME} characters)", field=field)
    return name


def is_device_name(value: object) -> bool:
    """Whether a policy's `when: {device: ...}` value can equal a platform's preset name."""
    if not isinstance(value, str):
        return False
    return value in preset_names() or bool(_SM_NAME.match(value.replace("-", "_")))


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


@functools.lru_cache(maxsize=None)
def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    except Exception:  # a broken distribution's metadata must not break selection
        return None


@functools.lru_cache(maxsize=None)
def device_table() -> dict[str, dict]:
    """name (and alias) -> device facts, from policies/devices.yaml."""
    path = policy_file("devices.yaml")
    data = load_yaml_file(path)
    devices = (data or {}).get("devices")
    if not isinstance(devices, dict):
        raise InputError("expected a 'devices' mapping", source=str(path))
    table: dict[str, dict] = {}
    for name, facts in devices.items():
        if not isinstance(facts, dict) or "vendor" not in facts:
            raise InputError("each device needs at least 'vendor'", source=where(devices, name))
        entry = dict(facts)
        entry["_name"] = name
        entry["_source"] = where(devices, name)
        for key in [name, *entry.pop("aliases", [])]:
            table[_norm(str(key))] = entry
    return table


def preset_names() -> list[str]:
    return sorted({e["_name"] for e in device_table().values()})


def memory_bandwidth_gbps(platform: Platform) -> float | None:
    """Peak memory bandwidth (GB/s) from the device presets (`hbm_gbps`), or None when unknown.

    A preset platform has its own; a detected one takes the preset whose device name it has,
    else the preset whose name or alias appears in it as a word ("rtx pro 6000" in "NVIDIA RTX
    PRO 6000 Blackwell Workstation Edition")."""
    table = device_table()
    if platform.preset_name is not None:
        entry = table.get(_norm(platform.preset_name))
        return float(entry["hbm_gbps"]) if entry is not None and entry.get("hbm_gbps") else None
    name = platform.device_name.lower()
    entries = {id(e): e for e in table.values() if e.get("hbm_gbps")}.values()
    for entry in entries:
        if str(entry.get("device_name", "")).lower() == name:
            return float(entry["hbm_gbps"])
    for key, entry in table.items():
        if entry.get("hbm_gbps") and re.search(rf"\b{re.escape(key.replace('-', ' '))}\b", name):
            return float(entry["hbm_gbps"])
    return None


@functools.lru_cache(maxsize=256)
def _preset(name: str) -> Platform:
    table = device_table()
    entry = table.get(name)
    if entry is not None:
        cap = entry.get("capability")
        capability = _parse_capability(str(cap), entry["_source"]) if cap is not None else None
        return Platform(vendor=entry["vendor"], capability=capability,
                        device_name=entry.get("device_name", entry["_name"]),
                        sm_count=entry.get("sm_count"), simulated=True, preset_name=entry["_name"])
    match = _SM_NAME.match(name.replace("-", "_"))
    if match:
        major, minor = int(match.group(1)), int(match.group(2))
        return Platform(vendor="nvidia", capability=(major, minor),
                        device_name=f"NVIDIA SM{major}{minor}", simulated=True, preset_name=name)
    raise InputError(f"unknown device {name!r}; expected one of {', '.join(preset_names())} "
                     f"or a capability such as sm120{suggestion(name, preset_names())}", field="--device")


def _parse_capability(text: str, source: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)\.(\d+)", text.strip())
    if not match:
        raise InputError(f"capability {text!r} must look like '12.0'", source=source)
    return int(match.group(1)), int(match.group(2))


#: Device nodes a CUDA or ROCm device needs on Linux (WSL: /dev/dxg).
_GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def _no_gpu_possible() -> bool:
    """On Linux, no GPU device node means no GPU: skip importing torch (seconds) to learn that."""
    return sys.platform.startswith("linux") and not any(os.path.exists(p) for p in _GPU_DEVICE_NODES)


@functools.lru_cache(maxsize=1)
def _detect() -> Platform:
    if _no_gpu_possible():
        return Platform.cpu()
    try:
        if importlib.util.find_spec("torch") is not None:
            found = _detect_torch()
            if found is not None:
                return found
    except Exception:
        pass
    try:
        found = _detect_nvidia_smi()
        if found is not None:
            return found
    except Exception:
        pass
    return Platform.cpu()


def _detect_torch() -> Platform | None:
    import torch  # only here, and only when asked to detect

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    vendor = "amd" if getattr(torch.version, "hip", None) else "nvidia"
    return Platform(vendor=vendor, capability=(props.major, props.minor), device_name=props.name,
                    sm_count=props.multi_processor_count)


def _detect_nvidia_smi() -> Platform | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    out = subprocess.run([exe, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    first = out.strip().splitlines()[0]
    name, cap = (p.strip() for p in first.rsplit(",", 1))
    major, minor = cap.split(".")
    return Platform(vendor="nvidia", capability=(int(major), int(minor)), device_name=name)
