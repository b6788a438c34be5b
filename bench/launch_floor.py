"""The latency floor of a one-launch small GEMM under CUDA-graph replay (issue 26, 2048x4096 at M = 16).

2048x4096 at 4 bits is 4.2 MB of weights: about 1 us of HBM time, so its few-row kernel is bound by
latency, not bytes. This times, in one process and with the harness of sweep_fp4_words (each call
the next of > 256 MB of copies, `gtime`), the parts of that chain without any decode or MMA:

  empty 1 / 256: a kernel that does nothing, 1 and 256 programs (the launch inside a graph);
  chain s<S>: 2048/64 x S programs of 4 warps, each loading its 4096/S-wide slice of a 64-row weight
    band (the 4-bit bytes, tile by tile, loads issued where used with num_stages 4), summing it, then
    the split-K hand-off of the shipped kernels (partial to a workspace, atomic counter, the last
    program sums the slices and stores): the swap kernel's memory chain, no decode, no MMA;
  BF16: x @ w.T at M = 16 (cuBLAS, its own rotated copies), the 1.3x target's base.

    python bench/launch_floor.py [--splits 4 8 16] [--m 16]
"""
from __future__ import annotations

import argparse
import sys

import torch
import triton
import triton.language as tl

from gpu_timing import start
from sweep_dense import copies, gtime


@triton.jit
def empty_kernel(y_ptr):
    """Nothing: the cost of a launch inside a graph."""
    if tl.program_id(0) < 0:
        tl.store(y_ptr, 0.0)


@triton.jit
def chain_kernel(w_ptr, part_ptr, cnt_ptr, y_ptr, N, K8, BLOCK_N: tl.constexpr, BLOCK_J: tl.constexpr,
                 SPLIT_K: tl.constexpr):
    """Program (n tile, k slice): load the slice's [K8 / SPLIT_K, BLOCK_N] int32 words tile by tile,
    sum them (so no load is dead), then the split-K hand-off of dequant.finish_tile."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    per = K8 // SPLIT_K
    acc = tl.zeros([BLOCK_N], dtype=tl.int32)
    for j0 in tl.range(pid_k * per, pid_k * per + per, BLOCK_J, num_stages=4):
        jj = j0 + tl.arange(0, BLOCK_J)
        acc += tl.sum(tl.load(w_ptr + jj[:, None] * N + offs_n[None, :]), axis=0)
    tl.store(part_ptr + pid_k * N + offs_n, acc.to(tl.float32))
    tl.debug_barrier()
    arrived = tl.atomic_add(cnt_ptr + pid_n, 1)
    if arrived == SPLIT_K - 1:
        tot = tl.zeros([BLOCK_N], dtype=tl.float32)
        for s in range(0, SPLIT_K):
            tot += tl.load(part_ptr + s * N + offs_n, cache_modifier=".cg")
        tl.store(y_ptr + offs_n, tot.to(tl.bfloat16))
        tl.atomic_xchg(cnt_ptr + pid_n, 0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", nargs="+", type=int, default=[4, 8, 16])
    ap.add_argument("--m", type=int, default=16)
    args = ap.parse_args(argv)
    if not start("launch_floor"):
        return 2
    n, k = 2048, 4096
    y = torch.zeros(n, device="cuda", dtype=torch.bfloat16)
    e1 = gtime([lambda: empty_kernel[(1,)](y)], 40)
    e256 = gtime([lambda: empty_kernel[(256,)](y)], 40)
    print(f"empty kernel, 1 program: {e1:.2f} us per call; 256 programs: {e256:.2f} us", flush=True)
    words = [torch.randint(-2**31, 2**31 - 1, (k // 8, n), device="cuda", dtype=torch.int32)
             for _ in range(copies(n * k // 2))]
    for split in args.splits:
        part = torch.zeros(split, n, device="cuda", dtype=torch.float32)
        cnt = torch.zeros(n // 64, device="cuda", dtype=torch.int32)
        calls = [lambda w=w: chain_kernel[(n // 64, split)](w, part, cnt, y, n, k // 8, BLOCK_N=64, BLOCK_J=16,
                                                              SPLIT_K=split, num_warps=4)
                 for w in words]
        us = gtime(calls, 40)
        print(f"chain s{split} ({n // 64 * split} programs, {k // split} K each, loads + split-K hand-off, "
              f"no decode / MMA): {us:.2f} us", flush=True)
    x = torch.randn(args.m, k, device="cuda", dtype=torch.bfloat16)
    bf = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies(n * k * 2))]
    b = gtime([lambda w=w: x @ w.t() for w in bf], 40)
    print(f"BF16 x @ w.T M={args.m}: {b:.2f} us; 1.3x of it: {b / 1.3:.2f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
