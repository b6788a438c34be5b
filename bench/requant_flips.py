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
R39's figures (rounds.md, Fifteenth pass) came from this script before it built its layers with helpers.moe_pair
(the same cases and kinds of tensors, drawn on the CPU then): other draws, the same comparison.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "triton" / "tests"))
from helpers import moe_pair, rel, routing  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"

#: (weight, mode, activation, params, activation function, config or "direct", E, H, I, K), every case with biases:
#: those of test_triton_gemv.test_direct_moe_matches_emulation and test_triton_moe_w4a4.test_xq_path_matches_emulation
XQ = {"XQ": 1, "DECODE": 2, "BLOCK_N": 16, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3, "BLOCK_N2": 16,
      "BLOCK_K2": 128, "WARPS2": 4}
CASES = [
    ("fp8_tensor", "w8a16_fp8_tensor", "bf16", {}, "silu", "direct", 16, 256, 128, 2),
    ("fp8_tensor", "w8a8_fp8_tensor", "fp8", {"activation_granularity": "tensor"}, "silu", "direct", 16, 256, 128, 2),
    ("fp8_channel", "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"}, "silu", "direct", 16, 256, 128, 2),
    ("fp8_block", "w8a16_block", "bf16", {}, "silu", "direct", 16, 256, 128, 2),
    ("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}, "silu", "direct", 16, 256, 128, 2),
    ("nvfp4", "w4a16_nvfp4", "bf16", {}, "silu", "direct", 16, 256, 128, 2),
    ("nvfp4", "w4a4_nvfp4", "nvfp4", {}, "silu", "direct", 16, 256, 128, 2),
    ("nvfp4", "w4a4_nvfp4", "nvfp4", {}, "swigluoai", XQ, 8, 256, 160, 2),
]


def build(case, seed: int):
    """(oracle-triton on DEV, emulation on DEV, emulation on the CPU, inputs): the tests' helpers.moe_pair twice
    from the same seed, so all three hold the same expert tensors."""
    fmt, mode, act, params, activation, cfg, e, h, i, k = case

    def pair(ref_device):
        torch.manual_seed(seed)
        return moe_pair(fmt, e, h, i, k, mode, act, params, activation=activation, bias=True, device=DEV,
                        ref_device=ref_device)
    t, eg = pair(None)
    _, ec = pair("cpu")
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
        path = "direct" if case[5] == "direct" else "XQ"
        print(f"{case[1]:<22} {case[4]:<10} {path:<6} | {statistics.median(tg):.2e} / {max(tg):.2e} | "
              f"{statistics.median(ce):.2e} / {max(ce):.2e} | {max(tc):.2e}", flush=True)


if __name__ == "__main__":
    main()
