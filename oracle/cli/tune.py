"""`oracle tune`: measure every viable kernel of a model's distinct layers on this device.

Exit 0 when the file was written (candidates that failed are recorded in it), 1 on
bad input (unknown model, M <= 0, an objective naming no M, a --device other than the
detected one, a corrupt tuning file). The file is written once, atomically, merged
with what is there; nothing is written when the run is interrupted.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..catalog import normalize_backend
from ..errors import InputError, OracleError
from ..explain.describe import describe_layer
from ..models import load_model
from ..objective import parse_objective
from ..platform import Platform
from ..ranking import timing_text
from ..session import get_engine, get_registry
from ..tuning import store
from ..tuning.metadata import live_metadata, mismatches
from ..tuning.runner import Runner, candidates_for, distinct_layers, progress_bar, ranking
from ..tuning.schema import TuningFile
from .options import env_from_args, policy_from_args, positive_int

DEFAULT_MS = (1, 16, 256, 4096)
DEFAULT_OUT = "oracle-tuning.json"


NAME = "tune"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "tune", help="time every viable kernel of a model's layers on this device; write a tuning file",
        description="For every distinct layer of the model and every candidate kernel that passes its "
                    "constraints on this device, time instantiate -> process_weights (synthetic weights) -> "
                    "apply at each M, and merge the figures into a tuning file (oracle explain --measurements).")
    p.add_argument("--model", required=True, metavar="PATH|NAME", help="a model folder, config.json or example name")
    p.add_argument("--tp", default="1", metavar="N", help="tensor-parallel size (per-rank shapes)")
    p.add_argument("--ep", default="1", metavar="N", help="expert-parallel size for routed experts")
    p.add_argument("--m", default=",".join(map(str, DEFAULT_MS)), metavar="M,M,...",
                   help=f"token counts to time (default {','.join(map(str, DEFAULT_MS))})")
    p.add_argument("--objective", default=None, metavar="decode|prefill|balanced|M:W,...",
                   help="objective for the summary and the plot's marks (default: the policy's, balanced)")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="FILE", help=f"tuning file to merge into ({DEFAULT_OUT})")
    p.add_argument("--backend", action="append", default=[], metavar="NAME",
                   help="time only these backends' kernels (repeatable)")
    p.add_argument("--device", metavar="NAME",
                   help="must name the detected device (tuning measures this machine; it cannot simulate)")
    p.add_argument("--repeats", type=int, default=None, metavar="N",
                   help="timed repeats per figure (default 30 on a GPU, 5 on CPU; fewer for slow calls)")
    p.add_argument("--plot", metavar="FILE.png", help="draw time against M per layer (needs matplotlib)")
    p.add_argument("--policy", action="append", default=[], metavar="FILE", help="policy files above the defaults")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment switches")
    p.add_argument("--progress", choices=["auto", "on", "off"], default="auto",
                   help="progress bar on stderr (auto: only on a terminal)")
    return p


def parse_ms(text: str) -> list[int]:
    values: list[int] = []
    for item in str(text).split(","):
        item = item.strip()
        try:
            m = int(item)
        except ValueError:
            raise InputError(f"expected positive token counts separated by commas, got {item!r}",
                             field="--m") from None
        if m <= 0:
            raise InputError(f"token counts must be > 0, got {m}", field="--m")
        values.append(m)
    return sorted(set(values))


def check_device(requested: str | None, detected: Any) -> None:
    """--device may only name the detected device: tuning measures, it cannot simulate."""
    if not requested:
        return
    same_name = requested.strip().lower() in {detected.device_name.lower(), detected.vendor}
    if not same_name:
        try:
            named = Platform.preset(requested)
        except OracleError:
            named = None
        same_name = named is not None and named.vendor == detected.vendor and \
            named.capability == detected.capability
    if not same_name:
        raise InputError(f"{requested!r} is not the detected device ({detected.describe()}); oracle tune measures "
                         "this machine's device and cannot simulate another", field="--device")


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except OracleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted; the tuning file was not changed", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    ms = parse_ms(args.m)
    tp, ep = positive_int(args.tp, "--tp"), positive_int(args.ep, "--ep")
    registry = get_registry()
    policy = policy_from_args(args)
    objective = parse_objective(args.objective or policy.measurements.objective)
    if not objective.weights_for(ms):
        raise InputError(f"{objective} names no M of --m ({','.join(map(str, ms))})", field="--objective")
    for name in args.backend:
        registry.require_backend(name, field="--backend")
    if args.plot:
        _require_matplotlib()
    platform = Platform.detect()
    check_device(args.device, platform)
    out = Path(args.out)
    if out.exists():
        store.read(out)  # a corrupt file fails now, not after minutes of timing
    model = load_model(args.model, tp=tp, ep=ep)
    env = env_from_args(args)
    engine = get_engine(policy, registry)
    groups = distinct_layers(model)
    backends = {b.lower().replace("-", "_") for b in args.backend} or None
    if backends:
        backends = {normalize_backend(b) for b in args.backend}
    cands = {g.key: candidates_for(engine, g.layer, platform, None, env, backends) for g in groups}
    total = sum(len(c) for c in cands.values()) * len(ms)
    print(f"tuning {model.name} (tp={tp} ep={ep}) on {platform.describe()}: {len(groups)} distinct layers, "
          f"{sum(len(c) for c in cands.values())} candidates, M={','.join(map(str, ms))}", file=sys.stderr)
    runner = Runner(platform, registry.pm.hook.quantize_weight, args.repeats)
    enabled = {"on": True, "off": False}.get(args.progress)
    bar = progress_bar(total, enabled)
    try:
        result = runner.tune(groups, cands, ms, bar)
    finally:
        if bar is not None:
            bar.close()
    new = TuningFile(metadata=live_metadata(platform, registry), entries=result.entries,
                     references=result.references)

    def keep(old: TuningFile) -> bool:
        stale = mismatches(old.metadata, platform, registry)
        if stale:
            print(f"warning: {out}: existing entries dropped, measured elsewhere ({'; '.join(stale)})",
                  file=sys.stderr)
        return not stale

    merged = store.merge_into(out, new, keep)
    allow = policy.measurements.allow_testing_only
    print(summary(result, objective, allow), end="")
    failed = sum(1 for e in result.entries if e.status == "failed")
    print(f"wrote {out}: {len(result.entries)} figures ({failed} failed) merged into {len(merged.entries)} entries")
    if args.plot:
        from .plot import plot
        plot(result, objective, args.plot, platform.describe(), allow)
        print(f"plot: {args.plot}")
    return 0


def _require_matplotlib() -> None:
    import importlib.util
    if importlib.util.find_spec("matplotlib") is None:
        raise InputError("needs matplotlib: pip install 'kernel-oracle[plot]'", field="--plot")


def summary(result: Any, objective: Any, allow_testing_only: bool = False) -> str:
    """Per distinct layer: every candidate's figures, ranked at the objective, the engine's pick starred."""
    lines = []
    for g in result.groups:
        lines.append(f"{g.row.role} (x{g.count}): {describe_layer(g.layer)}")
        ranked = ranking(result, g, objective, allow_testing_only)
        if not ranked:
            lines.append("   no viable candidate on this device")
        for i, r in enumerate(ranked):
            mark = "*" if i == 0 and r.score is not None else " "
            text = timing_text(r.points)
            if r.error:
                text += ("; " if text else "") + f"FAILED: {r.error}"
            tag = " [testing only]" if r.testing_only else ""
            lines.append(f" {mark} {r.key[0]} [{r.key[1]}] A={r.key[2]}{tag}: {text}")
    return "\n".join(lines) + "\n"
