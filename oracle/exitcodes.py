"""The one table of exit codes every `oracle` command uses, and the parser that keeps to it.

argparse exits 2 on a usage error, which is the code this project documents as "some layer
has no kernel"; `ArgumentParser` here exits `USAGE` instead, so a script can tell a typo in
its command line from a model that cannot be served. docs/user-guide.md prints this table.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Any, Callable, NoReturn

from .envvars import DEBUG, OracleEnvWarning
from .errors import OracleError

OK = 0
#: Bad input: a file, field, name or value that is not what was expected (one `error:` block).
INPUT = 1
#: `oracle explain`: some quantized layer has no kernel (the full report is still printed).
NO_KERNEL = 2
#: The command line itself is wrong: unknown option, missing argument, bad choice.
USAGE = 64
#: A bug in oracle or a plugin that escaped its guard (one line; ORACLE_DEBUG=1 shows the traceback).
INTERNAL = 70
#: Interrupted (Ctrl-C).
INTERRUPTED = 130

TABLE: tuple[tuple[int, str], ...] = (
    (OK, "success (explain: every quantized layer has a kernel; verify: no problem)"),
    (INPUT, "bad input: a file, field, name or value; `verify` found a problem; explain: a checkpoint that "
            "declares quantization but yields no quantized layer, or a config group / quantized_layers entry "
            "that names no module of the model without --accept-partial-coverage (the report is still printed)"),
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


#: Largest `oracle bench --repeats` (a run of that many calls takes minutes already).
MAX_REPEATS = 100_000_000


def bounded_count(text: str, *, maximum: int = MAX_REPEATS) -> int:
    """An argparse `type` for counts: a whole number in 1..maximum, else a usage error."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if not 1 <= value <= maximum:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to {maximum}, got {value}")
    return value


def run_command(func: Callable[[], int]) -> int:
    """Run a parsed command and map what escapes it to the table above, never a traceback.

    OracleError (bad input) -> INPUT with one `error:` block; Ctrl-C -> INTERRUPTED; any other
    exception is a bug -> INTERNAL with one line (ORACLE_DEBUG=1 re-raises it). Environment
    warnings print as `warning: ...` lines; output that cannot be encoded is escaped.
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # pragma: no cover - a stream that cannot change
                pass
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        warnings.simplefilter("default", OracleEnvWarning)  # each distinct warning once per command
        try:
            return int(func() or 0)
        except OracleError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return INPUT
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return INTERRUPTED
        except BrokenPipeError:  # `oracle explain | head`
            return OK
        except Exception as exc:  # noqa: BLE001 - the last line of defence against a traceback
            if os.environ.get(DEBUG) == "1":
                raise
            print(f"internal error: {type(exc).__name__}: {exc} (a bug; ORACLE_DEBUG=1 shows the traceback)",
                  file=sys.stderr)
            return INTERNAL


def _show_warning(message: Any, category: type, filename: str, lineno: int, file: Any = None,
                  line: Any = None) -> None:
    print(f"warning: {message}", file=sys.stderr)
