"""R66 (nineteenth pass; R65's scan, which was never run, for both w4_ws forms): w4_ws's time against K at 256
rows, N = 8192, the shipped 8192x8192 entries' configurations (INT4: two MMA warpgroups, 128-deep K tiles, 64 x 2
programs; MXFP4: one warpgroup, 256 rows, 64-deep tiles, 128 programs). A line fitted through K = 128..8192 splits
a program's time into a fixed part and a part per K tile (R64's split-K runs took about 30 us a wave whatever their
tiles a program). Graph replay over weight copies rotated out of L2, one process; BF16 cuBLAS beside each K.
int4x: the INT4 entry with the activations by TMA (XTMA 1). Run from bench/."""
import os
import sys

sys.path.insert(0, os.getcwd())

import torch

from sweep_dense import build, copies, gtime
from sweep_fp4_words import MODES
import oracle_triton.linear as lin

lin.WORD_LAYOUT = True
FORMS = {
    "int4": ({"WS": 1, "num_warps": 8, "BM": 128, "STAGES": 3, "DW": 8, "DREGS": 128, "MAXNREG": 128, "XCP": 1,
              "BK": 128, "WPF": 3, "MW": 0}, 128),
    "int4x": ({"WS": 1, "num_warps": 8, "BM": 128, "STAGES": 3, "DW": 8, "DREGS": 128, "MAXNREG": 128, "XTMA": 1,
               "BK": 128, "WPF": 3, "MW": 0}, 128),
    "mxfp4": ({"WS": 1, "num_warps": 4, "BM": 256, "STAGES": 4, "DW": 8, "DREGS": 104, "MAXNREG": 168, "XCP": 1,
               "KN": 1}, 64),
}
for fmt in sys.argv[1:] or list(FORMS):
    cfg, bk = FORMS[fmt]
    form, fmt = fmt, fmt.rstrip("x")
    pts = []
    for k in (128, 256, 512, 1024, 2048, 4096, 8192):
        w = torch.randn(8192, k, device="cuda", dtype=torch.bfloat16) * 0.05
        x = torch.randn(256, k, device="cuda", dtype=torch.bfloat16)
        bf16 = [w] + [w.clone() for _ in range(copies(8192 * k * 2) - 1)]
        bf = min(gtime([lambda ww=ww: x @ ww.t() for ww in bf16], 20) for _ in range(3))
        del bf16
        _, _, gs, _, _, _ = build(fmt, 8192, k, w, MODES[fmt], "bf16", {})
        us = min(gtime([lambda g=g: g(x, 0, None, torch.bfloat16, cfg) for g in gs], 20) for _ in range(3))
        pts.append((k // bk, us))
        print(f"{form} K={k}: {k // bk} tiles a program, ws {us:.2f} us, BF16 {bf:.2f} us", flush=True)
        del gs
        torch.cuda.empty_cache()
    n = len(pts)
    mx = sum(p[0] for p in pts) / n
    my = sum(p[1] for p in pts) / n
    slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / sum((p[0] - mx) ** 2 for p in pts)
    print(f"{form} fit: {my - slope * mx:.2f} us fixed + {slope:.3f} us a {bk}-deep K tile", flush=True)
