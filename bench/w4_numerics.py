"""4-bit W4A16 at one row: each candidate configuration's error against oracle-emulation (issue 26), measured in
parallel processes that also compile it into Triton's cache for a timing run after them (bench_peers.py
--dense-variants times the same file's configurations beside the peers; its layers are symmetric INT4 without a
bias, as here).

Data: random-normal weights and activations; INT4 symmetric (the zero point 8, as bench_peers.py quantizes) or
with GPTQ zero points (--zero-points), MXFP4 / NVFP4 in the word layout the layer repacks them to. Measures:
relative Frobenius error (the tests' measure, tolerance 1e-2) and the largest elementwise error relative to
the output's magnitude.

    python bench/w4_numerics.py --variants configs/dense13b_r35.json [--shapes 2048x4096] [--modes w4a16_int4]
                                [--zero-points] [--workers 8] [--timeout-s 60]
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
MODES = {"w4a16_int4": "int4", "w4a16_mx": "mxfp4", "w4a16_nvfp4": "nvfp4"}
DEV = "cuda" if torch.cuda.is_available() else "cpu"     # (cpu: Triton's interpreter, TRITON_INTERPRET=1)


def config_of(g, spec: dict) -> dict:
    """A variant's launch configuration as bench_peers.py --dense-variants reads it at M = 1 ("BASE": 1 lays the
    rest over the configuration the layer ships)."""
    base = g.config_for(1, 0) if spec.get("BASE") else {}
    return {**base, **{k: v for k, v in spec.items() if k not in ("BASE", "ONLY_M")}}


def build(name: str, mode: str, zero_points: bool):
    """(oracle-triton linear, oracle-emulation linear) on one random-normal weight of the shape."""
    from bench_triton import _quant
    from oracle import LinearLayer
    from oracle.catalog import Mode
    from oracle_emulation.linear import EmulationLinear
    from oracle_triton.linear import TritonLinear

    n, k = SHAPES[name]
    fmt = MODES[mode]
    w = torch.randn(n, k, device=DEV, dtype=torch.bfloat16) * 0.05
    tensors = _quant(fmt, w, symmetric=not zero_points)
    layer = LinearLayer(name=name, in_features=k, out_features=n, weight_format=fmt,
                        group_size=128 if fmt == "int4" else None)
    mode_obj = Mode(weight=fmt, activation="bf16", name=mode, params={})
    t, e = TritonLinear(layer, mode_obj, None), EmulationLinear(layer, mode_obj, None)
    t.process_weights(**tensors)
    e.process_weights(**tensors)
    return t, e


def job(args: tuple) -> list[str]:
    """Worker: every (shape, mode, label, spec) of its share, compiled and run once; its errors."""
    items, zero_points = args
    sys.path.insert(0, str(Path(__file__).parent))
    out, built = [], {}
    for name, mode, label, spec in items:
        t0 = time.perf_counter()
        try:
            if (name, mode) not in built:
                built.clear()
                built[(name, mode)] = build(name, mode, zero_points)
            t, e = built[(name, mode)]
            cfg = config_of(t.gemm, spec)
            x = torch.randn(1, SHAPES[name][1], device=DEV, dtype=torch.bfloat16)
            y, ref = t.gemm(x, 0, None, torch.bfloat16, cfg).float(), e.apply(x).float()
            fro = float((y - ref).norm() / ref.norm())
            worst = float((y - ref).abs().max() / ref.abs().max())
            out.append(f"{name:10s} {mode:12s} {label:24s} rel_fro {fro:.2e}  max/max {worst:.2e}  "
                       f"{time.perf_counter() - t0:.1f} s  {cfg}")
        except Exception as exc:  # noqa: BLE001 - reported, never fatal
            out.append(f"{name:10s} {mode:12s} {label:24s} FAILED {type(exc).__name__}: {str(exc)[:160]}")
    return out


def main(argv: list[str] | None = None) -> int:
    import multiprocessing

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", required=True, help="{shape: {label: config}} (bench_peers.py --dense-variants)")
    ap.add_argument("--shapes", nargs="+")
    ap.add_argument("--modes", nargs="+", default=["w4a16_int4"], choices=sorted(MODES))
    ap.add_argument("--zero-points", action="store_true", help="INT4 with GPTQ zero points (else symmetric)")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--timeout-s", type=float, default=60.0)
    args = ap.parse_args(argv)
    with open(args.variants) as f:
        variants = json.load(f)
    items = [(name, mode, label, spec) for name, specs in variants.items() if not args.shapes or name in args.shapes
             for mode in args.modes for label, spec in specs.items() if spec.get("ONLY_M", 1) == 1]
    workers = max(1, min(args.workers, len(items)))
    t0 = time.perf_counter()
    chunks = [(items[i::workers], args.zero_points) for i in range(workers)]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        res = pool.map_async(job, chunks).get(timeout=args.timeout_s)
    for lines in res:
        print("\n".join(lines))
    print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
