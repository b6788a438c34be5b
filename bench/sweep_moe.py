"""Sweep: the fused MoE's small-M (decode) paths on a GPU, weights served from HBM.

Per model of bench_peers.MOE and M (1, 8, 16), beside the aligned grouped GEMM and the path the
shipped rules pick: variants of the CUDA-core direct path (TritonMoE.apply_direct: the old up
kernel; moe_up_split_kernel with its BLOCK_N / BLOCK_K / SPLIT_K / warps; the down kernel's
BLOCK_N2 / BLOCK_K2 / WARPS2) and of the tensor-core direct path (apply_direct_mma: BLOCK_M/N,
stages). Each timed figure is one CUDA graph that cycles through routings whose experts differ
(M = 1: disjoint expert sets) until more than 256 MB of experts are touched, so the weights come
from HBM, not the 60 MB L2. Every variant's output is compared with the aligned grouped GEMM's
(checked against oracle-emulation by the GPU tests); one that differs by more than the GPU tests'
tolerance (1e-2 relative; 5e-2 with FP8 and 8e-2 with NVFP4 activations, where rounding flips of
FC2's input differ between paths) is flagged DISAGREES and never chosen. M = 1 runs every
variant (up variants with the default down kernel, then down variants with the best up kernel);
M = 8 and 16 time the M = 1 winners and a few neighbours.

    python bench/sweep_moe.py [--shapes NAME ...] [--m 1 8 16] [--budget-s 100] [--json out.json]
                              [--quick | --configs variants.json [--precompile N] [--split]]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch
from bench_peers import MOE, ROTATE, _routings
from bench_triton import _quant
from gpu_timing import copy_bandwidth, graph_ms, rel, start, warm_calls

from oracle import MoELayer
from oracle.catalog import Mode

ORDER = ["qwen3-30b-a3b", "gpt-oss-20b", "deepseek-r1", "gpt-oss-120b", "qwen3-235b-a22b-nvfp4",
         "qwen3-30b-a3b-int4-zp"]
DEVICE = "cuda"      # a CPU dry run of the logic (Triton interpreter) sets "cpu"
CHUNK = 16          # experts quantized once and repeated (the timing reads every copy from HBM)


def _up(bn, bk, split, warps):
    return {"BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": warps}


def _down(bn, bk, warps):
    return {"BLOCK_N2": bn, "BLOCK_K2": bk, "WARPS2": warps}


#: (up variants, down variants) per weight family; the first down variant is the default.
VARIANTS = {
    "fp8": ([_up(32, 128, 1, 4), _up(16, 256, 1, 4), _up(16, 128, 1, 4), _up(8, 256, 1, 4), _up(16, 256, 2, 4),
             _up(16, 512, 1, 8), _up(32, 128, 2, 4), _up(16, 256, 4, 4), _up(8, 256, 2, 4), _up(8, 128, 2, 2)],
            [_down(32, 256, 4), _down(16, 256, 4), _down(8, 256, 4), _down(16, 128, 4), _down(32, 512, 8),
             _down(64, 256, 8)]),
    "w4": ([_up(16, 256, 1, 4), _up(32, 256, 1, 4), _up(16, 512, 1, 4), _up(32, 512, 1, 8), _up(64, 256, 1, 8),
            _up(16, 1024, 1, 8), _up(32, 256, 2, 4), _up(16, 512, 2, 4), _up(8, 512, 1, 4), _up(64, 512, 2, 8)],
           [_down(16, 256, 4), _down(32, 256, 4), _down(32, 512, 8), _down(16, 512, 4), _down(64, 256, 8),
            _down(8, 512, 4)]),
    "nvfp4": ([_up(16, 256, 1, 4), _up(16, 512, 1, 8), _up(32, 256, 1, 8), _up(16, 256, 2, 4), _up(8, 256, 1, 4),
               _up(32, 128, 1, 4), _up(16, 128, 2, 4)],
              [_down(16, 256, 4), _down(32, 256, 8), _down(16, 512, 8), _down(8, 256, 4)]),
}


def _mma(bn, stages, bk=128, warps=4, full=1, bm=16):
    return {"DIRECT": 1, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages,
            "FULL_TILE": full}


#: TritonMoE.apply_direct_mma (tensor-core tiles, one pair per program) per weight family.
MMA = {"fp8": [_mma(32, 4), _mma(16, 4), _mma(64, 4), _mma(32, 3), _mma(32, 6), _mma(16, 6), _mma(64, 3),
               _mma(64, 4, bm=64), _mma(32, 4, bm=64)],
       "w4": [_mma(32, 3), _mma(64, 3), _mma(32, 4)],
       "nvfp4": [_mma(32, 3), _mma(64, 3)]}


#: --quick (a second round): the first round's winners and their neighbours only. FP8: the tensor-core
#: direct path on the quantization launch's codes (the first round measured it with the rounding inside
#: each K tile, QUANT_IN, 2.3-3x slower), and no CUDA-core variants beyond the default.
QUICK_VARIANTS = {
    "fp8": ([], [_down(32, 256, 4)]),
    "w4": ([_up(8, 512, 1, 4), _up(16, 512, 1, 4), _up(8, 1024, 1, 4), _up(8, 256, 1, 2)], [_down(8, 512, 4)]),
    "nvfp4": ([_up(16, 256, 1, 4), _up(8, 256, 1, 4), _up(8, 512, 1, 4)], [_down(16, 256, 4), _down(8, 256, 4)]),
}
QUICK_MMA = {"fp8": [_mma(64, 3), _mma(64, 4, warps=8)], "w4": [], "nvfp4": []}


def family(fmt: str, act: str) -> str:
    if fmt.startswith("fp8"):
        return "fp8"
    return "nvfp4" if act == "nvfp4" else "w4"


def build(name, experts: int | None = None):
    """TritonMoE on `name`'s shape: CHUNK experts quantized by oracle-emulation, repeated to E (or to
    `experts`: the precompile workers build CHUNK experts only, so eight of them fit beside each other on
    the device where eight full DeepSeek-R1 layers did not (R14); the kernels take the expert count as
    an int that Triton specializes only by its divisibility by 16, as the full count's)."""
    from oracle_triton.moe import TritonMoE

    ne, topk, h, i, fmt, mode_name, act, params, activation = MOE[name]
    ne = experts or ne
    layer = MoELayer(name=name, num_experts=ne, top_k=topk, hidden_size=h, intermediate_size=i,
                     weight_format=fmt, activation=activation, group_size=128 if fmt == "int4" else None)
    sym = not name.endswith("-zp")
    c = min(CHUNK, ne)
    tensors = {}
    for key, rows, cols in (("w13", 2 * i, h), ("w2", h, i)):
        q = _quant(fmt, torch.randn(c, rows, cols, device=DEVICE, dtype=torch.bfloat16) * 0.05, symmetric=sym)
        for suffix in ("", "_scale", "_global_scale", "_zero_point"):
            v = q.get(f"weight{suffix}")
            if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == c:
                v = v.repeat(math.ceil(ne / c), *([1] * (v.dim() - 1)))[:ne].contiguous()
            tensors[f"{key}{suffix}"] = v
        del q
    t = TritonMoE(layer, Mode(weight=fmt, activation=act, name=mode_name, params=params), None)
    t.process_weights(**tensors)
    t.check_inputs = False
    return t, (t.w13.nbytes() + t.w2.nbytes()) / ne


def timed(t, x, routes) -> float:
    """us per call: one graph cycling through the routings (>= 20 calls)."""
    n = len(routes)
    reps = n * max(1, math.ceil(20 / n))

    def loop():
        for j in range(reps):
            t.forward(x, *routes[j % n])
    return graph_ms(loop, 1) * 1e3 / reps


def kernel_split(t, x, routes, calls: int = 8) -> str:
    """Device time of each launch of one call (name:us, in launch order), averaged over `calls` eager calls
    cycling through the routings (so the weights come from HBM as in the timed graph), from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    n = min(calls, len(routes))
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for j in range(n):
                t.forward(x, *routes[j])
            torch.cuda.synchronize()
        ops = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
        per = len(ops) // n
        if per == 0 or per * n != len(ops):
            return f"{len(ops)} GPU ops in {n} calls"
        avg = [sum(ops[c * per + p].device_time for c in range(n)) / n for p in range(per)]
        return ", ".join(f"{ops[p].name[:22]}:{a:.1f}" for p, a in enumerate(avg)) + f" (sum {sum(avg):.1f})"
    except Exception as exc:  # noqa: BLE001 - a split is a detail, never a failure
        return f"no split ({type(exc).__name__}: {str(exc)[:80]})"


def _inputs(m, ne, topk, h, per_expert, bw):
    """Tokens, the routings a timed graph cycles through (until > ROTATE bytes of experts are touched;
    M = 1: disjoint expert sets), their number and the HBM limit in us (experts touched / bandwidth)."""
    x = torch.randn(m, h, device=DEVICE, dtype=torch.bfloat16)
    touched_one = min(ne, m * topk) * per_expert
    count = max(2, min(ne // topk if m == 1 else 16, ROTATE // max(1, int(touched_one)) + 1))
    routes = _routings(m, ne, topk, count, DEVICE)
    touched = sum(int(torch.unique(ids).numel()) for _, ids in routes) / len(routes)
    return x, routes, count, touched * per_expert / bw * 1e6


def _record(rows, save, name, mode_name, m, label, cfg, us, hbm, err, tol, count) -> bool:
    """One timed variant: a row (saved at once) and its line; True if it agrees within tol."""
    ok = err < tol
    rows.append(dict(shape=name, mode=mode_name, m=m, variant=label, config=cfg, us=us, hbm_us=hbm, err=err, ok=ok,
                     routings=count))
    save()
    print(f"  {name:22} M={m:<3} {label:34} {us:8.1f} us  {us / hbm:5.2f}x HBM ({hbm:.1f})  err {err:.1e}"
          f"{'' if ok else '  DISAGREES'}", flush=True)
    return ok


def sweep_shape(name, ms, bw, rows, deadline, tol, save=lambda: None, quick=False):
    from oracle_triton.moe import moe_config, moe_gemv_config

    ne, topk, h, i, fmt, mode_name, act, params, activation = MOE[name]
    t0 = time.perf_counter()
    t, per_expert = build(name)
    lay = t.w13.layout
    words = t.facts["hw_fp8"] and t.act == 0
    base = moe_gemv_config(1, lay.elem, lay.group, words=words)
    ups, downs = (QUICK_VARIANTS if quick else VARIANTS)[family(fmt, act)]
    print(f"\n== {name} ({mode_name}, E={ne} top{topk} H={h} I={i}; built in {time.perf_counter() - t0:.1f} s)",
          flush=True)
    best_cc = best_mma = None
    for m in ms:
        if time.perf_counter() > deadline:
            print(f"budget spent: {name} M={m} and later skipped", flush=True)
            return
        x, routes, count, hbm = _inputs(m, ne, topk, h, per_expert, bw)

        def run(label, cfg):
            if time.perf_counter() > deadline:
                return None
            t.config = cfg
            try:
                y = t.forward(x, *routes[0])
                err = rel(y, ref) if ref is not None else 0.0
                us = timed(t, x, routes)
            except Exception as exc:  # noqa: BLE001 - a variant that does not compile is reported
                print(f"  {name} M={m} {label}: FAILED {type(exc).__name__}: {str(exc)[:160]}", flush=True)
                return None
            finally:
                t.config = None
            return us if _record(rows, save, name, mode_name, m, label, cfg, us, hbm, err, tol, count) else None

        ref = None
        aligned = moe_config(m, topk, ne, lay.pack)
        t.config = aligned
        ref = t.forward(x, *routes[0]).clone()
        t.config = None
        run("aligned", aligned)
        run("shipped-rule", None)
        old = {**moe_gemv_config(m, lay.elem, lay.group, words=words)}
        run("direct (moe_gemv_config)", old)
        mmas = (QUICK_MMA if quick else MMA)[family(fmt, act)]
        if m == 1 or best_cc is None:
            def cuda_core():
                best = None
                for up in ups:
                    cfg = {**base, **up, **downs[0]}
                    us = run("up " + _short(up), cfg)
                    if us is not None and (best is None or us < best[0]):
                        best = (us, cfg)
                for down in downs[1:] if best is not None else []:
                    cfg = {**best[1], **down}
                    us = run("down " + _short(down), cfg)
                    if us is not None and us < best[0]:
                        best = (us, cfg)
                return best

            def tensor_core():
                best = None
                for cfg in mmas:
                    us = run("mma " + _short(cfg), cfg)
                    if us is not None and (best is None or us < best[0]):
                        best = (us, cfg)
                if best is not None:                 # the top-k sum inside the FC2 GEMM (one launch fewer)
                    cfg = {**best[1], "FUSE_SUM": 1}
                    us = run("mma best + FUSE_SUM", cfg)
                    if us is not None and us < best[0]:
                        best = (us, cfg)
                return best
            if family(fmt, act) == "fp8":            # the likelier winner first (the budget may end)
                best_mma = tensor_core()
                best_cc = cuda_core()
            else:
                best_cc = cuda_core()
                best_mma = tensor_core()
        else:
            for label, b in (("cuda-core", best_cc), ("mma", best_mma)):
                if b is not None:
                    us = run(f"best {label} of M=1", b[1])
            if best_cc is not None:
                for split in (2, 4):
                    if best_cc[1].get("SPLIT_K", 1) != split:
                        run(f"best cuda-core of M=1, split {split}", {**best_cc[1], "SPLIT_K": split})
            if best_mma is not None:
                for cfg in mmas[:3]:
                    if cfg != best_mma[1]:
                        run("mma " + _short(cfg), cfg)
        mine = [r for r in rows if r["shape"] == name and r["m"] == m and r.get("ok")]
        if mine:
            top = min(mine, key=lambda r: r["us"])
            print(f"BEST {name} M={m}: {top['variant']} {top['us']:.1f} us ({top['us'] / hbm:.2f}x HBM {hbm:.1f}) "
                  f"{top['config']}", flush=True)
    del t
    torch.cuda.empty_cache()


def explicit(name, ms, bw, rows, deadline, tol, configs, save=lambda: None, split=False, rounds=1):
    """Time the shipped rule's path and each of `configs` (label -> config; ONLY_M: at that M only) on
    `name`, M in ms; every variant's output is compared with the shipped path's (DISAGREES beyond tol).
    rounds > 1: the whole list again that many times in the same process (labels get " #r"; the launch
    split only in the first), so each figure comes with its spread over repeats."""
    ne, topk, h, i, fmt, mode_name, act, params, activation = MOE[name]
    t0 = time.perf_counter()
    t, per_expert = build(name)
    print(f"\n== {name} ({mode_name}, E={ne} top{topk} H={h} I={i}; built in {time.perf_counter() - t0:.1f} s)",
          flush=True)
    for m in ms:
        x, routes, count, hbm = _inputs(m, ne, topk, h, per_expert, bw)
        ref = None
        # the build or the precompile left the GPU idle: the shipped path's own calls first (a BF16 warm-up here
        # power-capped the first variant's timing: gpu_timing.warm_calls, bench_peers.SETTLE_S)
        warm_calls([lambda r=r: t.forward(x, *r) for r in routes], 0.3)
        variants = [("shipped-rule", None), *configs.items()]
        for r, (label, cfg) in enumerate((f"{lab} #{n + 1}" if rounds > 1 else lab, c)
                                         for n in range(rounds) for lab, c in variants):
            if cfg is not None and "ONLY_M" in cfg:          # a variant for one token count
                if cfg["ONLY_M"] != m:
                    continue
                cfg = {k: v for k, v in cfg.items() if k != "ONLY_M"}
            if time.perf_counter() > deadline:
                print(f"budget spent: {name} M={m} {label} and later skipped", flush=True)
                break
            t.config = cfg
            try:
                y = t.forward(x, *routes[0])
                if ref is None:
                    ref = y.clone()
                err = rel(y, ref)
                us = timed(t, x, routes)
                kernels = kernel_split(t, x, routes) if split and r < len(variants) else None
            except Exception as exc:  # noqa: BLE001 - a variant that does not compile is reported
                print(f"  {name} M={m} {label}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                continue
            finally:
                t.config = None
            _record(rows, save, name, mode_name, m, label, cfg, us, hbm, err, tol, count)
            if kernels:
                rows[-1]["kernels"] = kernels
                print(f"      launches (eager, device us): {kernels}", flush=True)
    del t
    torch.cuda.empty_cache()


def _jobs(ms, configs) -> list[tuple[int, dict | None]]:
    """(M, config) of every variant explicit() times (None: the shipped rule)."""
    out = []
    for m in ms:
        for cfg in [None, *configs.values()]:
            if cfg is not None and cfg.get("ONLY_M", m) != m:
                continue
            out.append((m, None if cfg is None else {k: v for k, v in cfg.items() if k != "ONLY_M"}))
    return out


def _compile_some(name, jobs) -> str:
    """A worker: build `name`, run each job's call once (Triton compiles into its on-disk cache, which
    the timing process then reads)."""
    ne = min(CHUNK, MOE[name][0])
    t, per_expert = build(name, ne)
    topk, h = MOE[name][1:3]
    done = 0
    for m, cfg in jobs:
        x, routes, _, _ = _inputs(m, ne, topk, h, per_expert, 1.0)
        if cfg is None:                          # the shipped rule: what the full layer picks (tuned entry)
            t.experts = MOE[name][0]
            cfg = t.config_for(m, topk)
            t.experts = ne
        t.config = cfg
        try:
            t.forward(x, *routes[0])
            done += 1
        except Exception:  # noqa: BLE001 - the timing process reports the failure
            pass
    torch.cuda.synchronize()
    return f"{done}/{len(jobs)}"


def precompile(name, ms, configs, workers: int, timeout_s: float) -> None:
    """Compile explicit()'s variants in `workers` processes at once (Triton's compiler is single-threaded
    per process): a device round's seconds then go to timing, not compiling. Best effort: a failure or
    the timeout only leaves the compiling to the timing process."""
    import multiprocessing

    jobs = _jobs(ms, configs)
    ne, _, h, i, fmt = MOE[name][:5]
    model = 4 * min(CHUNK, ne) * 3 * h * i + (2 << 30)   # each worker: CHUNK experts' BF16 and codes, a context
    fits = int(torch.cuda.mem_get_info()[0] * 0.7 // max(model, 1.0))
    if fits < workers:
        print(f"precompile {name}: {fits} workers fit in device memory (asked {workers})", flush=True)
        workers = max(1, fits)
    chunks = [jobs[i::workers] for i in range(min(workers, len(jobs)))]
    t0 = time.perf_counter()
    try:
        with multiprocessing.get_context("spawn").Pool(len(chunks)) as pool:
            res = pool.starmap_async(_compile_some, [(name, c) for c in chunks]).get(timeout=timeout_s)
        print(f"precompiled {name}: {res} in {time.perf_counter() - t0:.1f} s", flush=True)
    except Exception as exc:  # noqa: BLE001 - best effort
        print(f"precompile {name}: {type(exc).__name__}: {str(exc)[:200]} after {time.perf_counter() - t0:.1f} s",
              flush=True)


def _configs_for(path: str, name: str) -> dict:
    """--configs' {label: config} for `name` (the file holds one for all shapes or one per shape)."""
    with open(path) as f:
        configs = json.load(f)
    return configs.get(name, {}) if set(configs) <= set(MOE) else configs


def _short(cfg: dict) -> str:
    return " ".join(f"{k.replace('BLOCK_', '').replace('num_', '')}={v}" for k, v in cfg.items())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", choices=list(MOE), default=ORDER)
    ap.add_argument("--m", type=int, nargs="+", default=[1, 8, 16])
    ap.add_argument("--budget-s", type=float, default=100.0, help="no new variant starts after this")
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true", help="the first round's winners and neighbours only")
    ap.add_argument("--precompile", type=int, default=0, metavar="N",
                    help="with --configs: compile the variants in N processes first")
    ap.add_argument("--precompile-timeout-s", type=float, default=30.0)
    ap.add_argument("--precompile-shapes", nargs="+", choices=list(MOE),
                    help="precompile only for these shapes (default: all): the MoE kernels specialize on the "
                         "expert count and tile options, not on H or I, so one shape's compile serves the others")
    ap.add_argument("--split", action="store_true", help="with --configs: also each launch's device time "
                    "(torch.profiler over eager calls on the rotated routings)")
    ap.add_argument("--rounds", type=int, default=1, help="with --configs: time the shipped rule and the variants "
                    "this many times over in the same process (the spread over repeats)")
    ap.add_argument("--configs", help="a JSON file {label: config} or {shape: {label: config}}: time the shipped "
                    "rule and these only")
    ap.add_argument("--precompile-only", action="store_true",
                    help="with --configs and --precompile N: compile, time nothing (a separate process, so a device "
                         "round can compile another script's kernels at the same time)")
    args = ap.parse_args(argv)
    if args.precompile_only:
        if not (args.configs and args.precompile and torch.cuda.is_available()):
            print("sweep_moe --precompile-only: needs --configs, --precompile N and a CUDA device", file=sys.stderr)
            return 2
        for name in args.shapes:
            precompile(name, args.m, _configs_for(args.configs, name), args.precompile, args.precompile_timeout_s)
        return 0
    if not start("sweep_moe"):
        return 2
    deadline = time.perf_counter() + args.budget_s
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    rows: list[dict] = []

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"copy_bandwidth": bw, "rows": rows}, f, indent=1, default=str)
    try:
        for name in args.shapes:
            if time.perf_counter() > deadline:
                print(f"budget spent: {name} skipped")
                continue
            act = MOE[name][6]
            tol = {"bf16": 1e-2, "fp8": 5e-2}.get(act, 8e-2)
            if args.configs:
                configs = _configs_for(args.configs, name)
                if args.precompile and (not args.precompile_shapes or name in args.precompile_shapes):
                    precompile(name, args.m, configs, args.precompile, args.precompile_timeout_s)
                explicit(name, args.m, bw, rows, deadline, tol, configs, save, split=args.split,
                         rounds=args.rounds)
                continue
            sweep_shape(name, args.m, bw, rows, deadline, {"bf16": 1e-2, "fp8": 5e-2}.get(act, 8e-2), save, args.quick)
    finally:
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
