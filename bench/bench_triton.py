"""Benchmark: oracle-triton's dense GEMM and fused MoE beside BF16, the emulation and the HBM limit.

Per shape and M (default 1, 16, 256, 4096): the Triton kernel's time under CUDA-graph replay
(R calls captured in one graph, time per call), the BF16 baseline timed beside it the same
way (dense: x @ w.T; MoE: the same routed tokens through torch._grouped_mm for w13 and w2),
the emulation kernel's time (eager: it reads expert counts back to the host), the HBM limit
(weight bytes touched / measured copy bandwidth), and the bytes per layer packed vs BF16.

Targets (issue 15): MoE at M=1,16 >= 1.5x faster than BF16 and within 1.5x of the HBM limit;
MoE M=4096: FP8 W8A8 >= 1.2x faster than BF16, W4A16 <= 1.3x the BF16 time. Dense M=1:
W4A16 >= 2.5x, W8A16 >= 1.6x faster than BF16 on 8192x8192 and DeepSeek; no shape slower.

    python bench/bench_triton.py [--m 1 16] [--only dense|moe] [--json out.json]
"""
from __future__ import annotations

import json
import sys

import torch
from gpu_timing import copy_bandwidth, graph_ms, keep_shapes, start, table_args, time_cuda_ms

from oracle import LinearLayer, MoELayer
from oracle.catalog import Mode
from oracle_emulation.formats import codec_for

DENSE = {  # name -> (N, K), /work/shared/models/*/config.json
    "square-8192": (8192, 8192),
    "deepseek-r1.gate_up_proj": (36864, 7168),
    "deepseek-r1.down_proj": (7168, 18432),
    "deepseek-r1.o_proj": (7168, 16384),
    "deepseek-r1.kv_a_proj_with_mqa": (576, 7168),
    "qwen3-30b-a3b.qkv_proj": (5120, 2048),
}
DENSE_MODES = [  # weight format, mode name, activation, params
    ("fp8_block", "w8a16_block", "bf16", {}),
    ("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}),
    ("mxfp4", "w4a16_mx", "bf16", {}),
    ("nvfp4", "w4a16_nvfp4", "bf16", {}),
    ("int4", "w4a16_int4", "bf16", {}),
]
MOE = {  # name -> (E, top_k, H, I, format, mode, activation format, params, expert activation)
    "gpt-oss-20b": (32, 4, 2880, 2880, "mxfp4", "w4a16_mx", "bf16", {}, "swigluoai"),
    "qwen3-30b-a3b-fp8": (128, 8, 2048, 768, "fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}, "silu"),
    "deepseek-r1": (256, 8, 7168, 2048, "fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}, "silu"),
    "qwen3-235b-a22b-nvfp4": (128, 8, 4096, 1536, "nvfp4", "w4a4_nvfp4", "nvfp4", {}, "silu"),
}


def dense_reference(name, fmt, n, k, w, mode_name, act, params):
    """oracle-emulation's reference for one weight and the checkpoint tensors it was built from:
    (emulation, tensors, layer, mode); every kernel timed beside it takes the same tensors."""
    from oracle_emulation.linear import EmulationLinear

    layer = LinearLayer(name=name, in_features=k, out_features=n, weight_format=fmt,
                        group_size=128 if fmt == "int4" else None)
    mode = Mode(weight=fmt, activation=act, name=mode_name, params=params)
    tensors = _quant(fmt, w)
    e = EmulationLinear(layer, mode, None)
    e.process_weights(**tensors)
    return e, tensors, layer, mode


def dense_pair(name, fmt, n, k, w, mode_name, act, params):
    """oracle-triton's linear and oracle-emulation's reference for one weight, from the same
    checkpoint tensors: (triton, emulation, tensors, layer, mode)."""
    from oracle_triton.linear import TritonLinear

    e, tensors, layer, mode = dense_reference(name, fmt, n, k, w, mode_name, act, params)
    t = TritonLinear(layer, mode, None)
    t.process_weights(**tensors)
    return t, e, tensors, layer, mode


def _quant(fmt, w, group=128, symmetric=True):
    """Checkpoint tensors from oracle-emulation's quantizer; experts in chunks (bounded temporaries).
    int4: symmetric (zero point 8) unless `symmetric` is False (GPTQ zero points per group)."""
    codec = codec_for(fmt)

    def one(part):
        q = codec.quantize(part, fmt, group_size=group, symmetric=symmetric) if fmt == "int4" else \
            codec.quantize(part, fmt)
        return {k: v for k, v in q.items() if v is not None}
    if w.dim() == 2:
        return one(w)
    parts = [one(w[i:i + 16]) for i in range(0, w.shape[0], 16)]
    return {k: torch.cat([p[k] for p in parts]) if parts[0][k].dim() else parts[0][k] for k in parts[0]}


def _reps(m):
    return 20 if m <= 16 else (5 if m <= 256 else 2)


def bench_dense(ms_list, bw, rows):
    print("\n== dense: time per call (us) under CUDA-graph replay; speed-up = BF16 / Triton ==")
    print(f"{'shape':32} {'mode':14} {'M':>5} {'triton':>8} {'bf16':>8} {'emul':>8} {'hbm':>7} "
          f"{'xBF16':>6} {'xHBM':>6} {'MB':>7} {'MB bf16':>8}")
    for name, (n, k) in DENSE.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
        for fmt, mode_name, act, params in DENSE_MODES:
            t, e = dense_pair(name, fmt, n, k, w, mode_name, act, params)[:2]
            packed = t.packed.nbytes()
            for m in ms_list:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                r = _reps(m)
                tt = graph_ms(lambda: t.apply(x), r) * 1e3
                tb = graph_ms(lambda: x @ w.t(), r) * 1e3
                te = time_cuda_ms(lambda: e.apply(x), iters=5) * 1e3
                hbm = packed / bw * 1e6
                row = dict(kind="dense", shape=name, mode=mode_name, m=m, triton_us=tt, bf16_us=tb, emulation_us=te,
                           hbm_us=hbm, speedup_bf16=tb / tt, over_hbm=tt / hbm, mb=packed / 1e6, mb_bf16=n * k * 2 / 1e6)
                rows.append(row)
                print(f"{name:32} {mode_name:14} {m:5d} {tt:8.1f} {tb:8.1f} {te:8.1f} {hbm:7.1f} "
                      f"{tb / tt:6.2f} {tt / hbm:6.2f} {packed / 1e6:7.1f} {n * k * 2 / 1e6:8.1f}", flush=True)
            del t, e
        del w
        torch.cuda.empty_cache()


def _bf16_moe(x, w13, w2, topw, order, token, offs, act_fn):
    """The BF16 baseline: routed pairs (sorted by expert before capture) through two grouped GEMMs
    (torch._grouped_mm) and the weighted sum; only the routing sort is outside the timed graph."""
    xs = x[token]
    h = torch._grouped_mm(xs, w13.transpose(1, 2), offs=offs)
    a = act_fn(h).to(x.dtype)
    y = torch._grouped_mm(a, w2.transpose(1, 2), offs=offs)
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
    out.index_add_(0, token, y.float() * topw.reshape(-1)[order, None])
    return out.to(x.dtype)


def bench_moe(ms_list, bw, rows):
    from oracle_emulation.moe import EmulationMoE
    from oracle_emulation.moe_activations import apply_activation
    from oracle.tensors import moe_activation_params
    from oracle_triton.moe import TritonMoE

    print("\n== fused MoE: time per call (us) under CUDA-graph replay (emulation eager) ==")
    print(f"{'model':24} {'mode':12} {'M':>5} {'triton':>9} {'bf16':>9} {'emul':>9} {'hbm':>8} "
          f"{'xBF16':>6} {'xHBM':>6} {'GB':>6} {'GB bf16':>7}")
    for name, (ne, topk, h, i, fmt, mode_name, act, params, activation) in MOE.items():
        layer = MoELayer(name=name, num_experts=ne, top_k=topk, hidden_size=h, intermediate_size=i,
                         weight_format=fmt, activation=activation)
        mode = Mode(weight=fmt, activation=act, name=mode_name, params=params)
        w13 = torch.randn(ne, 2 * i, h, device="cuda", dtype=torch.bfloat16) * 0.05
        w2 = torch.randn(ne, h, i, device="cuda", dtype=torch.bfloat16) * 0.05
        q13, q2 = _quant(fmt, w13), _quant(fmt, w2)
        tensors = {"w13": q13["weight"], "w2": q2["weight"], "w13_scale": q13.get("weight_scale"),
                   "w2_scale": q2.get("weight_scale"), "w13_global_scale": q13.get("weight_global_scale"),
                   "w2_global_scale": q2.get("weight_global_scale")}
        del q13, q2
        t = TritonMoE(layer, mode, None)
        t.process_weights(**tensors)
        try:
            em = EmulationMoE(layer, mode, None)
            em.process_weights(**tensors)
        except torch.cuda.OutOfMemoryError:
            em = None      # the dequantized BF16 copy does not fit beside the others
            torch.cuda.empty_cache()
        del tensors
        per_expert = (t.w13.nbytes() + t.w2.nbytes()) / ne
        pr = moe_activation_params(activation, {})
        act_fn = lambda hh: apply_activation(hh, activation, pr)   # noqa: E731
        for m in ms_list:
            x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
            logits = torch.randn(m, ne, device="cuda")
            topw, ids = torch.topk(torch.softmax(logits, -1), topk)
            ids = ids.to(torch.int32)
            touched = int(torch.unique(ids).numel())
            r = _reps(m)
            tt = graph_ms(lambda: t.apply(x, topw, ids), r) * 1e3
            try:
                flat = ids.reshape(-1).long()
                order = torch.argsort(flat, stable=True)
                token = order // topk
                offs = torch.cumsum(torch.bincount(flat, minlength=ne), 0).to(torch.int32)
                tb = graph_ms(lambda: _bf16_moe(x, w13, w2, topw, order, token, offs, act_fn), r) * 1e3
            except Exception as exc:  # noqa: BLE001 - not capturable here: time it eagerly, say so
                try:
                    tb = time_cuda_ms(lambda: _bf16_moe(x, w13, w2, topw, order, token, offs, act_fn), iters=5) * 1e3
                    print(f"  bf16 grouped baseline timed eagerly (capture failed: {type(exc).__name__}: {str(exc)[:90]})")
                except Exception as exc2:  # noqa: BLE001 - a torch without _grouped_mm on this device
                    print(f"  bf16 grouped baseline unavailable: {type(exc2).__name__}: {str(exc2)[:120]}")
                    tb = float("nan")
            te = time_cuda_ms(lambda: em.apply(x, topw, ids), iters=5) * 1e3 if em is not None else float("nan")
            hbm = touched * per_expert / bw * 1e6
            row = dict(kind="moe", shape=name, mode=mode_name, m=m, triton_us=tt, bf16_us=tb, emulation_us=te,
                       hbm_us=hbm, speedup_bf16=tb / tt, over_hbm=tt / hbm, experts_touched=touched,
                       gb=(t.w13.nbytes() + t.w2.nbytes()) / 1e9, gb_bf16=(w13.numel() + w2.numel()) * 2 / 1e9)
            rows.append(row)
            print(f"{name:24} {mode_name:12} {m:5d} {tt:9.1f} {tb:9.1f} {te:9.1f} {hbm:8.1f} {tb / tt:6.2f} "
                  f"{tt / hbm:6.2f} {row['gb']:6.2f} {row['gb_bf16']:7.2f}", flush=True)
        del t, em, w13, w2
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    args = table_args(__doc__.splitlines()[0], DENSE, MOE).parse_args(argv)
    if not start("bench_triton"):
        return 2
    bw = copy_bandwidth()
    print(f"measured copy bandwidth: {bw / 1e12:.2f} TB/s (the HBM limit below is weight bytes / this)")
    rows: list[dict] = []
    keep_shapes(args.shapes, DENSE, MOE)
    if args.only != "moe":
        bench_dense(args.m, bw, rows)
    if args.only != "dense":
        bench_moe(args.m, bw, rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy_bandwidth": bw, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
