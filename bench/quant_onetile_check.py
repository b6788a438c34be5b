"""GPU A/B: the per-token FP8 quantizer in one load per row for K above 16384 (launch.ONE_TILE_MAX_K
raised to 32768: a 32768-wide tile at 16 warps, 118 registers, no spills for sm_90) against the two
passes over the row it takes now, on 7168x18432 (DeepSeek-R1's down projection), in one process: the
quantizer alone and the whole W8A8 per-channel call at M = 16 / 256 (graph replay, the layer's weights
rotated through more than 256 MB of copies), the codes and outputs compared bit for bit. Run from bench/.

--token-k: instead, the two passes in wider steps (launch.TOKEN_K / TOKEN_WARPS: 4096 at 8 warps now; 8192
at 8 and 16384 at 16 warps, 32 fp32 values a thread), fewer dependent loads per row (eighth pass).

    python3 quant_onetile_check.py [--token-k]
"""
from __future__ import annotations

import torch
from bench_peers import _clone, build_dense, copies_for
from bench_triton import dense_reference
from gpu_timing import rel
from sweep_dense import gtime

from oracle_triton import launch
from oracle_triton.formats import ACT_TOKEN


def settings(token_k: bool) -> list[tuple[str, dict]]:
    """(label, launch module values) to compare; the first is what ships."""
    now = {"ONE_TILE_MAX_K": launch.ONE_TILE_MAX_K, "TOKEN_K": launch.TOKEN_K, "TOKEN_WARPS": launch.TOKEN_WARPS}
    if token_k:
        return [(f"TOKEN_K={now['TOKEN_K']} w{now['TOKEN_WARPS']}", now),
                ("TOKEN_K=8192 w8", {**now, "TOKEN_K": 8192, "TOKEN_WARPS": 8}),
                ("TOKEN_K=16384 w16", {**now, "TOKEN_K": 16384, "TOKEN_WARPS": 16})]
    return [(f"ONE_TILE_MAX_K={now['ONE_TILE_MAX_K']}", now), ("ONE_TILE_MAX_K=32768", {**now, "ONE_TILE_MAX_K": 32768})]


def main() -> int:
    import sys
    token_k = "--token-k" in sys.argv[1:]
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
    cases = settings(token_k)
    for m in (16, 256):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        out = []
        for label, values in cases:
            for name, v in values.items():
                setattr(launch, name, v)
            codes, scales = launch.quantize_activation_codes(x, ACT_TOKEN, None, facts)
            y = gemms[0](x, ACT_TOKEN, None, torch.bfloat16)
            q_us = gtime([lambda: launch.quantize_activation_codes(x, ACT_TOKEN, None, facts)])
            y_us = gtime([lambda g=g: g(x, ACT_TOKEN, None, torch.bfloat16) for g in gemms])
            out.append((codes.clone(), scales.clone(), y.clone()))
            print(f"7168x18432 M={m} {label}: quantizer {q_us:.1f} us, whole call {y_us:.1f} us, "
                  f"rel to emulation {rel(y, ref.apply(x)):.1e}", flush=True)
        print(f"7168x18432 M={m}: codes, scales and outputs bit-equal to {cases[0][0]}: "
              f"{[all(torch.equal(u, v) for u, v in zip(out[0], o)) for o in out[1:]]}", flush=True)
    for name, v in cases[0][1].items():
        setattr(launch, name, v)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
