"""R59-R63: one eager launch of w4_ws per config (8192x8192, 256 rows; NCU_FMT, default INT4) for Nsight Compute
to profile; run from bench/ under ncu. Arguments: indices into NCU_CFGS's list for the format (default
configs/ws_r59.json: the R56 entry, one warpgroup at 256 rows, 16 decode warps), or "s" for the shipped entry."""
import json
import os
import sys

sys.path.insert(0, os.getcwd())      # run from bench/ (rega_probe, sweep_dense)

import torch

import rega_probe as rp
from sweep_dense import build
from sweep_fp4_words import MODES
import oracle_triton.linear as lin

lin.WORD_LAYOUT = True
rp.M = 256
FMT = os.environ.get("NCU_FMT", "int4")
cfgs = json.load(open(os.environ.get("NCU_CFGS", "configs/ws_r59.json"))).get(FMT, [])
w = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) * 0.05
x = torch.randn(256, 8192, device="cuda", dtype=torch.bfloat16)
t, em, gs, _, _, _ = build(FMT, 8192, 8192, w, MODES[FMT], "bf16", {})
ref = em.apply(x)
pick = [gs[0].config_for(256, 0) if a == "s" else cfgs[int(a)] for a in sys.argv[1:] or ["0", "1", "4"]]
for c in pick:
    y = rp.rega(gs[0], x, c)
    torch.cuda.synchronize()
    print(rp.label(c), "err", rp.rel(y, ref), flush=True)
