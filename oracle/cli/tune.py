"""`oracle tune`: measure every viable kernel of a model's distinct layers on this device.

Exit 0 when the file was written (candidates that failed are recorded in it), 1 on
bad input (unknown model, an M outside 1..MAX_M or one whose buffers would not fit in
memory, an objective naming no M, a --device other than the detected one, an output,
lock or plot path that cannot be written, a corrupt tuning file), 64 for a malformed
option (--repeats 0). Every input is checked before the first timing; the file is
written once, atomically, merged with what is there; nothing is written on failure.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from ..catalog import normalize_backend
from ..errors import InputError, OracleError
from ..explain.describe import describe_layer
from ..exitcodes import bounded_count
from ..models import load_model
from ..objective import parse_objective
from ..platform import Platform
from ..ranking import timing_text
from ..safeio import check_output, write_atomic
from ..session import get_engine, get_registry
from ..tuning import store
from ..tuning.metadata import live_metadata, mismatches
from ..tuning.runner import (Runner, buffer_bytes, candidates_for, device_memory, distinct_layers, progress_bar,
                             ranking)
from ..tuning.schema import MAX_M, MAX_MS, TuningFile
from .options import env_from_args, policy_from_args, positive_int
from .plot import plot

DEFAULT_MS = (1, 16, 256, 4096)
#: Most timed repeats per figure (a figure is a median; thousands add nothing but time).
MAX_REPEATS = 10_000
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
    p.add_argument("--repeats", type=lambda t: bounded_count(t, maximum=MAX_REPEATS), default=None, metavar="N",
                   help=f"timed repeats per figure, 1 to {MAX_REPEATS} (default 30 on a GPU, 5 on CPU; "
                        "fewer for slow calls)")
    p.add_argument("--plot", metavar="FILE.png", help="draw time against M per layer (needs matplotlib)")
    p.add_argument("--policy", action="append", default=[], metavar="FILE", help="policy files above the defaults")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment switches")
    p.add_argument("--progress", choices=["auto", "on", "off"], default="auto",
                   help="progress bar on stderr (auto: only on a terminal)")
    return p


def parse_ms(text: str) -> list[int]:
    """Token counts 1..MAX_M, at most MAX_MS of them (a tuning file holds no more per candidate)."""
    values: list[int] = []
    for item in str(text).split(","):
        item = item.strip()
        if not item.isascii() or not item.isdigit():
            raise InputError(f"expected whole token counts from 1 to {MAX_M} separated by commas, got {item[:40]!r}",
                             field="--m")
        m = int(item[:12])
        if not 1 <= m <= MAX_M or len(item) > 12:
            raise InputError(f"token counts must be from 1 to {MAX_M}, got {item[:40]}", field="--m")
        values.append(m)
    ms = sorted(set(values))
    if len(ms) > MAX_MS:
        raise InputError(f"at most {MAX_MS} token counts, got {len(ms)}", field="--m")
    return ms


def check_device(requested: str | None, detected: Any) -> None:
    """--device may only name the detected device: tuning measures, it cannot simulate."""
    if requested is None:
        return
    if not requested.strip():  # as in `oracle explain`: an empty name is an error, not "detect"
        raise InputError("empty device name; leave --device out to use the detected device", field="--device")
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
        _require_matplotlib(args.plot)
        check_output(args.plot, field="--plot", what="the plot")
    out = store.check_writable(args.out)  # out, lock and folder; a corrupt file fails now, not after timing
    platform = Platform.detect()
    check_device(args.device, platform)
    model = load_model(args.model, tp=tp, ep=ep)
    env = env_from_args(args)
    engine = get_engine(policy, registry)
    groups = distinct_layers(model)
    backends = {b.lower().replace("-", "_") for b in args.backend} or None
    if backends:
        backends = {normalize_backend(b) for b in args.backend}
    cands = {g.key: candidates_for(engine, g.layer, platform, None, env, backends) for g in groups}
    total = sum(len(c) for c in cands.values()) * len(ms)
    check_memory(groups, ms, platform)
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
        write_atomic(args.plot, lambda tmp: plot(result, objective, tmp, platform.describe(), allow))
        print(f"plot: {args.plot}")
    return 0


def check_memory(groups: Any, ms: list[int], platform: Any) -> None:
    """Refuse, before any timing, an M whose buffers for some layer exceed this device's memory."""
    limit = device_memory(platform)
    if not limit or not groups:
        return
    m = max(ms)
    need, layer = max(((buffer_bytes(g.layer, m), g.layer) for g in groups), key=lambda t: t[0])
    if need > limit:
        raise InputError(f"M={m} needs about {need / 2**30:.1f} GiB of inputs, outputs and intermediates for "
                         f"{layer.name or layer.op} alone, more than this device's {limit / 2**30:.1f} GiB; "
                         "give smaller token counts", field="--m")


def _require_matplotlib(path: str) -> None:
    """matplotlib is installed and can write `path`'s format (checked before timing, not after)."""
    import importlib.util
    if importlib.util.find_spec("matplotlib") is None:
        raise InputError("needs matplotlib: pip install 'kernel-oracle[plot]'", field="--plot")
    from matplotlib.backend_bases import FigureCanvasBase
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = path.rpartition(".")[2].lower() if "." in path.rpartition("/")[2] else ""
    if suffix not in formats:
        raise InputError(f"{path!r}: expected a file name ending in one of .{', .'.join(sorted(formats))}",
                         field="--plot")


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
