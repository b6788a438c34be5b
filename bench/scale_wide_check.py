"""The MoE's large dynamic per-tensor activation scales two ways, in one process on a GPU: torch's reduction
and launch.tensor_scale_wide (one launch of many programs; moe.TENSOR_SCALE_WIDE, the default since R110).
NVFP4 W4A4 experts (qwen3-235b's shape by default), weights from HBM (sweep_moe's rotation), graph replay:
off, on, off again, each after its own warm-up; the outputs must be bit-equal (the same scale bits, so the
same rounding), and the scales of one call are compared directly too.

    python bench/scale_wide_check.py [--shape qwen3-235b-a22b-nvfp4] [--m 256 4096]
"""
from __future__ import annotations

import argparse
import sys

import torch
from gpu_timing import copy_bandwidth, start, warm_calls
from sweep_moe import _inputs, build, timed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen3-235b-a22b-nvfp4")
    ap.add_argument("--m", type=int, nargs="+", default=[256])
    args = ap.parse_args(argv)
    if not start("scale_wide_check"):
        return 2
    from oracle_triton import moe
    from oracle_triton.linear import dynamic_tensor_scale

    bw = copy_bandwidth()
    shipped = moe.TENSOR_SCALE_WIDE
    t, per_expert = build(args.shape)
    from bench_peers import MOE
    ne, topk, h = MOE[args.shape][:3]
    for m in args.m:
        x, routes, _, hbm = _inputs(m, ne, topk, h, per_expert, bw)
        a = torch.randn(m * topk, MOE[args.shape][3], device="cuda", dtype=torch.bfloat16)
        moe.TENSOR_SCALE_WIDE = True
        same_scale = torch.equal(t._act_scale(1, a), dynamic_tensor_scale(a, t.act))
        figures, outs = [], []
        for wide in (False, True, False):
            moe.TENSOR_SCALE_WIDE = wide
            warm_calls([lambda r=r: t.forward(x, *r) for r in routes], 0.3)
            outs.append(t.forward(x, *routes[0]).clone())
            figures.append(timed(t, x, routes))
        moe.TENSOR_SCALE_WIDE = shipped
        print(f"{args.shape} M={m} (HBM {hbm:.1f} us): torch's reduction {figures[0]:.1f} / wide {figures[1]:.1f} / "
              f"torch's again {figures[2]:.1f} us; outputs bit-equal {torch.equal(outs[0], outs[1])}; "
              f"scale bits equal {same_scale}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
