"""Sweep of the small-batch paths' launch parameters on a GPU (oracle_triton.gemv / moe_gemv).

Dense (M = 1): the default gemv_config and variants of it (BLOCK_N, BLOCK_K, SPLIT_K, warps,
stages, the E2M1 decoder), each under CUDA-graph replay beside BF16 `x @ w.T` and the HBM limit;
every variant's output is compared with oracle-emulation's (a variant that disagrees is flagged,
never chosen); beside them the tensor-core GEMM at M = 1 (launch.use_gemv picks between them).
MoE (M = 1, 4, 16): the direct two-launch path and its variants against the aligned grouped GEMM
(whose output they are checked against) and the BF16 grouped baseline.

    cd bench && python3 sweep_gemv.py [--only dense|moe] [--variants default ...] [--json out.json]
                                      [--budget-s 420]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from bench_triton import DENSE, DENSE_MODES, MOE, _bf16_moe, _quant
from gpu_timing import copy_bandwidth, graph_ms, rel, start

from oracle import LinearLayer, MoELayer
from oracle.catalog import Mode

DENSE_SHAPES = ["square-8192", "deepseek-r1.down_proj", "deepseek-r1.kv_a_proj_with_mqa", "qwen3-30b-a3b.qkv_proj"]


def variants(base: dict, elem: int) -> list[tuple[str, dict]]:
    """The default and one-knob changes of it."""
    out = [("default", base)]

    def v(name, **kw):
        c = {**base, **kw}
        if c != base and all(x[1] != c for x in out):
            out.append((name, c))
    v("bn16", BLOCK_N=16)
    v("bn64", BLOCK_N=64)
    v("bk/2", BLOCK_K=max(128, base["BLOCK_K"] // 2))
    v("bk*2", BLOCK_K=base["BLOCK_K"] * 2)
    if "SPLIT_K" in base:  # dense
        v("split*2", SPLIT_K=min(32, base["SPLIT_K"] * 2))
        v("split/2", SPLIT_K=max(1, base["SPLIT_K"] // 2))
    v("warps8", num_warps=8)
    v("warps2", num_warps=2)
    v("stages2", num_stages=2)
    v("stages4", num_stages=4)
    v("decode-f16", DECODE=2)
    if elem in (1, 2):
        v("decode-e4m3", DECODE=1)
    return out


ONLY: set[str] | None = None     # --variants: try only these variant labels


def _chosen(cands):
    return [c for c in cands if ONLY is None or c[0] in ONLY]


def sweep_dense(bw, rows, deadline):
    from oracle_emulation.linear import EmulationLinear
    from oracle_triton.launch import dense_config, gemv_config, use_gemv
    from oracle_triton.linear import TritonLinear

    print("\n== dense M=1: variants of gemv_config (us, graph replay) ==")
    for name in DENSE_SHAPES:
        n, k = DENSE[name]
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
        x1 = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        tb = graph_ms(lambda: x1 @ w.t(), 20) * 1e3
        for fmt, mode_name, act, params in DENSE_MODES:
            if time.perf_counter() > deadline:
                print("budget spent: stopping the dense sweep")
                return
            layer = LinearLayer(name=name, in_features=k, out_features=n, weight_format=fmt,
                                group_size=128 if fmt == "int4" else None)
            t = TritonLinear(layer, Mode(weight=fmt, activation=act, name=mode_name, params=params), None)
            tensors = _quant(fmt, w)
            t.process_weights(**tensors)
            em = EmulationLinear(layer, t.mode, None)
            em.process_weights(**tensors)
            del tensors
            g = t.gemm
            sms, elem = g.facts["sms"], g.layout.elem
            hbm = t.packed.nbytes() / bw * 1e6
            base = gemv_config(n, k, sms, elem, g.layout.group, words=g.facts["hw_fp8"] and not t.act)
            ref = em.apply(x1)          # the reference: every variant is checked against it
            del em
            best = None
            for label, cfg in _chosen(variants(base, elem)):
                try:
                    y = g(x1, t.act, None, torch.bfloat16, cfg) if not t.act or t.act in (1, 2) else None
                    if y is None:
                        continue
                    err = rel(y, ref)
                    us = graph_ms(lambda: g(x1, t.act, None, torch.bfloat16, cfg), 20) * 1e3
                except Exception as exc:  # noqa: BLE001 - a config that does not compile is reported
                    print(f"  {name} {mode_name} {label}: FAILED {type(exc).__name__}: {str(exc)[:100]}")
                    continue
                ok = err < 1e-2
                rows.append(dict(kind="dense", shape=name, mode=mode_name, m=1, variant=label, config=cfg, us=us,
                                 bf16_us=tb, hbm_us=hbm, err=err))
                if ok and (best is None or us < best[1]):
                    best = (label, us, cfg)
                print(f"  {name:30} {mode_name:12} {label:12} {us:7.1f} us  x{tb / us:5.2f} BF16 "
                      f"{us / hbm:5.2f}x HBM  err {err:.1e}{'' if ok else '  DISAGREES'}", flush=True)
            print(f"BEST {name} {mode_name} M=1: {best[0]} {best[1]:.1f} us (bf16 {tb:.1f}, hbm {hbm:.1f}) "
                  f"{best[2]}", flush=True)
            tc = graph_ms(lambda: g(x1, t.act, None, torch.bfloat16, dense_config(1, n, k, sms, g.layout.pack)), 20) * 1e3
            rows.append(dict(kind="dense-mma", shape=name, mode=mode_name, m=1, mma_us=tc, bf16_us=tb))
            print(f"  M=1 {name:24} {mode_name:12} tensor-core GEMM {tc:7.1f} us (GEMV chosen: {use_gemv(1, n, k, elem)})", flush=True)
            del t, g
        del w
        torch.cuda.empty_cache()


def sweep_moe(bw, rows, deadline):
    from oracle_emulation.moe_activations import apply_activation
    from oracle.tensors import moe_activation_params
    from oracle_triton.moe import TritonMoE, moe_gemv_config

    print("\n== MoE: direct path variants vs aligned grouped GEMM vs BF16 grouped (us, graph replay) ==")
    for name, (ne, topk, h, i, fmt, mode_name, act, params, activation) in MOE.items():
        if time.perf_counter() > deadline:
            print("budget spent: stopping the MoE sweep")
            return
        layer = MoELayer(name=name, num_experts=ne, top_k=topk, hidden_size=h, intermediate_size=i,
                         weight_format=fmt, activation=activation)
        w13 = torch.randn(ne, 2 * i, h, device="cuda", dtype=torch.bfloat16) * 0.05
        w2 = torch.randn(ne, h, i, device="cuda", dtype=torch.bfloat16) * 0.05
        q13, q2 = _quant(fmt, w13), _quant(fmt, w2)
        t = TritonMoE(layer, Mode(weight=fmt, activation=act, name=mode_name, params=params), None)
        t.process_weights(w13=q13["weight"], w2=q2["weight"], w13_scale=q13.get("weight_scale"),
                          w2_scale=q2.get("weight_scale"), w13_global_scale=q13.get("weight_global_scale"),
                          w2_global_scale=q2.get("weight_global_scale"))
        del q13, q2
        per_expert = (t.w13.nbytes() + t.w2.nbytes()) / ne
        pr = moe_activation_params(activation, {})
        act_fn = lambda hh: apply_activation(hh, activation, pr)   # noqa: E731
        for m in (1, 4, 16):
            x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
            topw, ids = torch.topk(torch.softmax(torch.randn(m, ne, device="cuda"), -1), topk)
            ids = ids.to(torch.int32)
            touched = int(torch.unique(ids).numel())
            hbm = touched * per_expert / bw * 1e6
            flat = ids.reshape(-1).long()
            order = torch.argsort(flat, stable=True)
            offs = torch.cumsum(torch.bincount(flat, minlength=ne), 0).to(torch.int32)
            tb = graph_ms(lambda: _bf16_moe(x, w13, w2, topw, order, order // topk, offs, act_fn), 20) * 1e3
            flatw = topw.reshape(-1).float().contiguous()
            flati = ids.reshape(-1).contiguous()
            import oracle_triton.moe as moe_mod
            saved = moe_mod.use_direct
            moe_mod.use_direct = lambda *a: False
            ta = graph_ms(lambda: t.apply(x, topw, ids), 20) * 1e3
            aligned = t.apply(x, topw, ids)
            moe_mod.use_direct = saved
            ref = aligned               # the tiled path (checked against emulation by the GPU tests)
            print(f"  {name} M={m}: bf16 {tb:.1f} us, aligned {ta:.1f} us (x{tb / ta:.2f}), hbm {hbm:.1f} us", flush=True)
            base = moe_gemv_config(m, t.w13.layout.elem, t.w13.layout.group, words=t.facts["hw_fp8"] and not t.act)
            best = ("aligned", ta, None)
            for label, cfg in _chosen(variants(base, t.w13.layout.elem)):
                try:
                    err = rel(t.apply_direct(x, flatw, flati, m, topk, cfg), ref)
                    us = graph_ms(lambda: t.apply_direct(x, flatw, flati, m, topk, cfg), 20) * 1e3
                except Exception as exc:  # noqa: BLE001
                    print(f"  {name} M={m} {label}: FAILED {type(exc).__name__}: {str(exc)[:100]}")
                    continue
                ok = err < 1e-2
                rows.append(dict(kind="moe", shape=name, mode=mode_name, m=m, variant=label, config=cfg, us=us,
                                 bf16_us=tb, aligned_us=ta, hbm_us=hbm, err=err))
                if ok and us < best[1]:
                    best = (label, us, cfg)
                print(f"  {name:22} M={m:2d} {label:12} {us:8.1f} us  x{tb / us:5.2f} BF16  {us / hbm:5.2f}x HBM  "
                      f"err {err:.1e}{'' if ok else '  DISAGREES'}", flush=True)
            print(f"BEST {name} M={m}: {best[0]} {best[1]:.1f} us (bf16 {tb:.1f}, hbm {hbm:.1f}) {best[2]}", flush=True)
        del t, w13, w2
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["dense", "moe"])
    ap.add_argument("--json")
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new shapes after this")
    ap.add_argument("--variants", nargs="+", help="only these variant labels (e.g. default decode-f16)")
    args = ap.parse_args(argv)
    global ONLY
    ONLY = set(args.variants) if args.variants else None
    if not start("sweep_gemv"):
        return 2
    deadline = time.perf_counter() + args.budget_s
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s")
    rows: list[dict] = []
    try:
        if args.only != "moe":
            sweep_dense(bw, rows, deadline if args.only == "dense" else time.perf_counter() + args.budget_s / 2)
        if args.only != "dense":
            sweep_moe(bw, rows, deadline)
    finally:
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"copy_bandwidth": bw, "rows": rows}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
