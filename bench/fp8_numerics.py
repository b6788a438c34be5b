"""FP8 W8A8 per channel, the few-row kernels: each candidate configuration's error against oracle-emulation
(issue 26), measured in parallel processes that also compile it into Triton's cache for a timing run
after them (bench_peers.py --dense-variants times the same file's configurations beside the peers).

Data: random-normal weights and activations (signs cancel, as in a model) and their absolute values (no
cancellation: every partial sum grows, the worst case for an accumulator that keeps fewer bits than
fp32). Measures: relative Frobenius error (the tests' measure, tolerance 1e-2) and the largest
elementwise error relative to that output row's magnitude.

    python bench/fp8_numerics.py --variants configs/fp8_2048_r24.json [--shapes 2048x4096] [--m 16 256]
                                 [--workers 14] [--timeout-s 20] [--json out.json]

(The ninth pass's bench/fp8_promote.py, less the promotion interval it also swept: that option of
gemm.fp8_swap_kernel was removed.)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

SHAPES = {"8192x8192": (8192, 8192), "7168x18432": (7168, 18432), "2048x4096": (2048, 4096),
          "36864x7168": (36864, 7168)}
MODE = ("fp8_channel", "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"})


def config_of(g, m: int, act: int, spec: dict) -> dict:
    """A variant's launch configuration as bench_peers.py --dense-variants reads it: "BASE": 1 lays the rest
    over the configuration the layer ships at M."""
    base = g.config_for(m, act) if spec.get("BASE") else {}
    return {**base, **{k: v for k, v in spec.items() if k not in ("BASE", "ONLY_M")}}


def build(name: str, positive: bool = False):
    from bench_triton import dense_pair
    n, k = SHAPES[name]
    fmt, mode_name, act, params = MODE
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    if positive:
        w = w.abs()
    t, e, tensors, _, _ = dense_pair(name, fmt, n, k, w, mode_name, act, params)
    del tensors, w
    return t, e


def errors(y: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(relative Frobenius error, max |y - ref| / max |ref| per output row)."""
    d, r = (y.float() - ref.float()), ref.float()
    fro = float(d.norm() / r.norm().clamp_min(1e-30))
    worst = float((d.abs().amax(dim=1) / r.abs().amax(dim=1).clamp_min(1e-30)).max())
    return fro, worst


def measure_job(name: str, m: int, label: str, spec: dict, built: dict) -> list[dict]:
    """Compile and run one (shape, M, variant) on the shape's random-normal and absolute-value layers
    (built once per process): its errors against oracle-emulation on both."""
    from oracle_triton.formats import ACT_TOKEN
    rows = []
    for positive in (False, True):
        key = (name, positive)
        if key not in built:
            if any(k[0] != name for k in built):     # one shape's two layers at a time
                built.clear()
                torch.cuda.empty_cache()
            built[key] = build(name, positive)
        t, e = built[key]
        gen = torch.Generator(device="cuda").manual_seed(1000 + m)
        x = torch.randn(m, SHAPES[name][1], device="cuda", dtype=torch.bfloat16, generator=gen)
        if positive:
            x = x.abs()
        ref = e.apply(x)
        cfg = config_of(t.gemm, m, ACT_TOKEN, spec)
        y = t.gemm(x, ACT_TOKEN, None, torch.bfloat16, cfg)
        fro, worst = errors(y, ref)
        rows.append(dict(shape=name, m=m, data="abs" if positive else "normal", variant=label, config=cfg,
                         rel_fro=fro, rel_max=worst))
    return rows


def _line(r: dict) -> str:
    return (f"{r['shape']:11} M={r['m']:<3} {'|x|,|w|' if r['data'] == 'abs' else 'normal ':7} {r['variant']:10} "
            f"rel_fro {r['rel_fro']:.2e}  max/row-max {r['rel_max']:.2e}  {r['config']}")


def _job(job: tuple) -> list[dict]:
    """One worker: its share of the (shape, M, variant) runs (each compiles its kernel into Triton's cache,
    so the timing process only loads it)."""
    index, workers, jobs = job
    rows, built = [], {}
    for name, m, label, spec in jobs[index::workers]:
        try:
            rows += measure_job(name, m, label, spec, built)
        except Exception as exc:  # noqa: BLE001 - reported, never fatal
            rows.append(dict(shape=name, m=m, variant=label, error=f"{type(exc).__name__}: {str(exc)[:160]}"))
    return rows


def jobs_for(shapes: list[str], ms: list[int], variants: dict) -> list[tuple]:
    """(shape, M, label, spec): each --variants entry of the shapes asked for (at its ONLY_M, else at every M)."""
    jobs = []
    for name, table in variants.items():
        if name not in shapes:
            continue
        for label, spec in table.items():
            jobs += [(name, m, label, spec) for m in ms if spec.get("ONLY_M", m) == m]
    return jobs


def run(workers: int, jobs: list[tuple], timeout_s: float, out: list) -> None:
    """Every (shape, M, variant) in `workers` processes at once (Triton's compiler is single-threaded per
    process); rows printed as they come back."""
    import multiprocessing
    t0 = time.perf_counter()
    try:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            for rows in pool.imap_unordered(_job, [(i, workers, jobs) for i in range(workers)]):
                out.extend(rows)
                for r in rows:
                    print(_line(r) if "error" not in r else f"{r['shape']} M={r['m']} {r['variant']}: {r['error']}",
                          flush=True)
                if time.perf_counter() - t0 > timeout_s:
                    raise TimeoutError("--timeout-s")
        print(f"done in {time.perf_counter() - t0:.1f} s", flush=True)
    except Exception as exc:  # noqa: BLE001 - best effort: what came back is kept
        print(f"stopped: {type(exc).__name__}: {str(exc)[:200]} after {time.perf_counter() - t0:.1f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=["8192x8192", "7168x18432", "2048x4096"])
    ap.add_argument("--m", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--variants", metavar="JSON", required=True,
                    help="the configurations (bench_peers.py --dense-variants' file)")
    ap.add_argument("--workers", type=int, default=1, metavar="N", help="N processes (each compiles its runs' kernels)")
    ap.add_argument("--timeout-s", type=float, default=30.0)
    ap.add_argument("--json", help="write the rows there")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("fp8_numerics: needs a CUDA device", file=sys.stderr)
        return 2
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    rows: list = []
    try:
        with open(args.variants) as f:
            variants = json.load(f)
        run(args.workers, jobs_for(args.shapes, args.m, variants), args.timeout_s, rows)
    finally:
        if args.json:                      # what was measured before a failure is kept
            Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
