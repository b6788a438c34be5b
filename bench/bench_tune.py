"""Benchmark: whole-model time of the static policy against the measured policy.

For each model (default: qwen3-30b-a3b-fp8 at tp 1 and deepseek-r1 at tp 8), optionally
run `oracle tune` first (--tune; the time it takes is printed against the 3-minute
budget), then sum, over every quantized layer of one rank, the measured time of the
kernel each policy selects, at M = 1 and M = 4096:

  static               the policy order (no measurements)
  measured             ranked by measured time at that M (objective M:1); testing-only kernels held back
  measured+testing     the same, with measurements.allow_testing_only (emulation may win)

Targets (issue 13): the measured policy is never slower than the static one for any
layer; at M = 1 the whole model is >= 1.3x faster once Hopper-tier kernels exist.

    python bench/bench_tune.py --tune --dir /tmp/tuning          # on the GPU: tune, then compare
    python bench/bench_tune.py --dir /tmp/tuning                 # compare existing tuning files
    python bench/bench_tune.py --models /path/to/model:1 --m 1,16 --dir d --tune   # any model:tp
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

from oracle import Platform, select_backend
from oracle.cli import main as oracle_main
from oracle.models import load_model
from oracle.session import get_registry
from oracle.tuning.measurements import load_measurements
from oracle.tuning.schema import layer_key

DEFAULT_MODELS = ["qwen3-30b-a3b-fp8:1", "deepseek-r1:8"]
TUNE_BUDGET_S = 180.0
SPEEDUP_TARGET = 1.3


def model_sum(model, platform, registry, mset, lookup, m: int) -> tuple[float, int, dict]:
    """(sum of ms over quantized layers, layers without a figure, layer key -> (kernel, ms))."""
    total, missing, per = 0.0, 0, {}
    for row in model.layers:
        if not row.quantized:
            continue
        d = select_backend(row.layer, platform, env={}, measurements=mset)
        key = layer_key(row.layer)
        found = (lookup.for_layer(key) or {}).get((d.kernel, d.mode, d.activation_format))
        ms = found.times.get(m) if found is not None else None
        per[key] = (d.kernel, ms, row.role)
        if ms is None:
            missing += 1
        else:
            total += ms
    return total, missing, per


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS, metavar="NAME:TP")
    ap.add_argument("--dir", default="tuning", help="folder of the tuning files (NAME.json)")
    ap.add_argument("--tune", action="store_true", help="run oracle tune for each model first")
    ap.add_argument("--m", default="1,4096", help="token counts compared (the tuning uses --tune-m)")
    ap.add_argument("--tune-m", default="1,16,256,4096", help="token counts tuned")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    platform = Platform.detect()
    registry = get_registry()
    ms = [int(v) for v in args.m.split(",")]
    print(f"device: {platform.describe()}")
    results = []
    for item in args.models:
        name, _, tp_text = item.partition(":")
        tp = int(tp_text or 1)
        out = folder / f"{Path(name).name}-tp{tp}.json"
        tune_s = None
        if args.tune:
            start = time.perf_counter()
            code = oracle_main(["tune", "--model", name, "--tp", str(tp), "--m", args.tune_m, "--out", str(out),
                                "--progress", "off"])
            tune_s = time.perf_counter() - start
            print(f"\n{name} tp={tp}: oracle tune took {tune_s:.1f} s (budget {TUNE_BUDGET_S:.0f} s: "
                  f"{'met' if tune_s <= TUNE_BUDGET_S else 'MISSED'}), exit {code}")
            if code != 0:
                return code
        model = load_model(name, tp=tp)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lookup = load_measurements([out]).table(platform, registry)
        for w in caught:
            print(f"warning: {w.message}")
        row = {"model": name, "tp": tp, "tune_s": tune_s, "sums": {}}
        print(f"\n{name} tp={tp}: sum over {len(model.quantized_layers)} quantized layers of one rank (ms)")
        print(f"  {'M':>5} {'static':>10} {'measured':>10} {'x':>6} {'+testing':>10} {'x':>6}  notes")
        for m in ms:
            static = model_sum(model, platform, registry, None, lookup, m)
            measured = model_sum(model, platform, registry, load_measurements([out], f"{m}:1"), lookup, m)
            testing = model_sum(model, platform, registry,
                                load_measurements([out], f"{m}:1", allow_testing_only=True), lookup, m)
            worse = [f"{static[2][k][2]}: {measured[2][k][0]} {measured[2][k][1]:.4g} ms vs static "
                     f"{static[2][k][0]} {static[2][k][1]:.4g} ms"
                     for k in static[2] if measured[2][k][1] is not None and static[2][k][1] is not None
                     and measured[2][k][1] > static[2][k][1] * 1.0001]
            speed = static[0] / measured[0] if measured[0] and static[0] else float("nan")
            speed_t = static[0] / testing[0] if testing[0] else float("nan")
            notes = []
            if static[1] or measured[1]:
                notes.append(f"layers without a figure: static {static[1]}, measured {measured[1]}")
            notes.append("measured never slower per layer" if not worse else f"SLOWER on {len(worse)} layer(s)")
            print(f"  {m:>5} {static[0]:10.3f} {measured[0]:10.3f} {speed:5.2f}x {testing[0]:10.3f} "
                  f"{speed_t:5.2f}x  {'; '.join(notes)}")
            for w in worse[:5]:
                print(f"        {w}")
            changed = sorted({f"{static[2][k][2]}: {static[2][k][0]} -> {measured[2][k][0]}"
                              for k in static[2] if static[2][k][0] != measured[2][k][0]})
            for c in changed:
                print(f"        changed by measurement: {c}")
            row["sums"][m] = {"static_ms": static[0], "measured_ms": measured[0], "speedup": speed,
                              "measured_testing_ms": testing[0], "speedup_testing": speed_t,
                              "slower_layers": worse, "changed": changed}
        if 1 in row["sums"]:
            s = row["sums"][1]["speedup"]
            print(f"  M=1 whole-model speed-up of the measured policy: {s:.2f}x (target >= {SPEEDUP_TARGET}x once "
                  f"Hopper-tier kernels exist: {'met' if s >= SPEEDUP_TARGET else 'not met'})")
        results.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": platform.describe(), "models": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
