"""Two measurements for issue 26 in one short process (H200, graph replay, weights rotated through
> 256 MB, BF16 cuBLAS beside, outputs checked against oracle-emulation):

  NVFP4 W4A16 at M = 4096: the shipped path (`DEQUANT_MM`) against BF16 (0.8x target), 2048x4096 and
  8192x8192;
  INT4 at M = 16 on 8192x8192 with three programs per SM: the shipped swap entry (128x16 tiles, 8 warps,
  split-K 4) compiles to 89 registers, two programs of 256 threads per SM; capped at 80 registers
  (Triton's `maxnreg`, no spills in the sm_90 compile) three fit, and split-K 6 gives 384 programs
  (11 K tiles each instead of 16) for the 396 slots. The kernel's time is its per-K-tile chain inside
  the SM (swap_chain_probe.py), which more resident warps can overlap. The capped launch calls
  gemm.w4_swap_kernel directly with DenseGemm.swap's arguments (the engine does not pass `maxnreg`).

    python bench/occupancy_probe.py [--parts nvfp4 int4] [--nvfp4-shapes 7168x18432 36864x7168]
"""
from __future__ import annotations

import argparse
import sys

import torch

from gpu_timing import rel, start
from sweep_dense import SHAPES, build, copies, gtime
from sweep_fp4_words import MODES


def nvfp4_m4096(name: str) -> None:
    n, k = SHAPES[name]
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    _, em, gs, _, _, _ = build("nvfp4", n, k, w, MODES["nvfp4"], "bf16", {})
    x = torch.randn(4096, k, device="cuda", dtype=torch.bfloat16)
    cfg = gs[0].config_for(4096, 0)
    err = rel(gs[0](x, 0, None, torch.bfloat16, cfg), em.apply(x))
    us = gtime([lambda g=g: g(x, 0, None, torch.bfloat16, cfg) for g in gs], 4)
    del gs, em
    bf16 = [w] + [w.clone() for _ in range(copies(n * k * 2) - 1)]
    bf = gtime([lambda ww=ww: x @ ww.t() for ww in bf16], 4)
    print(f"{name} nvfp4 M=4096 {cfg}: ours {us:.1f} us, BF16 {bf:.1f} us, xBF16 {bf / us:.2f}, err {err:.1e}",
          flush=True)


def swap_capped(g, x: torch.Tensor, split: int, maxnreg: int, decode: int = 3) -> torch.Tensor:
    """DenseGemm.swap's launch of gemm.w4_swap_kernel (INT4, 128x16 tiles, 8 warps) with a register cap."""
    from oracle_triton.gemm import w4_swap_kernel

    m, lay = x.shape[0], g.layout
    y = torch.empty(m, g.n, dtype=torch.bfloat16, device=x.device)
    grid = (-(-g.n // 128), -(-m // 16), split)
    part, cnt = g.workspace(m, grid[0] * grid[1], split, y)
    w4_swap_kernel[grid](
        x, g.weight, g.scale, g.zero, g.global_scale, g.bias if g.bias is not None else g.scale, y, part, cnt,
        m, g.n, g.k, x.stride(0), y.stride(0), lay.stride_wn, lay.stride_wk, lay.stride_sn, lay.stride_sk,
        lay.stride_zk, ELEM=lay.elem, HAS_ZERO=lay.stride_zk != 0, HAS_BIAS=g.bias is not None, SPLIT_K=split,
        GROUP=lay.group, BLOCK_M=16, BLOCK_N=128, BLOCK_K=lay.group, DECODE=decode, DOT_F32=g.facts["dot_f32"],
        OUT_F16=False, num_warps=8, num_stages=1, **({"maxnreg": maxnreg} if maxnreg else {}))
    return y


def int4_m16() -> None:
    n, k = SHAPES["8192x8192"]
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    bf16 = [w] + [w.clone() for _ in range(copies(n * k * 2) - 1)]
    x = torch.randn(16, k, device="cuda", dtype=torch.bfloat16)
    bf = gtime([lambda ww=ww: x @ ww.t() for ww in bf16], 20)
    del bf16
    _, em, gs, _, _, _ = build("int4", n, k, w, MODES["int4"], "bf16", {})
    ref = em.apply(x)
    cfg = gs[0].config_for(16, 0)
    shipped = gtime([lambda g=g: g(x, 0, None, torch.bfloat16, cfg) for g in gs], 20)
    print(f"8192x8192 int4 M=16: BF16 {bf:.1f} us; shipped {cfg}: {shipped:.1f} us (xBF16 {bf / shipped:.2f})",
          flush=True)
    for split, cap in CAPPED:
        try:
            err = rel(swap_capped(gs[0], x, split, cap), ref)
            us = gtime([lambda g=g: swap_capped(g, x, split, cap) for g in gs], 20)
        except Exception as exc:  # noqa: BLE001 - reported
            print(f"  split {split} maxnreg {cap}: FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        print(f"  128x16 w8 split {split} maxnreg {cap or 'none'}: {us:.1f} us  xBF16 {bf / us:.2f}  err {err:.1e}"
              f"{'' if err < 1e-2 else '  DISAGREES'}", flush=True)


CAPPED = ((6, 80), (4, 80), (6, 0))     # (split-K, register cap) of the INT4 M=16 variants


def compile_only(index: int) -> None:
    """Compile CAPPED[index] by one launch on a small INT4 layer (N and K are runtime values; the same
    specialization), so the timing process finds it in Triton's cache."""
    w = torch.randn(256, 8192, device="cuda", dtype=torch.bfloat16) * 0.05
    g = build("int4", 256, 8192, w, MODES["int4"], "bf16", {})[2][0]
    swap_capped(g, torch.randn(16, 8192, device="cuda", dtype=torch.bfloat16), *CAPPED[index])
    torch.cuda.synchronize()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="+", default=["nvfp4", "int4"], choices=["nvfp4", "int4"])
    ap.add_argument("--nvfp4-shapes", nargs="+", default=["2048x4096", "8192x8192"], choices=list(SHAPES),
                    help="the shapes of the NVFP4 M=4096 part (the first before the INT4 part, the rest after)")
    ap.add_argument("--compile-only", type=int, help="compile the INT4 variant of this index and exit")
    args = ap.parse_args(argv)
    import oracle_triton.linear as lin

    lin.WORD_LAYOUT = True
    if args.compile_only is not None:
        compile_only(args.compile_only)
        return 0
    if not start("occupancy_probe"):
        return 2
    first, *rest = args.nvfp4_shapes
    if "nvfp4" in args.parts:
        nvfp4_m4096(first)
    if "int4" in args.parts:
        int4_m16()
    if "nvfp4" in args.parts:
        for name in rest:
            nvfp4_m4096(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
