"""Where does the few-row 4-bit kernel's time go at M = 16 (issue 26)? Memory, or the chain inside the SM?

The shipped swap kernel (gemm.w4_swap_kernel, its tuned M=16 entry) runs at about 3.3x the HBM time on
8192x8192, so bytes are not its limit. This times, in one process under CUDA-graph replay, the same
compiled kernel (same launch configuration, same specialization) fed three ways:

  hbm:  every call on the next of > 256 MB of weight copies (what the sweeps report);
  l2:   one copy only (the 4-bit weight, 34-36 MB, stays in the 60 MB L2 between calls);
  tile: the layout's K strides set to 0, so every K tile of a program re-reads the same words and
        scales (L1 hits): no weight traffic at all, the decode, MMA and split-K chain unchanged
        (the output is not a product of the weight, so it is not checked);

beside BF16 cuBLAS (`x @ w.T`, rotated copies) and an empty launch. If `tile` is close to `hbm`, the
loads are not the limit: the per-K-tile chain in the SM is (decode, the decoded operand's round trip
through shared memory, and one fenced, waited wgmma per nibble dot: sm90_compile.py).

    python bench/swap_chain_probe.py [--fmts mxfp4 int4] [--shapes 8192x8192]
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

import torch

from gpu_timing import rel, start
from launch_floor import empty_kernel
from sweep_dense import SHAPES, build, copies, gtime
from sweep_fp4_words import MODES


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fmts", nargs="+", default=["mxfp4", "int4"], choices=list(MODES))
    ap.add_argument("--shapes", nargs="+", default=["8192x8192"], choices=list(SHAPES))
    ap.add_argument("--m", type=int, default=16)
    args = ap.parse_args(argv)
    if not start("swap_chain_probe"):
        return 2
    import oracle_triton.linear as lin
    from oracle_triton.launch import DenseGemm

    lin.WORD_LAYOUT = True
    y = torch.zeros(8, device="cuda")
    print(f"empty launch: {gtime([lambda: empty_kernel[(1,)](y)], 40):.2f} us per call", flush=True)
    for name in args.shapes:
        n, k = SHAPES[name]
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
        bf16 = [w] + [w.clone() for _ in range(copies(n * k * 2) - 1)]
        x = torch.randn(args.m, k, device="cuda", dtype=torch.bfloat16)
        bf = gtime([lambda ww=ww: x @ ww.t() for ww in bf16], 20)
        del bf16
        for fmt in args.fmts:
            t, em, gs, _, _, _ = build(fmt, n, k, w, MODES[fmt], "bf16", {})
            cfg = gs[0].config_for(args.m, 0)
            ref = em.apply(x)
            err = rel(gs[0](x, 0, None, torch.bfloat16, cfg), ref)
            hbm = gtime([lambda g=g: g(x, 0, None, torch.bfloat16, cfg) for g in gs], 20)
            l2 = gtime([lambda: gs[0](x, 0, None, torch.bfloat16, cfg)], 20)
            g0 = gs[0]
            flat = DenseGemm(dataclasses.replace(g0.layout, stride_wk=0, stride_sk=0), n, k, g0.weight, g0.scale,
                             None if g0.zero is g0.scale else g0.zero,
                             None if g0.global_scale is g0.scale else g0.global_scale, None)
            flat.facts = g0.facts
            tile = gtime([lambda: flat(x, 0, None, torch.bfloat16, cfg)], 20)
            tiles = -(-k // 128) // cfg.get("SPLIT_K", 1)
            print(f"{name} {fmt} M={args.m} {cfg}: BF16 {bf:.1f} us; ours hbm {hbm:.1f} (err {err:.1e}), "
                  f"l2 {l2:.1f}, one tile re-read {tile:.1f} us; {tiles} K tiles per program", flush=True)
            del t, em, gs, flat
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
