"""Why bench_peers and sweep_moe time one MoE call differently: the two builds crossed with the two timers.

The fourth pass measured DeepSeek-R1's FP8 MoE at M = 1 as 105.4 us in sweep_moe.py and 116.6 us in
bench_peers.py (graph replay, the same kernels and the same ~105 us of device time per launch sum).
The scripts differ in two ways, so this times each combination in one process:
  build  "sweep": sweep_moe.build (16 experts quantized, repeated to E: distinct memory, equal bytes);
         "peers": bench_peers.bench_moe's build (every expert from its own random BF16 weights, the BF16
         weights kept alive beside it, then the BF16 mode and the emulation reference built as there);
  timer  "timed": sweep_moe.timed (TritonMoE.forward captured in one graph);
         "measure": bench_peers.measure on TritonMoE.apply (eager warm-up, host, eager, then one graph),
         and the same on forward;
  then bench_peers' steps before a row's timing one at a time (the emulation reference's call on the
  first routing, the clock settle, both): R12 timed bench_peers' row at 115.7 us with FC1 at 69.4 us
  of device time, where this script's measure gave 108.7 (R10).
Each row also gives the launch split (torch.profiler, eager calls on the rotated routings). (R10's
version also timed a plain Triton loop reading the same weight bytes as a read ceiling; at 2.7 TB/s it
was slower than the GEMMs themselves, so it was removed.)

    python bench/moe_gap.py [--shape deepseek-r1] [--m 1] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from bench_peers import MOE, SETTLE_S, _own_bf16, emulation_reference, measure
from bench_triton import _quant
from gpu_timing import copy_bandwidth, start, warm_clocks
from sweep_moe import _inputs, build, kernel_split, timed

from oracle import MoELayer
from oracle.catalog import Mode


def peers_build(name: str):
    """bench_peers.bench_moe's TritonMoE (and the BF16 experts it keeps alive)."""
    from oracle_triton.moe import TritonMoE

    ne, topk, h, i, fmt, mode_name, act, params, activation = MOE[name]
    layer = MoELayer(name=name, num_experts=ne, top_k=topk, hidden_size=h, intermediate_size=i,
                     weight_format=fmt, activation=activation, group_size=128 if fmt == "int4" else None)
    mode = Mode(weight=fmt, activation=act, name=mode_name, params=params)
    w13 = torch.randn(ne, 2 * i, h, device="cuda", dtype=torch.bfloat16) * 0.05
    w2 = torch.randn(ne, h, i, device="cuda", dtype=torch.bfloat16) * 0.05
    q13, q2 = _quant(fmt, w13), _quant(fmt, w2)
    tensors = {f"w13{s}": q13.get(f"weight{s}") for s in ("", "_scale", "_global_scale", "_zero_point")}
    tensors.update({f"w2{s}": q2.get(f"weight{s}") for s in ("", "_scale", "_global_scale", "_zero_point")})
    del q13, q2
    t = TritonMoE(layer, mode, None)
    t.process_weights(**tensors)
    t.check_inputs = False
    return t, layer, mode, tensors, w13, w2


def content_gap(name: str, m: int, bw: float, row) -> None:
    """--content (eighth pass): is the gap the build's bytes, their placement, or the first timings
    after a build? In one process: bench_peers' row as it runs (its build, BF16 mode and emulation
    reference alive, the settle, `measure` on apply three times), then the sweep's build timed
    alternately with it, then the sweep's weight and scale bytes copied into bench_peers' own tensors
    (same addresses, the sweep's content) and timed again."""
    ne, topk, h = MOE[name][:3]
    t2, layer, mode, tensors, w13, w2 = peers_build(name)
    per2 = (t2.w13.nbytes() + t2.w2.nbytes()) / ne
    own = _own_bf16(layer, w13, w2)
    em = emulation_reference(layer, mode, tensors)
    torch.cuda.synchronize()
    x, routes, count, hbm = _inputs(m, ne, topk, h, per2, bw)
    print(f"peers build: {count} routings, HBM limit {hbm:.1f} us", flush=True)
    warm_clocks(SETTLE_S)
    calls = [lambda r=r: t2.apply(x, *r) for r in routes]
    for n in range(3):
        row("peers", f"measure(apply) #{n + 1}", lambda: measure(calls, m), t2 if n == 0 else None, x, routes, hbm)
    row("peers", "timed(forward)", lambda: timed(t2, x, routes), hbm=hbm)
    t1, per1 = build(name)
    torch.cuda.synchronize()
    for n in range(2):
        row("sweep", f"timed(forward) #{n + 1}", lambda: timed(t1, x, routes), t1 if n == 0 else None, x, routes, hbm)
        row("peers", f"timed(forward) alternated #{n + 1}", lambda: timed(t2, x, routes), hbm=hbm)
    row("sweep", "measure(apply)", lambda: measure([lambda r=r: t1.apply(x, *r) for r in routes], m), hbm=hbm)
    for mine, theirs in ((t2.w13, t1.w13), (t2.w2, t1.w2)):   # the sweep's bytes at bench_peers' addresses
        mine.weight.copy_(theirs.weight)
        mine.scale.copy_(theirs.scale)
    torch.cuda.synchronize()
    for n in range(2):
        row("peers, sweep bytes", f"timed(forward) #{n + 1}", lambda: timed(t2, x, routes), t2 if n == 0 else None,
            x, routes, hbm)
    row("peers, sweep bytes", "measure(apply)", lambda: measure(calls, m), hbm=hbm)
    row("sweep", "timed(forward) last", lambda: timed(t1, x, routes), hbm=hbm)
    del own, em


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="deepseek-r1", choices=list(MOE))
    ap.add_argument("--m", type=int, default=1)
    ap.add_argument("--steps-only", action="store_true",
                    help="only bench_peers' build and its steps one at a time (skip the sweep build and the timer cross)")
    ap.add_argument("--content", action="store_true",
                    help="only: bench_peers' build and row procedure (first timings after the build), the sweep's "
                         "build in the same process, alternated, then the sweep's weight bytes copied into "
                         "bench_peers' tensors (content or placement?)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if not start("moe_gap"):
        return 2
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    name, m = args.shape, args.m
    ne, topk, h = MOE[name][:3]
    rows: list[dict] = []

    def row(build_name, timer, fn_us, t=None, x=None, routes=None, hbm=None):
        t0 = time.perf_counter()
        res = fn_us()
        us = res if isinstance(res, float) else res["graph"]
        r = {"build": build_name, "timer": timer, "us": us, "hbm_us": hbm,
             **({} if isinstance(res, float) else {"eager": res["eager"], "host": res["host"]})}
        if t is not None:
            r["kernels"] = kernel_split(t, x, routes)
        rows.append(r)
        save()
        print(f"  {build_name:14} {timer:18} graph {us:7.1f} us"
              + ("" if isinstance(res, float) else f"  eager {res['eager']:7.1f}  host {res['host']:6.1f}")
              + f"  ({time.perf_counter() - t0:.1f} s)" + (f"\n      launches: {r['kernels']}" if t is not None else ""),
              flush=True)

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"shape": name, "m": m, "copy_bandwidth": bw, "rows": rows}, f, indent=1)

    def both(label, t, per_expert):
        x, routes, count, hbm = _inputs(m, ne, topk, h, per_expert, bw)
        print(f"{label}: {count} routings, HBM limit {hbm:.1f} us", flush=True)
        t.forward(x, *routes[0])
        row(label, "timed(forward)", lambda: timed(t, x, routes), t, x, routes, hbm)
        row(label, "measure(apply)", lambda: measure([lambda r=r: t.apply(x, *r) for r in routes], m), hbm=hbm)
        row(label, "measure(forward)", lambda: measure([lambda r=r: t.forward(x, *r) for r in routes], m), hbm=hbm)
        row(label, "timed(forward) again", lambda: timed(t, x, routes), hbm=hbm)

    if args.content:
        content_gap(name, m, bw, row)
        return 0
    if not args.steps_only:
        t1, per_expert = build(name)
        both("sweep build", t1, per_expert)
        del t1
        torch.cuda.empty_cache()
    t2, layer, mode, tensors, w13, w2 = peers_build(name)
    per2 = (t2.w13.nbytes() + t2.w2.nbytes()) / ne
    if not args.steps_only:
        both("peers build", t2, per2)
    own = _own_bf16(layer, w13, w2)           # what bench_peers also holds while it times
    em = emulation_reference(layer, mode, tensors)
    torch.cuda.synchronize()
    if not args.steps_only:
        both("peers + bf16/em", t2, per2)
    if em is not None:                        # what bench_peers' row does before its timing, one step at a time
        x, routes, _, hbm = _inputs(m, ne, topk, h, per2, bw)
        calls = [lambda r=r: t2.apply(x, *r) for r in routes]
        t2.apply(x, *routes[0])               # compiled and warm before the first step
        for label, reference, settle in (("plain", False, False), ("after reference", True, False),
                                         ("plain again", False, False), ("after settle", False, True),
                                         ("after reference + settle", True, True), ("plain at the end", False, False)):
            def run(reference=reference, settle=settle):
                if reference:
                    em.apply(x, *routes[0])
                if settle:
                    warm_clocks(SETTLE_S)
                return measure(calls, m)
            row("peers + bf16/em", label, run, hbm=hbm)
    del own, em
    return 0


if __name__ == "__main__":
    sys.exit(main())
