"""One warmed call of a layer between cudaProfilerStart / Stop, for Nsight Compute's `--profile-from-start off`:
what a kernel waits on where the benchmarks only say how long it took.

The benchmarks time whole calls; a profiler run needs the launches of exactly one steady call, not the warm-up's,
an autotuner's or a reference's. This driver builds the layer as the benchmarks do (bench_peers' dense candidates,
sweep_moe's fused MoE), calls it WARM times, then once inside the profiled range:

    ncu --profile-from-start off --set full -o rep python3 ncu_probe.py --moe deepseek-r1 --m 1
    ncu --profile-from-start off --set full -o rep python3 ncu_probe.py --dense 7168x18432 --m 16 \\
        --mode w8a8_fp8_channel --cand gemlite
    ncu ... python3 ncu_probe.py --dense 2048x4096 --m 256 --config '{"BLOCK_M": 128, "BLOCK_N": 128, ...}'

Without a profiler attached it prints each call's time (events), so the driver is checked by running it bare.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

WARM = 3


def moe_call(name: str, m: int):
    """A zero-argument call of sweep_moe's TritonMoE for `name` at m tokens on its first routing (the ordinary
    launches, `forward`: what an eager plan or a graph replays)."""
    from bench_peers import MOE
    from sweep_moe import _inputs, build

    ne, topk, h = MOE[name][:3]
    t, per_expert = build(name)
    x, routes, _, _ = _inputs(m, ne, topk, h, per_expert, 1.0)
    return lambda: t.forward(x, *routes[0])


def dense_call(shape: str, m: int, mode_name: str, cand: str, config: dict | None = None):
    """A zero-argument call of bench_peers' dense candidate `cand` ("oracle", "gemlite", ...) for `mode_name` on
    an N x K layer of random weights quantized as the benchmarks quantize them, at m rows; config (oracle only):
    the GEMM called with these launch parameters instead of the layer's choice (a --dense-variants entry's)."""
    from bench_peers import DENSE_MODES, build_dense
    from bench_triton import dense_reference

    n, k = (int(v) for v in shape.split("x"))
    fmt, _, act, params, _ = next(d for d in DENSE_MODES if d[1] == mode_name)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    _, tensors, layer, mode = dense_reference(shape, fmt, n, k, w, mode_name, act, params)
    apply, _, _ = build_dense(cand, fmt, layer, mode, tensors)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    if config:
        t = apply.__self__
        act = t.row_act(m)
        return lambda: t.gemm(x, act, None, t.dtype, config)
    return lambda: apply(x)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--moe", metavar="MODEL", help="a bench_peers.MOE model")
    what.add_argument("--dense", metavar="NxK", help="a dense layer's shape")
    ap.add_argument("--m", type=int, default=1)
    ap.add_argument("--mode", default="w8a8_fp8_channel", help="dense: a bench_peers.DENSE_MODES mode")
    ap.add_argument("--cand", default="oracle", help="dense: oracle, gemlite, tinygemm, scaled_mm, oracle-torch")
    ap.add_argument("--warm", type=int, default=WARM)
    ap.add_argument("--config", type=json.loads, metavar="JSON",
                    help="dense, oracle: launch parameters to call the GEMM with, e.g. '{\"BLOCK_M\": 64, ...}'")
    args = ap.parse_args(argv)
    if args.config and (args.moe or args.cand != "oracle"):
        ap.error("--config: the launch parameters of oracle-triton's dense GEMM (--dense with --cand oracle)")
    call = moe_call(args.moe, args.m) if args.moe else dense_call(args.dense, args.m, args.mode, args.cand,
                                                                  args.config)
    for _ in range(args.warm):
        call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.profiler.start()
    start.record()
    call()
    end.record()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"{args.moe or args.dense} M={args.m} {'' if args.moe else args.mode + ' ' + args.cand} "
          f"profiled call {start.elapsed_time(end) * 1e3:.1f} us (under a profiler: its replays, not a timing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
