"""`oracle policy show`: the effective merged policy, every value with its file:line."""
from __future__ import annotations

import argparse
import json

from .options import add_platform_options, add_policy_options, platform_from_args, policy_from_args

NAME = "policy"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(NAME, help="the effective merged policy")
    psub = p.add_subparsers(dest="policy_command", metavar="show")
    psub.required = True
    show = psub.add_parser("show", help="every policy value with the file:line it came from")
    add_platform_options(show)
    add_policy_options(show)
    show.add_argument("--format", choices=["text", "json"], default="text")
    return p


def run(args: argparse.Namespace) -> int:
    policy = policy_from_args(args)
    rows = policy.describe()
    applies = None
    if args.device or args.detect:
        platform = platform_from_args(args)
        for i, entry in enumerate(policy.platforms):
            if entry.matches(platform):
                applies = (i, entry)
                break
    if args.format == "json":
        print(json.dumps({"files": policy.files, "fingerprint": policy.fingerprint,
                          "values": [{"key": k, "value": v, "source": s} for k, v, s in rows],
                          "platform_default": applies[1].model_dump() if applies else None}, indent=2))
        return 0
    print("effective policy, merged from: " + " < ".join(policy.files))
    width = max(len(k) for k, _, _ in rows)
    for key, value, source in rows:
        shown = json.dumps(value) if not isinstance(value, str) else value
        print(f"  {key:<{width}}  {shown:<40}  {source}")
    if args.device or args.detect:
        if applies:
            print(f"platform default for this device: platforms[{applies[0]}] -> {applies[1].backends}")
        else:
            print("platform default for this device: none (automatic selection)")
    return 0
