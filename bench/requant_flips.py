"""Is a GPU MoE miss against oracle-emulation a rounding flip or a fault? (R39, fifteenth pass)

The W8A8 / W4A4 MoE modes re-round FC1's output to FP8 / FP4 as FC2's input. A last-bit difference in FC1's
fp32 sums can move a value across a rounding boundary, and one such flip moves the output by up to one FP8 step
(2**-3 relative) or one FP4 step (up to 1/2) of that value. This script measures how large that effect is with
no oracle-triton code involved: the same emulation MoE, the same tensors, run on the CPU and on the GPU (whose
matmuls sum in another order). If emulation-on-CPU against emulation-on-GPU already differs by about as much as
oracle-triton against emulation, the tolerance, not the kernel, is what the miss shows; the W8A16 / W4A16 modes
(no re-rounding) are the control and must stay near bf16 rounding.

Usage (a GPU machine): python3 bench/requant_flips.py [--seeds 16]
Prints per mode: median and max over seeds of rel(triton, emu_gpu) and rel(emu_cpu, emu_gpu). Without a GPU
it runs on the CPU in Triton's interpreter (a smoke run: both emulations then sum alike).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "triton" / "tests"))
from helpers import quantize, rel, routing  # noqa: E402

from oracle import MoELayer  # noqa: E402
from oracle.catalog import Mode  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"

#: (weight, mode, activation, params, activation function, bias, config or None, E, H, I, K): the cases of
#: test_triton_gemv.test_direct_moe_matches_emulation and test_triton_moe_w4a4.test_xq_path_matches_emulation
XQ = {"XQ": 1, "DECODE": 2, "BLOCK_N": 16, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3, "BLOCK_N2": 16,
      "BLOCK_K2": 128, "WARPS2": 4}
CASES = [
    ("fp8_tensor", "w8a16_fp8_tensor", "bf16", {}, "silu", True, "direct", 16, 256, 128, 2),
    ("fp8_tensor", "w8a8_fp8_tensor", "fp8", {"activation_granularity": "tensor"}, "silu", True, "direct", 16, 256, 128, 2),
    ("fp8_channel", "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"}, "silu", True, "direct", 16, 256, 128, 2),
    ("fp8_block", "w8a16_block", "bf16", {}, "silu", True, "direct", 16, 256, 128, 2),
    ("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}, "silu", True, "direct", 16, 256, 128, 2),
    ("nvfp4", "w4a16_nvfp4", "bf16", {}, "silu", True, "direct", 16, 256, 128, 2),
    ("nvfp4", "w4a4_nvfp4", "nvfp4", {}, "silu", True, "direct", 16, 256, 128, 2),
    ("nvfp4", "w4a4_nvfp4", "nvfp4", {}, "swigluoai", True, XQ, 8, 256, 160, 2),
]


def build(case, seed: int):
    from oracle_emulation.moe import EmulationMoE
    from oracle_triton.moe import TritonMoE

    fmt, mode, act, params, activation, bias, cfg, e, h, i, k = case
    torch.manual_seed(seed)
    rows = 2 * i
    layer = MoELayer(name=f"moe-{fmt}", num_experts=e, top_k=k, hidden_size=h, intermediate_size=i,
                     weight_format=fmt, activation=activation, has_bias=bias)
    q13 = quantize(fmt, torch.randn(e, rows, h) * 0.05, symmetric=True)
    q2 = quantize(fmt, torch.randn(e, h, i) * 0.05, symmetric=True)
    tensors = {"w13": q13["weight"], "w2": q2["weight"], "w13_scale": q13.get("weight_scale"),
               "w2_scale": q2.get("weight_scale"), "w13_global_scale": q13.get("weight_global_scale"),
               "w2_global_scale": q2.get("weight_global_scale")}
    if bias:
        tensors["w13_bias"] = torch.randn(e, rows) * 0.1
        tensors["w2_bias"] = torch.randn(e, h) * 0.1
    mode_obj = Mode(weight=fmt, activation=act, name=mode, params=params)
    on = lambda dev: {n: (v.to(dev) if v is not None else None) for n, v in tensors.items()}  # noqa: E731
    t = TritonMoE(layer, mode_obj, None)
    t.process_weights(**on(DEV))
    eg, ec = EmulationMoE(layer, mode_obj, None), EmulationMoE(layer, mode_obj, None)
    eg.process_weights(**on(DEV))
    ec.process_weights(**on("cpu"))
    m = 2 if cfg != "direct" else 3
    x = torch.randn(m, h, dtype=torch.bfloat16)
    w, ids = routing(m, e, k)
    return t, eg, ec, x, w, ids, cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=16)
    args = ap.parse_args()
    print(f"{'mode':<22} {'act fn':<10} {'path':<6} | triton vs emu(GPU): median / max | emu(CPU) vs emu(GPU): "
          f"median / max | triton vs emu(CPU): max")
    for case in CASES:
        tg, ce, tc = [], [], []
        for seed in range(args.seeds):
            t, eg, ec, x, w, ids, cfg = build(case, seed)
            xg, wg, ig = x.to(DEV), w.to(DEV), ids.to(DEV)
            ref_g = eg.apply(xg, wg, ig)
            ref_c = ec.apply(x, w, ids)
            if cfg == "direct":
                k = case[-1]
                y = t.apply_direct(xg, wg.reshape(-1).float(), ig.reshape(-1), x.shape[0], k)
            else:
                t.config = cfg
                y = t.apply(xg, wg, ig)
            tg.append(rel(y, ref_g))
            ce.append(rel(ref_c.to(DEV), ref_g))
            tc.append(rel(y.cpu(), ref_c))
        path = "direct" if case[6] == "direct" else "XQ"
        print(f"{case[1]:<22} {case[4]:<10} {path:<6} | {statistics.median(tg):.2e} / {max(tg):.2e} | "
              f"{statistics.median(ce):.2e} / {max(ce):.2e} | {max(tc):.2e}", flush=True)


if __name__ == "__main__":
    main()
