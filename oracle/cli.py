"""The `oracle` command: explain | run | kernels | policy show | schema | verify | bench.

Every deliberate error (bad file, field, name) prints one `error: ...` block on stderr
and exits 1; `explain` exits 2 when some quantized layer has no kernel.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from pydantic import ValidationError

from .errors import OracleError


def add_platform_options(parser: argparse.ArgumentParser) -> None:
    """--device / --detect / --with-package, shared by the subcommands."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--device", metavar="NAME",
                       help="simulate a named GPU (oracle kernels --list-devices) or a capability such as sm120")
    group.add_argument("--detect", action="store_true", help="use this machine's GPU (the default)")
    parser.add_argument("--with-package", action="append", default=[], metavar="NAME[=VERSION]",
                        help="assume a package is installed on the target (e.g. b12x=1.5.1); NAME=none: absent")


def add_policy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", action="append", default=[], metavar="FILE",
                        help="a policy file merged above the defaults (repeatable, later wins)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="an environment switch for the decision (repeatable)")


def platform_from_args(args: argparse.Namespace) -> Any:
    from .platform import Platform
    platform = Platform.preset(args.device) if getattr(args, "device", None) else Platform.detect()
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
    from .policy import default_policy, load_policy
    files = getattr(args, "policy", []) or []
    return load_policy(files) if files else default_policy()


# ---- oracle kernels -------------------------------------------------------------------------
def cmd_kernels(args: argparse.Namespace) -> int:
    from .engine import get_engine
    from .platform import preset_names
    from .registry import get_registry
    if args.list_devices:
        from .platform import Platform
        for name in preset_names():
            print(f"{name:14} {Platform.preset(name).describe()}")
        return 0
    registry = get_registry()
    policy = policy_from_args(args)
    platform = platform_from_args(args)
    engine = get_engine(policy, registry)
    rows = []
    tiers = {t for table in policy.ordering.values() for names in table.values() for t in names}
    for spec in registry.kernels:
        verdict = engine._platform_check(spec, platform)
        auto, auto_rule = engine._auto_allowed(spec)
        rows.append({
            "kernel": spec.name, "backend": spec.backend, "tier": spec.tier, "op": spec.op,
            "plugin": spec.plugin, "auto_select": auto, "auto_select_rule": auto_rule,
            "in_ordering": spec.tier in tiers or spec.backend in tiers,
            "modes": [f"{m.weight}/{m.activation}={m.name}" for m in spec.modes],
            "available": verdict.ok, "reason": verdict.reason or None, "rule": verdict.rule or None,
            "notes": list(verdict.notes), "testing_only": spec.testing_only, "source": spec.source,
        })
    failures = [{"plugin": f.plugin, "stage": f.stage, "message": f.message} for f in registry.failures]
    plugins = [{"name": p.name, "distribution": p.distribution, "version": p.version, "kernels": list(p.kernels)}
               for p in registry.plugins]
    if args.format == "json":
        print(json.dumps({"platform": platform.describe(), "plugins": plugins, "kernels": rows,
                          "plugin_errors": failures}, indent=2))
        return 0
    print(f"platform: {platform.describe()}")
    print("plugins:  " + (", ".join(f"{p['name']} ({p['distribution'] or 'in-process'} {p['version'] or ''})".replace(" )", ")")
                                     for p in plugins) or "none installed"))
    print(f"backends: auto, {', '.join(registry.backends())}" if registry.kernels else "backends: (none)")
    for row in rows:
        state = "available" if row["available"] else "unavailable"
        auto = "auto" if row["auto_select"] else "explicit only"
        if not row["in_ordering"]:
            auto += ", tier not in ordering"
        print(f"\n{row['kernel']}  backend={row['backend']} tier={row['tier']} op={row['op']} ({auto})"
              + ("  [testing only]" if row["testing_only"] else ""))
        print(f"  modes: {', '.join(row['modes'])}")
        print(f"  {state}" + (f": {row['reason']} ({row['rule']})" if row["reason"] else ""))
        for note in row["notes"]:
            print(f"  note: {note}")
        print(f"  declared at {row['source']} by plugin {row['plugin']}")
    if failures:
        print("\nplugin errors (these plugins or files were skipped):")
        for f in failures:
            print(f"  - {f['plugin']} ({f['stage']}): {f['message']}")
    return 0


# ---- oracle policy show ----------------------------------------------------------------------
def cmd_policy_show(args: argparse.Namespace) -> int:
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


# ---- oracle schema / verify / bench ------------------------------------------------------------
def cmd_schema(args: argparse.Namespace) -> int:
    from .catalog import _KernelEntry, _KernelFile
    from .policy import policy_schema
    if args.what == "policy":
        schema = policy_schema()
    else:
        schema = {"file": _KernelFile.model_json_schema(), "kernel": _KernelEntry.model_json_schema()}
    print(json.dumps(schema, indent=2))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Validate policy and kernel files (and the installed plugins); non-zero on any problem."""
    from pathlib import Path

    from .catalog import load_kernel_file
    from .policy import load_policy
    from .registry import get_registry
    from .sources import display_path, load_yaml_file
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


def cmd_bench(args: argparse.Namespace) -> int:
    from .benchmark import print_selection_benchmark
    print_selection_benchmark(repeats=args.repeats)
    return 0


# ---- entry point ------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oracle", description="Which kernel runs each quantized layer, and why.")
    parser.add_argument("--log-decisions", action="store_true", help="log every decision as JSON on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    try:
        from . import explain
    except ImportError:  # pragma: no cover - explain ships with the package
        explain = None  # type: ignore[assignment]
    if explain is not None:
        explain.add_parser(sub)
    from .hf import command as run_command   # imports no torch/transformers until `oracle run` runs
    run_command.add_parser(sub)

    p = sub.add_parser("kernels", help="registered backends and kernels, their availability, plugin errors")
    add_platform_options(p)
    add_policy_options(p)
    p.add_argument("--list-devices", action="store_true", help="list the named devices and exit")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_kernels)

    p = sub.add_parser("policy", help="the effective merged policy")
    psub = p.add_subparsers(dest="policy_command", metavar="show")
    psub.required = True
    show = psub.add_parser("show", help="every policy value with the file:line it came from")
    add_platform_options(show)
    add_policy_options(show)
    show.add_argument("--format", choices=["text", "json"], default="text")
    show.set_defaults(func=cmd_policy_show)

    p = sub.add_parser("schema", help="JSON schema of policy or kernel files")
    p.add_argument("what", choices=["policy", "kernels"], nargs="?", default="policy")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("verify", help="validate policy/kernel files and the installed plugins")
    p.add_argument("files", nargs="*", metavar="FILE")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("bench", help="time select_backend, cached and uncached")
    p.add_argument("--repeats", type=int, default=200_000)
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.log_decisions:
        import logging
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(message)s")
    try:
        return int(args.func(args) or 0)
    except OracleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        print(f"error: {exc.title}: {where}: {first['msg']}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `oracle explain | head`
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
