"""The one table of exit codes every `oracle` command uses, and the parser that keeps to it.

argparse exits 2 on a usage error, which is the code this project documents as "some layer
has no kernel"; `ArgumentParser` here exits `USAGE` instead, so a script can tell a typo in
its command line from a model that cannot be served. docs/user-guide.md prints this table.
"""
from __future__ import annotations

import argparse
import sys
from typing import NoReturn

OK = 0
#: Bad input: a file, field, name or value that is not what was expected (one `error:` block).
INPUT = 1
#: `oracle explain`: some quantized layer has no kernel (the full report is still printed).
NO_KERNEL = 2
#: The command line itself is wrong: unknown option, missing argument, bad choice.
USAGE = 64
#: A bug in oracle or a plugin that escaped isolation (one line; ORACLE_DEBUG=1 shows the traceback).
INTERNAL = 70
#: Interrupted (Ctrl-C).
INTERRUPTED = 130

TABLE: tuple[tuple[int, str], ...] = (
    (OK, "success (explain: every quantized layer has a kernel; verify: no problem)"),
    (INPUT, "bad input: a file, field, name or value; `verify` found a problem"),
    (NO_KERNEL, "explain: some quantized layer has no kernel (the report is still printed)"),
    (USAGE, "usage error: unknown option, missing or malformed argument"),
    (INTERNAL, "internal error: a bug (set ORACLE_DEBUG=1 for the traceback)"),
    (INTERRUPTED, "interrupted"),
)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with usage errors on exit code `USAGE` (subparsers inherit the class)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"{self.prog}: usage error: {message}\n")
