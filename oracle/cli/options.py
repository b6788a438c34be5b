"""Options every command shares (--device/--detect/--with-package, --policy, --env) and what they mean."""
from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import InputError, OracleError
from ..platform import Platform
from ..session import load_policy


def add_platform_options(parser: argparse.ArgumentParser) -> None:
    """--device / --detect / --with-package, shared by the subcommands."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--device", metavar="NAME",
                       help="simulate a named GPU (oracle kernels --list-devices) or a capability such as sm120")
    group.add_argument("--detect", action="store_true", help="use this machine's GPU (the default)")
    parser.add_argument("--with-package", action="append", default=[], metavar="NAME[=VERSION]",
                        help="assume a package is installed on the target (e.g. b12x=1.5.1); NAME=none: absent")


def add_choice_options(p: argparse.ArgumentParser) -> None:
    """Backends per op, policy files and environment switches: how `oracle explain` and `oracle run` choose."""
    for op in ("linear", "moe", "embedding"):
        p.add_argument(f"--{op}-backend", default="auto", metavar="NAME|FMT=NAME,...",
                       help=f"{op} backend: one name, or per-format pairs such as nvfp4=b12x,default=auto")
    p.add_argument("--policy", action="extend", nargs="+", default=[], metavar="FILE",
                   help="policy files merged above the defaults (later wins)")
    p.add_argument("--env", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                   help="environment switches for the decision, e.g. VLLM_B12X_MOE_FP4_FORCE_A16=1")


def add_policy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", action="append", default=[], metavar="FILE",
                        help="a policy file merged above the defaults (repeatable, later wins)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="an environment switch for the decision (repeatable)")


def platform_from_args(args: argparse.Namespace) -> Any:
    device = getattr(args, "device", None)
    platform = Platform.preset(device) if device is not None else Platform.detect()  # --device '' is refused
    stated: dict[str, str | None] = {}
    for item in getattr(args, "with_package", []) or []:
        name, _, version = item.partition("=")
        if not name.strip():
            raise OracleError(f"--with-package: {item!r} is not NAME[=VERSION]")
        version = version.strip()
        stated[name.strip()] = None if version.lower() == "none" else (version or "0+assumed")
    return platform.with_packages(stated) if stated else platform


def env_from_args(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    for item in getattr(args, "env", []) or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise OracleError(f"--env: {item!r} is not KEY=VALUE")
        env[key.strip()] = value
    return env


def policy_from_args(args: argparse.Namespace) -> Any:
    """The session's policy with the --policy files on top (the cached default when there are none)."""
    return load_policy(getattr(args, "policy", []) or [])


def positive_int(value: Any, flag: str) -> int:
    """A count option (--tp, --ep, --repeats...) as a positive integer, or an InputError naming the flag."""
    try:
        number = int(str(value))
    except ValueError:
        raise InputError(f"expected a positive integer, got {value!r}", field=flag) from None
    if number < 1:
        raise InputError(f"expected a positive integer, got {number}", field=flag)
    return number
