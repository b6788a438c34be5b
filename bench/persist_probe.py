"""Where the persistent MoE launch's time goes (PERSIST at M=1): each program's timeline, from the kernel's own stamps.

The seventh pass measured PERSIST (both GEMMs' tiles in one launch, moe_persist.py) slower than the two-launch
tuned entry on DeepSeek-R1 at M=1 and never found why. This times the entry and PERSIST variants of it in one
process (graph replay, weights from HBM as sweep_moe times them), then runs each PERSIST variant once more with
STAMP on (moe_persist.STAMP_SLOTS per program: start, inputs rounded, end, and per tile its begin, the moment its
FC1 pair was ready (FC2 tiles) and its end, on the GPU's global timer) and prints where the time went: the
launch's start spread, the input rounding, FC1 and FC2 tile times, FC2's waits for its pairs, the programs'
idle tail, and the bytes streamed per 5 us bin (the achieved bandwidth through the call).

    python bench/persist_probe.py --shape deepseek-r1 --persist 1 2 [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys

import torch
from bench_peers import MOE
from gpu_timing import copy_bandwidth, start, warm_calls
from moe_bisect import build, tensors_for
from sweep_moe import _inputs, kernel_split, timed


def timeline(stamps: torch.Tensor, total1: int, bytes1: int, bytes2: int, bin_us: float = 5.0) -> dict:
    """The stamps of one call -> a summary (us from the first program's start)."""
    from oracle_triton.moe_persist import STAMP_TILES

    a = stamps.cpu().double()
    t0 = float(a[:, 0].min())
    us = lambda v: (float(v) - t0) / 1e3      # noqa: E731
    begin_spread = float(a[:, 0].max() - a[:, 0].min()) / 1e3
    rounding = ((a[:, 1] - a[:, 0]) / 1e3).median().item()
    ends = (a[:, 3] - t0) / 1e3
    fc1, fc2 = [], []
    for row in a:
        for i in range(min(int(row[2]), int(STAMP_TILES.value))):
            tile, b, r, e = (float(v) for v in row[4 + 4 * i: 8 + 4 * i])
            (fc1 if tile < total1 else fc2).append((us(b), us(r), us(e)))
    dur = lambda tiles, lo: sorted(e - r for b, r, e in tiles)[int(lo * (len(tiles) - 1))] if tiles else float("nan")  # noqa: E731
    span = float(ends.max())
    bins = [0.0] * (int(span // bin_us) + 1)
    for tiles, nbytes in ((fc1, bytes1), (fc2, bytes2)):
        for b, r, e in tiles:           # a tile's bytes spread evenly over its run (after any wait)
            length = max(e - r, 1e-3)
            for j in range(int(r // bin_us), int(e // bin_us) + 1):
                lo, hi = max(r, j * bin_us), min(e, (j + 1) * bin_us)
                if hi > lo and j < len(bins):
                    bins[j] += nbytes * (hi - lo) / length
    return {
        "span_us": span, "start_spread_us": begin_spread, "rounding_us": rounding,
        "fc1_tiles": len(fc1), "fc1_tile_us_p10_p50_p90": [dur(fc1, q) for q in (0.1, 0.5, 0.9)],
        "fc1_last_end_us": max((e for _, _, e in fc1), default=float("nan")),
        "fc2_tiles": len(fc2), "fc2_tile_us_p10_p50_p90": [dur(fc2, q) for q in (0.1, 0.5, 0.9)],
        "fc2_first_begin_us": min((b for b, _, _ in fc2), default=float("nan")),
        "fc2_wait_us_sum_max": [sum(r - b for b, r, _ in fc2), max((r - b for b, r, _ in fc2), default=0.0)],
        "idle_tail_us_mean": float((ends.max() - ends).mean()),
        "tb_per_s_by_bin": [round(v / (bin_us * 1e-6) / 1e12, 2) for v in bins],
    }


def precompile(name: str, persist: list[int]) -> int:
    """One call of each PERSIST variant (with and without STAMP) on 16 experts: Triton compiles them into its cache."""
    import oracle_triton.moe as current
    from oracle_triton.moe_persist import STAMP_SLOTS

    if not torch.cuda.is_available():
        print("persist_probe: needs a CUDA device", file=sys.stderr)
        return 2
    ne, topk, h = MOE[name][:3]
    small = 16
    t = build(current, name, tensors_for(name, small), small)
    x, routes, _, _ = _inputs(1, small, topk, h, 1.0, 1.0)
    t.experts = ne
    entry = t.config_for(1, topk)
    t.experts = small
    for p in persist:
        t.config = dict(entry, PERSIST=p)
        t.forward(x, *routes[0])
        t.stamps = torch.zeros(p * int(t.facts["sms"]), int(STAMP_SLOTS.value), dtype=torch.int64, device="cuda")
        t.forward(x, *routes[0])
        t.stamps = None
    torch.cuda.synchronize()
    print(f"persist_probe: compiled PERSIST {persist} with and without stamps", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="deepseek-r1", choices=list(MOE))
    ap.add_argument("--persist", type=int, nargs="+", default=[1, 2], help="PERSIST values (programs per SM)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--precompile-only", action="store_true",
                    help="compile the kernels (16 experts, one call each, with and without stamps) and exit: run beside "
                         "another process's timings, the probe then finds them in Triton's cache")
    args = ap.parse_args(argv)
    if args.precompile_only:
        return precompile(args.shape, args.persist)
    if not start("persist_probe"):
        return 2
    from oracle_triton.moe_persist import STAMP_SLOTS

    bw = copy_bandwidth()
    name = args.shape
    ne, topk, h, i = MOE[name][:4]
    import oracle_triton.moe as current

    t = build(current, name, tensors_for(name))
    per_expert = (t.w13.nbytes() + t.w2.nbytes()) / ne
    x, routes, count, hbm = _inputs(1, ne, topk, h, per_expert, bw)
    entry = t.config_for(1, topk)
    runs = {"entry": entry, **{f"entry + PERSIST {p}": dict(entry, PERSIST=p) for p in args.persist}}
    out = {"shape": name, "copy_bandwidth": bw, "hbm_us": hbm, "entry": entry, "times": [], "timelines": {}}
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s, HBM limit {hbm:.1f} us; entry {entry}", flush=True)
    for label, cfg in runs.items():           # compile each before the timings
        t.config = cfg
        t.forward(x, *routes[0])
    t.config = entry
    warm_calls([lambda r=r: t.forward(x, *r) for r in routes], 0.3)
    for rnd in range(args.rounds):
        for label, cfg in runs.items():
            t.config = cfg
            us = timed(t, x, routes)
            split = kernel_split(t, x, routes) if rnd == 0 else None
            out["times"].append({"label": label, "round": rnd, "us": us, "launches": split})
            print(f"  {label:22} round {rnd}: {us:7.1f} us  {us / hbm:5.2f}x HBM" + (f"   {split}" if split else ""),
                  flush=True)
    bn1 = entry["BLOCK_N"]
    bn2 = entry.get("BLOCK_N2", bn1)
    total1 = topk * -(-i // bn1)
    for p in args.persist:
        label = f"entry + PERSIST {p}"
        t.config = runs[label]
        programs = p * int(t.facts["sms"])
        res = []
        for j in range(3):                  # cold weights each time: the next routing's experts
            t.stamps = torch.zeros(programs, int(STAMP_SLOTS.value), dtype=torch.int64, device="cuda")
            t.forward(x, *routes[(j + 1) % len(routes)])
            torch.cuda.synchronize()
            res.append(timeline(t.stamps, total1, 2 * bn1 * h, bn2 * i))
            t.stamps = None
        out["timelines"][label] = res
        for r in res:
            print(f"  {label} stamps: " + json.dumps({k: (round(v, 1) if isinstance(v, float) else
                                                        [round(u, 1) for u in v] if isinstance(v, list) and
                                                        k != "tb_per_s_by_bin" else v) for k, v in r.items()}),
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
