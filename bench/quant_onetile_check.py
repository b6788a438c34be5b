"""GPU A/B: the per-token FP8 quantizer in one load per row for K above 16384 (launch.ONE_TILE_MAX_K
raised to 32768: a 32768-wide tile at 16 warps, 118 registers, no spills for sm_90) against the two
passes over the row it takes now, on 7168x18432 (DeepSeek-R1's down projection), in one process: the
quantizer alone and the whole W8A8 per-channel call at M = 16 / 256 (graph replay, the layer's weights
rotated through more than 256 MB of copies), the codes and outputs compared bit for bit. Run from bench/.
"""
from __future__ import annotations

import torch
from bench_peers import _clone, build_dense, copies_for
from bench_triton import dense_reference
from gpu_timing import rel
from sweep_dense import gtime

from oracle_triton import launch
from oracle_triton.formats import ACT_TOKEN


def main() -> int:
    n, k = 7168, 18432
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    ref, tensors, layer, mode = dense_reference("7168x18432", "fp8_channel", n, k, w, "w8a8_fp8_channel", "fp8",
                                                {"activation_granularity": "token"})
    del w
    first, nbytes, _ = build_dense("oracle", "fp8_channel", layer, mode, _clone(tensors))     # TritonLinear.apply
    fns = [first] + [build_dense("oracle", "fp8_channel", layer, mode, _clone(tensors))[0]
                     for _ in range(copies_for(nbytes) - 1)]
    gemms = [f.__self__.gemm for f in fns]      # the layer's GEMM path itself (no launch plan: it would replay
    facts = gemms[0].facts                       # the launches recorded under the other setting)
    before = launch.ONE_TILE_MAX_K
    for m in (16, 256):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        out = {}
        for one in (before, 32768):
            launch.ONE_TILE_MAX_K = one
            codes, scales = launch.quantize_activation_codes(x, ACT_TOKEN, None, facts)
            y = gemms[0](x, ACT_TOKEN, None, torch.bfloat16)
            q_us = gtime([lambda: launch.quantize_activation_codes(x, ACT_TOKEN, None, facts)])
            y_us = gtime([lambda g=g: g(x, ACT_TOKEN, None, torch.bfloat16) for g in gemms])
            out[one] = (codes.clone(), scales.clone(), y.clone())
            print(f"7168x18432 M={m} ONE_TILE_MAX_K={one}: quantizer {q_us:.1f} us, whole call {y_us:.1f} us, "
                  f"rel to emulation {rel(y, ref.apply(x)):.1e}", flush=True)
        a, b = out[before], out[32768]
        print(f"7168x18432 M={m}: codes, scales and outputs bit-equal: "
              f"{all(torch.equal(u, v) for u, v in zip(a, b))}", flush=True)
    launch.ONE_TILE_MAX_K = before
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
