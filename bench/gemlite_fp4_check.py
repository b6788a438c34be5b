"""GPU check: gemlite's MXFP4 W4A16 layer (helper.A16W4_MXFP, from the checkpoint's packed [N, K/2] bytes
and E8M0 scales, as bench_peers.py builds it) against oracle-emulation, with ours beside it, before any
timing: a peer whose numerics disagree is not ranked. Prints the seconds each build and first call took
(its compile is what kept it out of earlier rounds). Run from bench/.

    python3 gemlite_fp4_check.py [--shape 2048x4096] [--m 1 16]
"""
from __future__ import annotations

import argparse
import time

import torch
from bench_peers import WRONG, _clone, build_dense
from bench_triton import dense_reference
from gpu_timing import rel


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="2048x4096")
    ap.add_argument("--m", type=int, nargs="+", default=[1, 16])
    args = ap.parse_args()
    n, k = map(int, args.shape.split("x"))
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    ref, tensors, layer, mode = dense_reference(args.shape, "mxfp4", n, k, w, "w4a16_mx", "bf16", {})
    for cand in ("oracle", "gemlite"):
        t0 = time.perf_counter()
        try:
            fn = build_dense(cand, "mxfp4", layer, mode, _clone(tensors))[0]
        except Exception as exc:  # noqa: BLE001 - a peer that cannot build says why
            print(f"{args.shape} mxfp4 {cand}: not built ({type(exc).__name__}: {str(exc)[:160]})", flush=True)
            continue
        built = time.perf_counter() - t0
        for m in args.m:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            t1 = time.perf_counter()
            y = fn(x)
            torch.cuda.synchronize()
            err = rel(y, ref.apply(x))
            print(f"{args.shape} mxfp4 M={m} {cand}: rel to emulation {err:.1e} "
                  f"({'agrees' if err < WRONG else 'DISAGREES'}); built in {built:.1f} s, first call "
                  f"{time.perf_counter() - t1:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
