"""Benchmark: oracle-torch's scaled-matmul kernels beside the emulation and a BF16 torch.matmul.

For the dense linear shapes of qwen3-30b-a3b-fp8 and deepseek-r1 (N x K, one rank) and
M = 1, 16, 256, 4096 tokens, every torch FP8 kernel the device serves is timed through the
engine's own path (select_backend -> instantiate -> process_weights -> apply, activation
quantization included), next to the emulation kernel for the same weights and a BF16
torch.matmul(x, w.T) timed right beside it. Ratios are BF16 / torch (speed-up over BF16)
and emulation / torch. The GPU clocks are warmed first.

Target (issue 6): at M = 4096 the FP8 kernels are at least 1.5x faster than BF16 matmul.

    python bench/bench_torch.py                      # needs a CUDA device with a torch kernel
    python bench/bench_torch.py --json out.json      # also write the figures
    python bench/bench_torch.py --m 4096 --shapes deepseek-r1.o_proj
"""
from __future__ import annotations

import argparse
import json
import math
import sys

import torch
from gpu_timing import start, time_cuda_ms

from oracle import KernelConfig, LinearLayer, Platform, select_backend
from oracle_emulation.formats import codec_for

TARGET = 1.5
#: name -> (N, K), from /work/shared/models/*/config.json (see SOURCES.md there).
SHAPES = {
    "qwen3-30b-a3b-fp8.qkv_proj": (5120, 2048),
    "qwen3-30b-a3b-fp8.o_proj": (2048, 4096),
    "deepseek-r1.q_a_proj": (1536, 7168),
    "deepseek-r1.q_b_proj": (24576, 1536),
    "deepseek-r1.kv_a_proj_with_mqa": (576, 7168),
    "deepseek-r1.kv_b_proj": (32768, 512),
    "deepseek-r1.o_proj": (7168, 16384),
    "deepseek-r1.gate_up_proj": (36864, 7168),
    "deepseek-r1.down_proj": (7168, 18432),
}
FORMATS = ["fp8_block", "fp8_tensor", "fp8_channel"]   # the checkpoints' format first
EMULATION = KernelConfig(linear_backend="emulation")


def time_ms(fn, iters: int = 10, warmup: int = 3) -> float:
    return time_cuda_ms(fn, iters, warmup)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, nargs="+", default=[1, 16, 256, 4096])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--formats", nargs="+", default=FORMATS, choices=FORMATS)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    if not start("bench_torch"):
        return 2
    platform = Platform.detect()
    print(f"capability {platform.capability_str}")
    rows = []
    header = f"{'shape':34} {'N x K':>13} {'format':11} {'M':>5} {'torch ms':>9} {'emul ms':>9} {'bf16 ms':>9} " \
             f"{'bf16/torch':>10} {'emul/torch':>10}"
    print(header)
    for name in args.shapes:
        n, k = SHAPES[name]
        w = torch.randn(n, k, device="cuda") * 0.02
        w_bf16 = w.to(torch.bfloat16)
        for fmt in args.formats:
            layer = LinearLayer(name=name, in_features=k, out_features=n, weight_format=fmt,
                                group_size=128 if fmt == "fp8_block" else None)
            d = select_backend(layer, platform)
            if d.backend != "torch":
                reason = next((c.reason for c in d.candidates if c.backend == "torch"), "no torch candidate")
                print(f"{name:34} {n:>6} x {k:<6} {fmt:11} -- not torch ({d.kernel}): {reason}")
                continue
            tensors = {key: v for key, v in codec_for(fmt).quantize(w, fmt).items() if v is not None}
            kernel = d.instantiate(layer)
            kernel.process_weights(**tensors)
            emul = select_backend(layer, platform, EMULATION).instantiate(layer)
            emul.process_weights(**tensors)
            for m in args.m:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                t_bf16 = time_ms(lambda: x @ w_bf16.t())
                t_torch = time_ms(lambda: kernel.apply(x))
                t_emul = time_ms(lambda: emul.apply(x))
                row = dict(shape=name, n=n, k=k, format=fmt, kernel=d.kernel, m=m, torch_ms=t_torch,
                           emulation_ms=t_emul, bf16_ms=t_bf16, bf16_over_torch=t_bf16 / t_torch,
                           emulation_over_torch=t_emul / t_torch)
                rows.append(row)
                print(f"{name:34} {n:>6} x {k:<6} {fmt:11} {m:>5} {t_torch:9.4f} {t_emul:9.4f} {t_bf16:9.4f} "
                      f"{row['bf16_over_torch']:9.2f}x {row['emulation_over_torch']:9.2f}x")
            del kernel, emul, tensors
        del w, w_bf16
        torch.cuda.empty_cache()
    print()
    verdicts = {}
    for fmt in args.formats:
        at = [r for r in rows if r["format"] == fmt and r["m"] == 4096]
        if not at:
            continue
        ratios = [r["bf16_over_torch"] for r in at]
        geo = math.exp(sum(math.log(v) for v in ratios) / len(ratios))
        worst = min(at, key=lambda r: r["bf16_over_torch"])
        ok = worst["bf16_over_torch"] >= TARGET
        verdicts[fmt] = dict(geomean=geo, worst=worst["bf16_over_torch"], worst_shape=worst["shape"], meets=ok)
        print(f"M=4096 {at[0]['kernel']:26} speed-up over BF16: geomean {geo:.2f}x, worst {worst['bf16_over_torch']:.2f}x "
              f"({worst['shape']}); target >= {TARGET}x on every shape: {'MET' if ok else 'NOT MET'}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows,
                       "m4096": verdicts, "target": TARGET}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
