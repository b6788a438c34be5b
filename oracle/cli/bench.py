"""`oracle bench`: time select_backend, cached and uncached, against the targets."""
from __future__ import annotations

import argparse

from ..benchmark import print_selection_benchmark
from ..exitcodes import bounded_count

NAME = "bench"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(NAME, help="time select_backend, cached and uncached")
    p.add_argument("--repeats", type=bounded_count, default=200_000, help="calls per timing (1 to 10^8)")
    return p


def run(args: argparse.Namespace) -> int:
    print_selection_benchmark(repeats=args.repeats)
    return 0
