"""R95 diagnosis: R94's WS GPU test matched the reference and gave the same bits on two eager calls, but a CUDA-graph
replay differed from the eager call on the same inputs. Here every stage (FC1's input and output, FC2's input and
output, the result) of a replay is compared with an eager call's, on the rows that count (used blocks, valid pairs)."""
import sys

import torch

sys.path.insert(0, "plugins/triton/tests")
from helpers import moe_pair, routing  # noqa: E402
from oracle_triton import moe_ws  # noqa: E402

DQ = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_N1": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3,
      "DEQUANT_MM": 512}
WS = dict(DQ, WS=1, WS_WARPS=4, BM=128, STAGES=4, DW=8, DREGS=104, MAXNREG=168, XTMA=1, DP=2)
rec = []
orig = moe_ws._ws_gemm


def spy(a, w, bias, y, block_expert, sorted_ids, t, cfg):
    rec.append((a, y, block_expert))
    return orig(a, w, bias, y, block_expert, sorted_ids, t, cfg)


moe_ws._ws_gemm = spy


def stages(tm, x, w, ids):
    rec.clear()
    out = tm.forward(x, w, ids)
    return [t_ for r in rec for t_ in r[:2]] + [out], rec[0][2]


def compare(tag, a, b, bexp, bm, tpairs):
    names = ["xs", "y1", "inter", "y2", "out"]
    used = (bexp >= 0).repeat_interleave(bm)
    for n, u, v in zip(names, a, b):
        if n in ("xs", "y1", "inter"):
            u, v = u[used[:u.shape[0]]], v[used[:v.shape[0]]]
        same = torch.equal(u, v)
        d = (u.float() - v.float()).abs()
        rows = (d.amax(dim=1) > 0).nonzero().flatten().tolist()
        print(f"{tag} {n}: same={same} max|d|={d.max().item():.3g} differing rows {len(rows)} {rows[:8]} "
              f"nan {u.isnan().sum().item()}/{v.isnan().sum().item()}", flush=True)


for cfg_name, cfg in (("WS bm128 xtma1 dp2", WS), ("WS bm64 xtma0 xcp1", dict(WS, BM=64, XTMA=0, DP=1, XCP=1))):
    t, _ = moe_pair("mxfp4", 8, 640, 384, 4, "w4a16_mx", "bf16", {}, activation="swigluoai", bias=True,
                    device="cuda")
    t.config = cfg
    t.check_inputs = False
    m = 37
    x = torch.randn(m, 640, dtype=torch.bfloat16, device="cuda")
    w, ids = routing(m, 8, 4, "cuda")
    e1, bexp = stages(t, x, w, ids)
    e1 = [v.clone() for v in e1]
    e2, _ = stages(t, x, w, ids)
    compare(f"[{cfg_name}] eager vs eager", e1, e2, bexp, cfg["BM"], m * 4)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        t.forward(x, w, ids)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gs, gbexp = stages(t, x, w, ids)
    g.replay()
    torch.cuda.synchronize()
    e3, bexp = stages(t, x, w, ids)
    compare(f"[{cfg_name}] replay (same inputs) vs eager", gs, e3, bexp, cfg["BM"], m * 4)
    x.copy_(torch.randn_like(x))
    nw, nids = routing(m, 8, 4, "cuda")
    w.copy_(nw)
    ids.copy_(nids)
    g.replay()
    torch.cuda.synchronize()
    e4, bexp = stages(t, x, w, ids)
    compare(f"[{cfg_name}] replay (new inputs) vs eager", gs, e4, bexp, cfg["BM"], m * 4)
    print(f"[{cfg_name}] block experts eager {bexp.tolist()} graph {gbexp.tolist()}", flush=True)
