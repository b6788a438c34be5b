"""`oracle kernels`: registered backends and kernels, their availability here, and plugin errors."""
from __future__ import annotations

import argparse

from ..envvars import LOAD_PLUGINS
from ..jsonsafe import dumps
from ..platform import Platform, preset_names
from ..session import get_engine, get_registry
from .options import add_platform_options, add_policy_options, platform_from_args, policy_from_args

NAME = "kernels"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(NAME, help="registered backends and kernels, their availability, plugin errors")
    add_platform_options(p)
    add_policy_options(p)
    p.add_argument("--list-devices", action="store_true", help="list the named devices and exit")
    p.add_argument("--format", choices=["text", "json"], default="text")
    return p


def run(args: argparse.Namespace) -> int:
    if args.list_devices:
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
        print(dumps({"platform": platform.describe(), "environment": engine.environment(platform),
                     "plugins": plugins, "skipped_plugins": registry.skipped,
                     "kernels": rows, "plugin_errors": failures}, indent=2))
        return 0
    print(f"platform: {platform.describe()}")
    print("plugins:  " + (", ".join(f"{p['name']} ({p['distribution'] or 'in-process'} {p['version'] or ''})".replace(" )", ")")
                                     for p in plugins) or "none installed"))
    print(f"backends: auto, {', '.join(registry.backends())}" if registry.kernels else "backends: (none)")
    if registry.skipped:
        print(f"skipped:  {', '.join(registry.skipped)} (not in {LOAD_PLUGINS})")
    for line in engine.environment(platform):
        print(f"environment: {line}")
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
