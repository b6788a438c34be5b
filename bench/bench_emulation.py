"""Benchmark: emulation kernels against a plain BF16 torch.matmul of the same shape.

For each square linear (default 4096x4096 and 8192x8192) and token count M (default 1,
16, 256, 4096), every emulation linear mode (weight format x activation format) is
timed through the engine's own path (select_backend -> instantiate -> process_weights
-> apply) and reported as a ratio to torch.matmul(x_bf16, w_bf16.T). Then a
gpt-oss-20b-sized MoE (hidden 2880, intermediate 2880, 32 experts, top-4, MXFP4,
swigluoai) is timed per M for its W4A8 and W4A16 modes, with the time of the same
expert GEMMs as two BF16 matmuls over all routed tokens for scale.

Target (issue 3): at M = 4096 every format within 1.5x of the BF16 matmul on an H200.

    python bench/bench_emulation.py                  # CUDA, full sizes
    python bench/bench_emulation.py --quick          # small sizes (CPU smoke run)
    python bench/bench_emulation.py --json out.json  # also write the figures
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from gpu_timing import time_cuda_ms, warm_clocks

from oracle import KernelConfig, LinearLayer, MoELayer, Platform, select_backend
from oracle_emulation.formats import codec_for

LINEAR_MODES = [
    ("fp8_tensor", "fp8"), ("fp8_tensor", "bf16"), ("fp8_channel", "fp8"), ("fp8_block", "fp8"),
    ("mxfp8", "mxfp8"), ("nvfp4", "nvfp4"), ("nvfp4", "mxfp8"), ("nvfp4", "bf16"),
    ("mxfp4", "mxfp4"), ("mxfp4", "mxfp8"), ("mxfp4", "bf16"), ("int4", "bf16"),
    ("q8_0", "bf16"), ("iq2_xs", "bf16"), ("iq2_xxs", "bf16"),
]
TARGET = 1.5


def timer(device: torch.device, iters: int, warmup: int):
    def run(fn) -> float:
        if device.type == "cuda":
            return time_cuda_ms(fn, iters, warmup)
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(iters):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        return statistics.median(times)
    return run


def quantized(w: torch.Tensor, fmt: str) -> dict:
    kw = {"group_size": 128} if fmt == "int4" else {}
    q = codec_for(fmt).quantize(w, fmt, **kw)
    return {k: v for k, v in q.items() if v is not None}


def bench_linear(sizes, ms, device, run, results, platform):
    for size in sizes:
        w = torch.randn(size, size, device=device) * 0.02
        wb = w.bfloat16()
        xs = {m: torch.randn(m, size, device=device, dtype=torch.bfloat16) for m in ms}
        base = {m: run(lambda m=m: torch.matmul(xs[m], wb.t())) for m in ms}
        for m in ms:
            results.append({"kind": "linear", "N": size, "K": size, "M": m, "mode": "bf16_matmul",
                            "weight": "bf16", "activation": "bf16", "ms": base[m], "ratio": 1.0})
        for fmt, act in LINEAR_MODES:
            layer = LinearLayer(in_features=size, out_features=size, weight_format=fmt, activation_format=act)
            decision = select_backend(layer, platform, KernelConfig(linear_backend="emulation"))
            kernel = decision.instantiate(layer)
            t0 = time.perf_counter()
            kernel.process_weights(**quantized(w, fmt))
            prep = time.perf_counter() - t0
            for m in ms:
                # the baseline is timed again right beside each mode, so clock ramps and
                # thermal drift move both numbers together and cancel in the ratio
                ref = run(lambda m=m: torch.matmul(xs[m], wb.t()))
                ms_ = run(lambda m=m: kernel.apply(xs[m]))
                results.append({"kind": "linear", "N": size, "K": size, "M": m, "mode": decision.mode,
                                "weight": fmt, "activation": act, "ms": ms_, "ratio": ms_ / ref,
                                "bf16_ms": ref, "process_weights_s": prep})
                print(f"linear {size}x{size} M={m:5d} {decision.mode:18s} {ms_:9.4f} ms  "
                      f"x{ms_ / ref:6.2f} of bf16 ({ref:.4f} ms)", flush=True)
            del kernel
        del w, wb


def bench_moe(ms, device, run, results, platform, hidden, inter, experts, top_k):
    g = torch.Generator(device="cpu").manual_seed(0)
    w13 = (torch.randn(experts, 2 * inter, hidden, generator=g) * 0.02).to(device)
    w2 = (torch.randn(experts, hidden, inter, generator=g) * 0.02).to(device)
    q13, q2 = quantized(w13, "mxfp4"), quantized(w2, "mxfp4")
    tensors = {"w13": q13["weight"], "w2": q2["weight"], "w13_scale": q13["weight_scale"],
               "w2_scale": q2["weight_scale"],
               "w13_bias": torch.zeros(experts, 2 * inter, device=device),
               "w2_bias": torch.zeros(experts, hidden, device=device)}
    del w13, w2
    w13b = torch.randn(2 * inter, hidden, device=device, dtype=torch.bfloat16)
    w2b = torch.randn(hidden, inter, device=device, dtype=torch.bfloat16)
    for act in ("mxfp8", "bf16"):
        layer = MoELayer(num_experts=experts, top_k=top_k, hidden_size=hidden, intermediate_size=inter,
                         weight_format="mxfp4", activation_format=act, activation="swigluoai", has_bias=True)
        decision = select_backend(layer, platform, KernelConfig(moe_backend="emulation"))
        kernel = decision.instantiate(layer)
        kernel.process_weights(**tensors)
        for m in ms:
            x = torch.randn(m, hidden, device=device, dtype=torch.bfloat16)
            logits = torch.randn(m, experts, device=device)
            weights, ids = torch.topk(torch.softmax(logits, -1), top_k, dim=-1)
            ms_ = run(lambda: kernel.apply(x, weights, ids))
            xt = torch.randn(m * top_k, hidden, device=device, dtype=torch.bfloat16)
            at = torch.randn(m * top_k, inter, device=device, dtype=torch.bfloat16)
            dense = run(lambda: (torch.matmul(xt, w13b.t()), torch.matmul(at, w2b.t())))
            results.append({"kind": "moe", "M": m, "mode": decision.mode, "weight": "mxfp4", "activation": act,
                            "hidden": hidden, "intermediate": inter, "experts": experts, "top_k": top_k,
                            "ms": ms_, "dense_bf16_gemm_ms": dense, "ratio": ms_ / dense})
            print(f"moe E{experts} top{top_k} H{hidden} I{inter} M={m:5d} {decision.mode:10s} {ms_:9.3f} ms  "
                  f"(same GEMMs as 2 BF16 matmuls: {dense:.3f} ms, x{ms_ / dense:.2f})", flush=True)
        del kernel


def summary(results, target_m):
    rows = [r for r in results if r["kind"] == "linear" and r["M"] == target_m and r["mode"] != "bf16_matmul"]
    worst: dict[str, dict] = {}
    for r in rows:
        key = f"{r['weight']}"
        if key not in worst or r["ratio"] > worst[key]["ratio"]:
            worst[key] = r
    print(f"\nworst ratio per weight format at M = {target_m} (target <= {TARGET}x):")
    ok = True
    for fmt, r in worst.items():
        flag = "ok" if r["ratio"] <= TARGET else "OVER"
        ok &= r["ratio"] <= TARGET
        print(f"  {fmt:12s} x{r['ratio']:5.2f}  ({r['mode']}, {r['N']}x{r['K']})  {flag}")
    return ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--sizes", default="4096,8192")
    p.add_argument("--m", default="1,16,256,4096")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="small shapes, for a CPU smoke run")
    p.add_argument("--no-moe", action="store_true")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    device = torch.device(a.device)
    if a.quick:
        sizes, ms, iters, warmup = [256], [1, 16], 3, 1
        moe = dict(hidden=256, inter=256, experts=4, top_k=2)
    else:
        sizes, ms, iters, warmup = [int(s) for s in a.sizes.split(",")], [int(m) for m in a.m.split(",")], a.iters, a.warmup
        moe = dict(hidden=2880, inter=2880, experts=32, top_k=4)
    platform = Platform.cpu()
    if device.type == "cuda":
        try:
            platform = Platform.detect()
        except Exception as exc:   # selection only needs torch; report and go on
            print(f"platform detection failed ({type(exc).__name__}: {exc}); selecting as on a CPU")
    print(f"device: {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}; "
          f"torch {torch.__version__}; platform: {platform.describe()}", flush=True)
    run = timer(device, iters, warmup)
    if device.type == "cuda":  # bring the clocks up before the first figure is taken
        warm_clocks()
    results: list[dict] = []
    torch.manual_seed(0)
    bench_linear(sizes, ms, device, run, results, platform)
    if not a.no_moe:
        bench_moe(ms, device, run, results, platform, **moe)
    ok = summary(results, max(ms))
    from oracle_emulation import activations
    print(f"activation rounding backend: {activations._backend()}; "
          f"Triton kernels that failed and ran eagerly: {sorted(activations._TRITON_FAILED) or 'none'}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"device": str(device), "results": results, "target": TARGET, "met": ok}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
