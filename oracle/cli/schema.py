"""`oracle schema`: the JSON schema of policy or kernel files, for editors."""
from __future__ import annotations

import argparse
import json

NAME = "schema"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(NAME, help="JSON schema of policy, kernel or tuning files")
    p.add_argument("what", choices=["policy", "kernels", "tuning"], nargs="?", default="policy")
    return p


def run(args: argparse.Namespace) -> int:
    from ..catalog import _KernelEntry, _KernelFile
    from ..policy import policy_schema
    if args.what == "policy":
        schema = policy_schema()
    elif args.what == "tuning":
        from ..tuning.schema import tuning_schema
        schema = tuning_schema()
    else:
        schema = {"file": _KernelFile.model_json_schema(), "kernel": _KernelEntry.model_json_schema()}
    print(json.dumps(schema, indent=2))
    return 0
