"""`oracle schema`: the JSON schema of policy or kernel files, for editors."""
from __future__ import annotations

import argparse

from ..catalog import kernels_schema
from ..jsonsafe import dumps
from ..policy import policy_schema
from ..tuning.schema import tuning_schema

NAME = "schema"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(NAME, help="JSON schema of policy, kernel or tuning files")
    p.add_argument("what", choices=["policy", "kernels", "tuning"], nargs="?", default="policy")
    return p


def run(args: argparse.Namespace) -> int:
    if args.what == "policy":
        schema = policy_schema()
    elif args.what == "tuning":
        schema = tuning_schema()
    else:
        schema = kernels_schema()
    print(dumps(schema, indent=2))
    return 0
