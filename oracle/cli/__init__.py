"""The `oracle` command: explain | run | kernels | policy show | schema | verify | bench | tune, and plugins' commands.

Each command is a module (or, from a plugin, any object) with `NAME`, `add_parser(subparsers)`
returning its parser, and `run(args) -> int`; `BUILTIN` lists the shipped ones and plugins add
theirs through the `register_commands` hook. Every deliberate error (bad file, field, name)
prints one `error: ...` block on stderr and exits 1; `explain` exits 2 when some quantized
layer has no kernel; a usage error exits 64 (the whole table: `oracle.exitcodes.TABLE`). A plugin
command that crashes is reported the same way, never as a traceback.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from pydantic import ValidationError

from ..errors import OracleError
from ..exitcodes import ArgumentParser, run_command as guarded
from ..registry import PluginFailure
from ..session import get_registry
from . import bench, explain, kernels, policy, schema, tune, verify
from . import run as run_command   # imports no torch/transformers until `oracle run` runs
from .options import add_platform_options, add_policy_options, env_from_args, platform_from_args, policy_from_args

BUILTIN = (explain, run_command, kernels, policy, schema, verify, bench, tune)


def build_parser(registry: Any = None) -> argparse.ArgumentParser:
    """The parser with every built-in command and every command `registry`'s plugins added."""
    parser = ArgumentParser(prog="oracle", description="Which kernel runs each quantized layer, and why.")
    parser.add_argument("--log-decisions", action="store_true", help="log every decision as JSON on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in BUILTIN:
        command.add_parser(sub).set_defaults(_run=command.run, _plugin=None)
    if registry is not None:
        _add_plugin_commands(sub, registry)
    return parser


def _add_plugin_commands(sub: argparse._SubParsersAction, registry: Any) -> None:
    taken = {c.NAME for c in BUILTIN}
    for name, entry in registry.commands.items():
        if name in taken:
            _plugin_failure(registry, entry.plugin, f"command {name!r} is a built-in command; not added")
            continue
        try:
            parser = entry.command.add_parser(sub)
            parser.set_defaults(_run=entry.command.run, _plugin=entry.plugin)
        except Exception as exc:  # isolate the plugin
            sub._name_parser_map.pop(name, None)
            _plugin_failure(registry, entry.plugin, f"add_parser of command {name!r} raised "
                                                    f"{type(exc).__name__}: {exc}")


def _plugin_failure(registry: Any, plugin: str, message: str) -> None:
    failure = PluginFailure(plugin, "register_commands", message)
    if failure not in registry.failures:
        registry.failures.append(failure)


def _plugin_logs_to_stderr() -> None:
    """Plugins' structlog events go to stderr: unconfigured, structlog prints on stdout, into `--format json`.

    An application that configured structlog keeps its own setup. The factory reads `sys.stderr` when a logger
    is made, so a replaced stream (pytest's capture, a redirect) is honoured."""
    import structlog

    if not structlog.is_configured():
        structlog.configure(logger_factory=lambda *_: structlog.PrintLogger(sys.stderr))


def main(argv: Sequence[str] | None = None) -> int:
    _plugin_logs_to_stderr()

    def command() -> int:
        words = list(sys.argv[1:] if argv is None else argv)
        if next((w for w in words if not w.startswith("-")), None) == verify.NAME:
            hang = verify.load_plugins_watched(words)   # a plugin whose import hangs is reported, not waited on
            if hang:
                return 1
        parser = build_parser(get_registry())  # plugins load here, inside the guard (warnings, errors)
        args = parser.parse_args(argv)  # a usage error exits USAGE (64), not 2
        if args.log_decisions:
            import logging
            logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(message)s")
        try:
            return args._run(args)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise OracleError(f"{exc.title}: {where}: {first['msg']}") from None
        except (OracleError, BrokenPipeError):
            raise
        except Exception as exc:
            if args._plugin is None:
                raise  # a bug in oracle itself: run_command reports it as an internal error (70)
            raise OracleError(f"command {args.command!r} of plugin {args._plugin} failed: "
                              f"{type(exc).__name__}: {exc}") from None
    return guarded(command)  # exit codes and warnings: oracle.exitcodes


__all__ = ["BUILTIN", "add_platform_options", "add_policy_options", "build_parser", "env_from_args", "main",
           "platform_from_args", "policy_from_args"]
