"""R65: w4_ws's time against K at 256 rows (INT4, N = 8192, the 8192x8192 entry's configuration: 64 programs x 2,
128-deep K tiles): a line fitted through K = 128..8192 (1-64 tiles a program) splits a program's time into a fixed
part and a part per K tile (R64's split-K runs took about 30 us a wave whatever their tiles a program). Graph replay
over weight copies rotated out of L2, one process; BF16 cuBLAS beside each K. Run from bench/."""
import os
import sys

sys.path.insert(0, os.getcwd())

import torch

from sweep_dense import build, copies, gtime
from sweep_fp4_words import MODES
import oracle_triton.linear as lin

lin.WORD_LAYOUT = True
cfg = {"WS": 1, "num_warps": 8, "BM": 128, "STAGES": 3, "DW": 8, "DREGS": 128, "MAXNREG": 128, "XCP": 1, "BK": 128,
       "WPF": 3, "MW": 0}
pts = []
for k in (128, 512, 1024, 2048, 4096, 8192):
    w = torch.randn(8192, k, device="cuda", dtype=torch.bfloat16) * 0.05
    x = torch.randn(256, k, device="cuda", dtype=torch.bfloat16)
    bf16 = [w] + [w.clone() for _ in range(copies(8192 * k * 2) - 1)]
    bf = gtime([lambda ww=ww: x @ ww.t() for ww in bf16], 20)
    del bf16
    _, _, gs, _, _, _ = build("int4", 8192, k, w, MODES["int4"], "bf16", {})
    us = min(gtime([lambda g=g: g(x, 0, None, torch.bfloat16, cfg) for g in gs], 20) for _ in range(3))
    pts.append((k // 128, us))
    print(f"K={k}: {k // 128} tiles a program, ws {us:.2f} us, BF16 {bf:.2f} us", flush=True)
n = len(pts)
mx = sum(p[0] for p in pts) / n
my = sum(p[1] for p in pts) / n
slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / sum((p[0] - mx) ** 2 for p in pts)
print(f"fit: {my - slope * mx:.2f} us fixed + {slope:.3f} us a 128-deep K tile", flush=True)
