"""`oracle verify`: validate policy and kernel files and the installed plugins."""
from __future__ import annotations

import argparse

from ..errors import OracleError

NAME = "verify"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(NAME, help="validate policy/kernel files and the installed plugins")
    p.add_argument("files", nargs="*", metavar="FILE")
    return p


def run(args: argparse.Namespace) -> int:
    """Validate policy and kernel files (and the installed plugins); non-zero on any problem."""
    from pathlib import Path

    from ..catalog import load_kernel_file
    from ..policy import load_policy
    from ..session import get_registry
    from ..sources import display_path, load_yaml_file
    problems: list[str] = []
    for file in args.files:
        try:
            data = load_yaml_file(file)
            if isinstance(data, dict) and "kernels" in data:
                specs = load_kernel_file(data, plugin="verify", what=display_path(Path(file)))
                print(f"ok   {file}: {len(specs)} kernel(s)")
            else:
                load_policy([file])
                print(f"ok   {file}: policy")
        except OracleError as exc:
            problems.append(str(exc))
            print(f"FAIL {exc}")
    registry = get_registry()
    for failure in registry.failures:
        problems.append(str(failure))
        print(f"FAIL plugin {failure}")
    try:
        load_policy(registry=registry)
    except OracleError as exc:
        problems.append(str(exc))
        print(f"FAIL {exc}")
    print(f"{len(registry.kernels)} kernel(s) from {len(registry.plugins)} plugin(s); "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0
