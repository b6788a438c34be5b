#!/usr/bin/env python3
"""FP8 block W8A8 (1x128 activation groups x 128x128 weight blocks) at decode sizes, one process:
oracle-torch's Triton GEMV (oracle_torch.block_gemv, its launch variants, split over N and K; one row) against
the cuBLASLt blockwise path it replaces (pad to 16 rows, quantize, M-major scales, torch._scaled_mm)
and BF16 cuBLAS (x @ w.T). Microseconds per call under CUDA-graph replay, weights served from HBM
(each candidate cycles through copies of its weights exceeding 256 MB), and the relative error of
each against the cuBLASLt path; TB/s counts the FP8 weight bytes only (HBM column: those bytes at 4.2 TB/s).

    python bench/bench_block_gemv.py [--m 1 8] [--shapes qwen3-qkv qwen3-o] [--variants 0 1]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROTATE = 256 << 20
SHAPES = {"qwen3-qkv": (5120, 2048), "qwen3-o": (2048, 4096), "dsr1-q_b": (24576, 1536), "dsr1-kv_b": (32768, 512),
          "dsr1-o": (7168, 16384), "dsr1-down": (7168, 18432)}
#: (name, block_n, groups per load, warps, K slices: None = block_gemv.plan's, split K summed in the same launch
#: (arrival counter) or by a second one); the third is what oracle-torch's layers run (since r7), the second the
#: first version's launch (16 rows per program over the whole K: about 2 programs per SM). Compiled for sm_90
#: (Triton's ptxas): bn8 g4 w4 72 registers (7 programs per SM), bn16 g4 w4 196, bn4 g4 w2 72 when split,
#: bn8 g2 w1 214 and no barrier in its loop; none spills
#: (a last True: `prequant`, the row rounded by the fused quantizer's launch first)
VARIANTS = [("bn8 g4 w4 auto", 8, 4, 4, None, True), ("old bn16 g4 w4 s1", 16, 4, 4, 1, False),
            ("bn8 g4 w4 auto 2-launch", 8, 4, 4, None, False), ("bn4 g4 w2 auto", 4, 4, 2, None, True),
            ("bn8 g2 w1 auto", 8, 2, 1, None, True), ("bn8 g4 w4 s1", 8, 4, 4, 1, False),
            ("bn8 g4 w4 s4", 8, 4, 4, 4, True), ("bn8 g8 w4 auto", 8, 8, 4, None, True),
            ("bn8 g4 w4 auto 2-launch prequant", 8, 4, 4, None, False, True),
            ("bn16 g4 w4 auto 2-launch prequant", 16, 4, 4, None, False, True),
            ("bn32 g4 w4 auto 2-launch prequant", 32, 4, 4, None, False, True),
            ("bn16 g8 w8 auto 2-launch prequant", 16, 8, 8, None, False, True)]
#: the tensor-core variant (block_gemv.block_gemv_tc: FP8 MMA with the row in column 0 of a 16-wide operand,
#: weight loads pipelined): (name, block_n, warps, stages, K slices: None = block_gemv.plan_tc's)
TC_VARIANTS = [("tc bn64 w4 st3 auto", 64, 4, 3, None), ("tc bn64 w4 st4 auto", 64, 4, 4, None),
               ("tc bn64 w4 st3 s1", 64, 4, 3, 1), ("tc bn64 w4 st3 s2", 64, 4, 3, 2),
               ("tc bn128 w4 st3 auto", 128, 4, 3, None), ("tc bn128 w8 st3 auto", 128, 8, 3, None),
               ("tc bn32 w4 st3 auto", 32, 4, 3, None), ("tc bn64 w4 st2 auto", 64, 4, 2, None)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, nargs="+", default=[1], help="rows (the GEMV serves 1; more: cuBLAS, BF16)")
    ap.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=["qwen3-qkv", "qwen3-o"])
    ap.add_argument("--variants", type=int, nargs="+", help="indices into VARIANTS (default: all)")
    ap.add_argument("--tc", type=int, nargs="*", default=[], help="indices into TC_VARIANTS (none by default)")
    ap.add_argument("--triton", action="store_true",
                    help="also oracle-triton's linear in w8a8_block mode (its quantizer launch + FP8 swap GEMM), on "
                         "weights of the same shape (rel: against its own emulation reference)")
    ap.add_argument("--sass", action="store_true",
                    help="no GPU: compile the variants for sm_90 (Triton's ptxas) and print registers, spills and the "
                         "K loop's SASS instructions and barriers per weight byte (plugins/triton/tests/sm90_compile.py)")
    args = ap.parse_args()
    if args.sass:
        sass(args)
        return
    from gpu_timing import graph_ms, rel, start
    if not start("bench_block_gemv.py"):
        sys.exit(2)
    from oracle_torch import block_gemv, gemm, quantize_triton
    variants = [VARIANTS[i] for i in args.variants] if args.variants else VARIANTS
    dev = "cuda"
    for shape in args.shapes:
        n, k = SHAPES[shape]
        copies = max(2, -(-ROTATE // (n * k)))
        ws = [(torch.randn(n, k, device=dev) * 30).clamp(-448, 448).to(torch.float8_e4m3fn) for _ in range(copies)]
        scales = [gemm.block_weight_scale(torch.rand(n // 128, k // 128, device=dev) + 0.01, "kblocks")
                  for _ in range(copies)]
        bf = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(max(2, -(-ROTATE // (2 * n * k))))]
        for m in args.m:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)

            def cublas(i, x=x, m=m):
                pad = (-m) % gemm.BLOCK_M_MULTIPLE
                x2 = torch.nn.functional.pad(x, (0, 0, 0, pad)) if pad else x
                xq, sx = quantize_triton.fp8_per_group(x2)
                return gemm.blockwise(xq, ws[i].t(), gemm.m_major(sx), scales[i], torch.bfloat16)[:m]

            ref = cublas(0).float()
            row = [f"{shape:10s} N={n} K={k} M={m:<3d} HBM(fp8) {n * k / 4.2e6:5.1f}"]
            us = 1e3 * graph_ms(lambda: [cublas(i) for i in range(copies)], 1) / copies
            row.append(f"cublas {us:6.1f} = {n * k / us / 1e6:4.2f} TB/s")
            us = 1e3 * graph_ms(lambda: [x @ w.t() for w in bf], 1) / len(bf)
            row.append(f"bf16 {us:6.1f} = {2 * n * k / us / 1e6:4.2f} TB/s")
            print(" | ".join(row), flush=True)            # then one line per variant, so a cut run keeps them
            cnt = block_gemv.counter(n, dev)
            for name, bn, groups, warps, split, one, *pre in (variants if m <= block_gemv.MAX_ROWS else []):
                try:
                    run = (lambda i, x=x: block_gemv.block_gemv(x, ws[i], scales[i], torch.bfloat16, bn, groups,
                                                                warps, split, cnt if one else None, bool(pre and pre[0])))
                    err = rel(run(0), ref)
                    us = 1e3 * graph_ms(lambda: [run(i) for i in range(copies)], 1) / copies
                    p = block_gemv.plan(n, k, block_gemv.sm_count(0), bn, groups, warps, split)
                    print(f"    {name} [s{p.split} g{p.groups}] {us:6.1f} = {n * k / us / 1e6:4.2f} TB/s "
                          f"(err {err:.1e})", flush=True)
                except Exception as exc:  # noqa: BLE001 - a variant that does not compile is reported
                    print(f"    {name} FAILED {type(exc).__name__}: {str(exc)[:120]}", flush=True)
            for name, bn, warps, stages, split in ([TC_VARIANTS[i] for i in args.tc] if m <= block_gemv.MAX_ROWS
                                                   else []):
                try:
                    run = (lambda i, x=x: block_gemv.block_gemv_tc(x, ws[i], scales[i], torch.bfloat16, bn, warps,
                                                                   stages, split))
                    err = rel(run(0), ref)
                    us = 1e3 * graph_ms(lambda: [run(i) for i in range(copies)], 1) / copies
                    s = block_gemv.plan_tc(n, k, block_gemv.sm_count(0), bn, split)
                    print(f"    {name} [s{s}] {us:6.1f} = {n * k / us / 1e6:4.2f} TB/s (err {err:.1e})", flush=True)
                except Exception as exc:  # noqa: BLE001
                    print(f"    {name} FAILED {type(exc).__name__}: {str(exc)[:120]}", flush=True)
            if args.triton:
                try:
                    print(f"    oracle-triton w8a8_block {_triton_us(n, k, x, copies)}", flush=True)
                except Exception as exc:  # noqa: BLE001
                    print(f"    oracle-triton w8a8_block FAILED {type(exc).__name__}: {str(exc)[:120]}", flush=True)
        del ws, scales, bf
        torch.cuda.empty_cache()


def sass(args) -> None:
    """Each variant's compiled K loop (launch shape of `plan` at each shape), without a GPU: what a
    program spends per weight byte."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "triton" / "tests"))
    import sm90_compile
    from oracle_torch import block_gemv
    variants = [VARIANTS[i] for i in args.variants] if args.variants else VARIANTS
    for shape in args.shapes:
        n, k = SHAPES[shape]
        for name, bn, groups, warps, split, one, *pre in variants:
            pre = bool(pre and pre[0])
            p = block_gemv.plan(n, k, 132, bn, groups, warps, split)
            ptrs = {"x_ptr": "*fp8e4nv" if pre else "*bf16", "w_ptr": "*fp8e4nv", "ws_ptr": "*fp32",
                    "part_ptr": "*fp32", "y_ptr": "*bf16", "cnt_ptr": "*i32", "sx_ptr": "*fp32" if pre else "*bf16"}
            # the loop body per chunk is the same at any K; a slice of 16 chunks makes it a loop (at the
            # shapes' own K a slice is 1-4 chunks and the compiler unrolls it)
            r = sm90_compile.compile_kernel(block_gemv._block_gemv_kernel, ptrs, {
                "K": 16 * 128 * p.groups * p.split, "SPLIT": p.split, "BLOCK_N": bn, "G": p.groups, "GROUP": 128, "TICKET": one and p.split > 1,
                "PREQUANT": pre}, warps, 1)
            loop = r["loop"]
            per_byte = f"{loop['instructions'] * warps * 32 / (bn * p.groups * 128):.1f}" if loop else "-"
            print(f"{shape:10s} {name:34s} [s{p.split} g{p.groups}] regs {r['regs']} spills {r['spills']} shared "
                  f"{r['shared']} | K loop: {loop} -> {per_byte} thread-instructions per weight byte", flush=True)


def _triton_us(n: int, k: int, x: torch.Tensor, copies: int) -> str:
    """oracle-triton's TritonLinear (w8a8_block) on `copies` random N x K weights: us per call under graph
    replay, its relative error against oracle-emulation's forward of the same tensors."""
    from bench_triton import dense_pair
    from gpu_timing import graph_ms, rel
    params = {"activation_granularity": "group", "activation_group": [1, 128], "weight_block": [128, 128]}
    kernels = []
    for i in range(copies):
        w = torch.randn(n, k, device="cuda") * 0.05
        t, e, *_ = dense_pair(f"w{i}", "fp8_block", n, k, w, "w8a8_block", "fp8", params)
        if i == 0:
            err = rel(t.forward(x), e.apply(x))
        kernels.append(t)
        del e
    us = 1e3 * graph_ms(lambda: [t.forward(x) for t in kernels], 1) / copies
    return f"{us:6.1f} us (err {err:.1e})"


if __name__ == "__main__":
    main()
