"""Old and new oracle-triton fused MoE side by side: one process, the same expert bytes, the same routings.

The fifth pass measured Qwen3-30B's FP8 MoE at M = 256 as 277.2 us (bench_peers R11) where the first
session measured 240.0 with the same tile rule. This builds the layer once from the same quantized
tensors for the current `oracle_triton` and for each older copy of the package given with --old (a
directory holding a package of another name, e.g. `git archive <commit> plugins/triton/oracle_triton`
unpacked as `.old/oracle_triton_s1`; the package uses only relative imports, so it loads under any
name), and times each with sweep_moe's timer (one CUDA graph cycling through the routings, weights from
HBM) and its launch split, in rounds (A B C, A B C, ...) so that a drift of the clocks shows as a spread
and not as a difference between versions. Every older version runs the current shape rule's config
unless --own-config (each version's own config_for); the current one runs its own config_for, and
--variants (a JSON file {label: config}, ONLY_M: at that M only) adds configs of the current package
to the same rounds.

    python bench/moe_bisect.py --shape qwen3-30b-a3b --m 256 --old s1=../.old/oracle_triton_s1 [--json out.json]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path

import torch
from bench_peers import MOE
from bench_triton import _quant
from gpu_timing import copy_bandwidth, rel, start, warm_calls
from sweep_moe import CHUNK, _inputs, kernel_split, timed

from oracle import MoELayer
from oracle.catalog import Mode


def load_package(label: str, directory: str):
    """The package in `directory` imported under its own directory name (relative imports only)."""
    path = Path(directory).resolve()
    spec = importlib.util.spec_from_file_location(path.name, path / "__init__.py",
                                                  submodule_search_locations=[str(path)])
    if spec is None or spec.loader is None:
        raise SystemExit(f"--old {label}={directory}: no package there (expected {path / '__init__.py'})")
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.name] = module
    spec.loader.exec_module(module)
    return importlib.import_module(f"{path.name}.moe")


def tensors_for(name: str, experts: int | None = None) -> dict:
    """CHUNK experts quantized once and repeated to E (or `experts`: distinct memory, equal bytes), as
    sweep_moe.build; a "-zp" model's INT4 experts with GPTQ zero points (as bench_peers builds them)."""
    import sweep_moe

    device = sweep_moe.DEVICE
    ne, topk, h, i, fmt = MOE[name][:5]
    ne = experts or ne
    c = min(CHUNK, ne)
    out = {}
    for key, rows, cols in (("w13", 2 * i, h), ("w2", h, i)):
        q = _quant(fmt, torch.randn(c, rows, cols, device=device, dtype=torch.bfloat16) * 0.05,
                   symmetric=not name.endswith("-zp"))
        for suffix in ("", "_scale", "_global_scale", "_zero_point"):
            v = q.get(f"weight{suffix}")
            if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == c:
                v = v.repeat(math.ceil(ne / c), *([1] * (v.dim() - 1)))[:ne].contiguous()
            out[f"{key}{suffix}"] = v
    return out


def build(moe_module, name: str, tensors: dict, experts: int | None = None):
    ne, topk, h, i, fmt, mode_name, act, params, activation = MOE[name]
    ne = experts or ne
    layer = MoELayer(name=name, num_experts=ne, top_k=topk, hidden_size=h, intermediate_size=i,
                     weight_format=fmt, activation=activation)
    t = moe_module.TritonMoE(layer, Mode(weight=fmt, activation=act, name=mode_name, params=params), None)
    t.process_weights(**tensors)
    t.check_inputs = False
    return t


def _variants_at(variants: dict, m: int) -> dict:
    """{label: config} of --variants that run at M = m (ONLY_M removed)."""
    out = {}
    for label, cfg in variants.items():
        if cfg.get("ONLY_M", m) == m:
            out[label] = {k: v for k, v in cfg.items() if k != "ONLY_M"}
    return out


def _compile_one(label: str, directory: str | None, name: str, ms: list[int], variants: dict | None = None) -> str:
    """A worker: one version's layer called once per M (Triton compiles into its on-disk cache, which the
    timing process then reads: a fresh machine compiles every version's kernels in parallel)."""
    mod = load_package(label, directory) if directory else importlib.import_module("oracle_triton.moe")
    ne, topk, h = MOE[name][:3]
    small = min(CHUNK, ne)          # the kernels do not depend on the expert count; 16 experts' memory, not E's
    t = build(mod, name, tensors_for(name, small), small)
    current = importlib.import_module("oracle_triton.moe")
    for m in ms:
        x, routes, _, _ = _inputs(m, small, topk, h, 1.0, 1.0)
        if directory is None:
            t.experts = ne              # the full model's own choice (tuned entry or rule) at this M
            configs = [t.config_for(m, topk), *_variants_at(variants or {}, m).values()]
            t.experts = small
        else:
            configs = [current.moe_config(m, topk, ne, 1)]
        for cfg in configs:
            t.config = cfg
            t.forward(x, *routes[0])
    torch.cuda.synchronize()
    return label


def precompile(olds: dict[str, str], name: str, ms: list[int], timeout_s: float, variants: dict) -> None:
    """Every version compiled at once, one process each, the current one's variants in processes of their
    own (best effort: the timing process compiles the rest)."""
    import multiprocessing
    import time

    t0 = time.perf_counter()
    jobs = [("now", None, name, ms, {}), *[(label, d, name, ms, None) for label, d in olds.items()],
            *[(f"now {label}", None, name, ms, {label: cfg}) for label, cfg in variants.items()]]
    try:
        with multiprocessing.get_context("spawn").Pool(len(jobs)) as pool:
            done = pool.starmap_async(_compile_one, jobs).get(timeout=timeout_s)
        print(f"precompiled {done} in {time.perf_counter() - t0:.1f} s", flush=True)
    except Exception as exc:  # noqa: BLE001 - best effort
        print(f"precompile: {type(exc).__name__}: {str(exc)[:200]} after {time.perf_counter() - t0:.1f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen3-30b-a3b", choices=list(MOE))
    ap.add_argument("--m", type=int, nargs="+", default=[256])
    ap.add_argument("--old", nargs="*", default=[], metavar="LABEL=DIR", help="older package copies to time")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--old-m", type=int, nargs="+", help="the older versions only at these M (default: every --m)")
    ap.add_argument("--own-config", action="store_true", help="each version's own config_for, not the current rule")
    ap.add_argument("--variants", help="a JSON file {label: config} of the current package to time beside")
    ap.add_argument("--precompile", action="store_true", help="compile each version in its own process first")
    ap.add_argument("--precompile-timeout-s", type=float, default=30.0)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    olds = dict(spec.partition("=")[::2] for spec in args.old)
    if not torch.cuda.is_available():
        print("moe_bisect: needs a CUDA device", file=sys.stderr)
        return 2
    variants = {}
    if args.variants:
        with open(args.variants) as f:
            variants = json.load(f)
    if args.precompile:
        precompile(olds, args.shape, args.m, args.precompile_timeout_s, variants)
    if not start("moe_bisect"):
        return 2
    import oracle_triton.moe as current

    versions = {"now": current}
    for label, directory in olds.items():
        versions[label] = load_package(label, directory)
    bw = copy_bandwidth()
    name = args.shape
    ne, topk, h = MOE[name][:3]
    tensors = tensors_for(name)
    built = {label: build(mod, name, tensors) for label, mod in versions.items()}
    del tensors
    per_expert = (built["now"].w13.nbytes() + built["now"].w2.nbytes()) / ne
    rows: list[dict] = []

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"shape": name, "copy_bandwidth": bw, "rows": rows}, f, indent=1, default=str)

    print(f"copy bandwidth {bw / 1e12:.2f} TB/s; versions {list(versions)}", flush=True)
    for m in args.m:
        x, routes, count, hbm = _inputs(m, ne, topk, h, per_expert, bw)
        rule = current.moe_config(m, topk, ne, 1) if not args.own_config else None
        runs = {label: (t, None if label == "now" else rule) for label, t in built.items()
                if label == "now" or not args.old_m or m in args.old_m}
        runs.update({f"now {label}": (built["now"], cfg) for label, cfg in _variants_at(variants, m).items()})
        ref = None
        for label, (t, cfg) in runs.items():
            t.config = cfg
            try:
                y = t.forward(x, *routes[0])
            except Exception as exc:  # noqa: BLE001 - a variant that does not compile is reported
                print(f"{name} M={m} {label}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                runs[label] = None
                continue
            ref = y.clone() if ref is None else ref
            print(f"{name} M={m} {label}: config {t.config_for(m, topk)}  err vs now {rel(y, ref):.1e}", flush=True)
        # the first run's own calls, not a BF16 warm-up: right after one, an H200 sat at its 700 W cap at
        # 1485 MHz for DeepSeek-R1's first timing (bench_peers.SETTLE_S)
        first = next(r for r in runs.values() if r is not None)
        first[0].config = first[1]
        warm_calls([lambda r=r: first[0].forward(x, *r) for r in routes], 0.3)
        for r in range(args.rounds):
            for label, run in runs.items():
                if run is None:
                    continue
                t, cfg = run
                t.config = cfg
                us = timed(t, x, routes)
                split = kernel_split(t, x, routes) if r == 0 else None
                rows.append(dict(m=m, version=label, round=r, us=us, hbm_us=hbm, routings=count, kernels=split))
                save()
                print(f"  M={m:<5} {label:8} round {r}: {us:8.1f} us  {us / hbm:5.2f}x HBM ({hbm:.1f})"
                      + (f"\n      launches: {split}" if split else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
