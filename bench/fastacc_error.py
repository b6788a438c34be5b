"""How far FP8 W8A8 per channel moves from oracle-emulation when the float8 products are summed over K without a
promotion every K tile (cfg FASTACC 1; the rules' SCALED_MM takes it from 256 rows, launch.SCALED_MM_FAST_ACCUM):
torch._scaled_mm with and without use_fast_accum, and the tiled GEMM with and without FASTACC, on random rows and
on same-sign sums (non-negative activations and weights: no cancellation, the case where an accumulator with few
mantissa bits loses most), K from 4096 to 18432. Prints each one's relative error (Frobenius, as the benchmarks
report it) and its largest element error over the reference's largest magnitude.
Run from bench/ on a GPU with float8 tensor cores.

    python3 fastacc_error.py
"""
from __future__ import annotations

import torch
from bench_triton import dense_pair
from gpu_timing import rel

TILES = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "SPLIT_K": 1, "GROUP_M": 8, "FULL_TILE": 0,
         "num_warps": 8, "num_stages": 4}


def main() -> int:
    n, m = 2048, 256
    for k in (4096, 7168, 18432):
        for data in ("random", "same-sign"):
            g = torch.Generator(device="cuda").manual_seed(k)
            w = torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16) * 0.05
            x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
            if data == "same-sign":
                w, x = w.abs(), x.abs()
            t, e, *_ = dense_pair(f"{n}x{k}", "fp8_channel", n, k, w, "w8a8_fp8_channel", "fp8",
                                  {"activation_granularity": "token"})
            ref = e.apply(x)
            cells = []
            for label, cfg in (("scaled_mm", {"SCALED_MM": 1}), ("scaled_mm fast", {"SCALED_MM": 1, "FASTACC": 1}),
                               ("tiles", TILES), ("tiles fast", {**TILES, "FASTACC": 1})):
                y = t.gemm(x, t.act, None, torch.bfloat16, cfg)
                worst = float((y.float() - ref.float()).abs().max() / ref.float().abs().max())
                cells.append(f"{label} {rel(y, ref):.2e} / {worst:.2e}")
            print(f"{n}x{k} M={m} {data:9s} | " + " | ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
