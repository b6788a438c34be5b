"""`oracle bench`: time select_backend, cached and uncached, against the targets."""
from __future__ import annotations

import argparse

NAME = "bench"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(NAME, help="time select_backend, cached and uncached")
    p.add_argument("--repeats", type=int, default=200_000)
    return p


def run(args: argparse.Namespace) -> int:
    from ..benchmark import print_selection_benchmark
    print_selection_benchmark(repeats=args.repeats)
    return 0
