#!/usr/bin/env python3
"""Benchmark: oracle-torch's CUDA int8 W8A8 kernel (torch.linear.int8) beside BF16 cuBLAS.

One process, one run, weights served from HBM: per shape N x K and M, each candidate is built on
its own copies of the weights until the copies exceed 256 MB, and the timed calls cycle through
them (bench_peers.measure). Candidates:
  bf16     x @ w.T on BF16 weights (cuBLAS), the baseline
  int8     torch.linear.int8: per-token quantization (one Triton launch), torch._int_mm (cuBLASLt
           int8, int32 out; M <= 16 padded to 32 rows), scale epilogue (one Triton launch); eager
           calls of <= 64 rows replay the kernel's private CUDA graph (oracle.integration.eager_graphs)
  int_mm   torch._int_mm alone on codes quantized outside the timing (the GEMM's own time: what
           the quantize and epilogue launches add is int8 minus int_mm)
Columns: graph (us per call under CUDA-graph replay), eager (back-to-back calls, CUDA events),
host (Python time per eager call), x (BF16's graph time / the candidate's), the relative error
against oracle-emulation's W8A8 int8 forward, and hbm: the int8 weight bytes / measured copy
bandwidth (the floor a weight-streaming kernel can reach at small M).

    python bench/bench_int8.py [--m 1 16 256 4096] [--shapes 4096x4096 14336x4096] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_peers import copies_for, launches, measure  # noqa: E402
from gpu_timing import copy_bandwidth, rel, start  # noqa: E402

from oracle import LinearLayer  # noqa: E402
from oracle.catalog import Mode  # noqa: E402

SHAPES = {"4096x4096": (4096, 4096), "14336x4096": (14336, 4096), "4096x14336": (4096, 14336)}
W8A8 = Mode(weight="int8", activation="int8", name="w8a8_int8")


def _candidates(n: int, k: int, x_ref: torch.Tensor) -> tuple[dict, float]:
    """name -> (list of apply(x) over weight copies, error vs emulation, launches fn); and the int8 bytes."""
    from oracle_emulation.formats import codec_for
    from oracle_emulation.linear import EmulationLinear
    from oracle_torch.cpu_int import quantize_per_token
    from oracle_torch.int8 import TorchInt8Linear

    layer = LinearLayer(name=f"{n}x{k}", in_features=k, out_features=n, weight_format="int8",
                        activation_format="int8")
    w = torch.randn(n, k, device="cuda") * 0.05
    tensors = {a: b for a, b in codec_for("int8").quantize(w, "int8").items() if b is not None}
    ref = EmulationLinear(layer, W8A8, None)
    ref.process_weights(**tensors)
    y_ref = ref.apply(x_ref)
    del ref
    int8_bytes = n * k + n * 4
    kernels = []
    for _ in range(copies_for(int8_bytes)):
        t = TorchInt8Linear(layer, W8A8, None)
        t.process_weights(**{a: b.clone() for a, b in tensors.items()})
        kernels.append(t)
    wb = w.to(torch.bfloat16)
    bf16 = [wb] + [wb.clone() for _ in range(copies_for(n * k * 2) - 1)]
    codes = [t.q_t for t in kernels]
    out = {
        "bf16": ([lambda x, ww=ww: x @ ww.t() for ww in bf16], rel(x_ref @ wb.t(), y_ref), lambda x: x @ wb.t()),
        "int8": ([t.apply for t in kernels], rel(kernels[0].apply(x_ref), y_ref), kernels[0].forward),
    }
    held: dict = {}

    def gemm_alone(x, q_t):
        if held.get("x") is not x:                 # quantized once per activation tensor, outside the timing
            rows = max(x.shape[0], 32) if x.shape[0] <= 16 else x.shape[0]
            xq, _ = quantize_per_token(x)
            held["x"], held["q"] = x, torch.nn.functional.pad(xq, (0, 0, 0, rows - x.shape[0]))
        return torch._int_mm(held["q"], q_t)
    out["int_mm"] = ([lambda x, q=q: gemm_alone(x, q) for q in codes], float("nan"), lambda x: gemm_alone(x, codes[0]))
    return out, int8_bytes


def epilogue_sweep(shapes: list[str], m: int = 4096) -> None:
    """The two Triton launches alone at M rows (graph replay): the per-token quantizer and the scale epilogue
    for several (columns per program, warps), with the bandwidth each reaches (bytes read + written / time)."""
    from gpu_timing import graph_ms

    from oracle_torch import int8_triton

    for name in shapes:
        n, k = SHAPES[name]
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        acc = torch.randint(-2 ** 20, 2 ** 20, (m, n), device="cuda", dtype=torch.int32)
        sw = torch.rand(n, device="cuda")
        q, s = int8_triton.int8_per_token(x)
        us = graph_ms(lambda: int8_triton.int8_per_token(x), 5) * 1e3
        print(f"{name} M={m}: quantize {us:7.1f} us, {(m * k * 3) / us / 1e6:6.2f} TB/s", flush=True)
        for block, warps in ((1024, 4), (1024, 8), (2048, 8), (4096, 8), (512, 4)):
            us = graph_ms(lambda: int8_triton.scale_epilogue(acc, s, sw, None, m, torch.bfloat16, block, warps), 5) * 1e3
            print(f"{name} M={m}: epilogue block {block:5} warps {warps}: {us:7.1f} us, "
                  f"{(m * n * 6) / us / 1e6:6.2f} TB/s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, nargs="+", default=[1, 16, 256, 4096])
    ap.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=["4096x4096", "14336x4096"])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--epilogue-sweep", action="store_true", help="time the quantize and epilogue launches alone")
    args = ap.parse_args()
    if not start("bench_int8"):
        raise SystemExit(2)
    if args.epilogue_sweep:
        epilogue_sweep(args.shapes)
        return
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s; us per call, graph/eager, h = host us per eager call, "
          "x = BF16 graph time / this; weights rotated through > 256 MB of copies", flush=True)
    rows = []
    for name in args.shapes:
        n, k = SHAPES[name]
        x_ref = torch.randn(16, k, device="cuda", dtype=torch.bfloat16)
        cands, nbytes = _candidates(n, k, x_ref)
        print(f"{name}: error vs oracle-emulation W8A8: "
              + ", ".join(f"{c} {e:.2g}" for c, (_, e, _) in cands.items() if e == e), flush=True)
        for m in args.m:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            row = {"shape": name, "m": m, "hbm_us": nbytes / bw * 1e6}
            for cand, (fns, err, raw) in cands.items():
                t = measure([lambda f=f: f(x) for f in fns], m)
                t["err"] = err
                if m <= 16:
                    t["launches"], t["kernels"] = launches(lambda: raw(x))
                row[cand] = t
            rows.append(row)
            b = row["bf16"]
            print(f"{name:11} M={m:<5} hbm {row['hbm_us']:6.1f} | bf16 {b['graph']:7.1f}/{b['eager']:7.1f} | "
                  + " | ".join(f"{c} {row[c]['graph']:7.1f}/{row[c]['eager']:7.1f} h{row[c]['host']:5.1f} "
                               f"x{b['graph'] / row[c]['graph']:4.2f}"
                               + (f" L{row[c]['launches']}" if row[c].get("launches") is not None else "")
                               for c in ("int8", "int_mm")), flush=True)
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1))
        del cands
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
