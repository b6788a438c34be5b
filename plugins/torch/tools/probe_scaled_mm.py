"""One-shot probe of what this torch build's scaled matmul accepts on this device.

Prints one line per (recipe, layout) tried: accepted or the library's error, and for
accepted ones the max relative error against a float32 reference computed from the same
quantized operands. Run on the device whose facts kernels.yaml states (needs only torch).
"""
from __future__ import annotations

import json
import sys
import time

import torch

F8 = torch.float8_e4m3fn
results: dict[str, str] = {}


def note(key: str, value: str) -> None:
    results[key] = value
    print(f"{key}: {value}", flush=True)


def try_call(key, fn, ref=None):
    try:
        out = fn()
        torch.cuda.synchronize()
        if ref is not None:
            err = ((out.float() - ref).norm() / ref.norm()).item()
            note(key, f"OK dtype={out.dtype} relerr={err:.3e}")
        else:
            note(key, f"OK dtype={out.dtype}")
        return out
    except Exception as exc:  # noqa: BLE001 - the probe reports every failure
        note(key, f"FAIL {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
        return None


def main() -> None:
    dev = torch.device("cuda")
    note("torch", f"{torch.__version__} cuda={torch.version.cuda} cap={torch.cuda.get_device_capability()} "
                  f"name={torch.cuda.get_device_name()}")
    x = torch.tensor([447.0, 448.0, 449.0, 464.0, 465.0, 480.0, 500.0, 1e6, -1e6, float("inf")], device=dev)
    note("cast_saturation", str(x.to(F8).float().tolist()))
    note("has_F.scaled_mm", str(hasattr(torch.nn.functional, "scaled_mm")))
    if hasattr(torch.nn.functional, "ScalingType"):
        note("ScalingType", str([n for n in dir(torch.nn.functional.ScalingType) if not n.startswith("_")]))
    torch.manual_seed(0)
    for (m, n, k) in [(16, 256, 512), (1, 256, 512), (3, 272, 400)]:
        a32 = torch.randn(m, k, device=dev)
        w32 = torch.randn(n, k, device=dev)
        a8, w8 = a32.clamp(-448, 448).to(F8), w32.clamp(-448, 448).to(F8)
        ref = a8.float() @ w8.float().t()
        one = torch.ones((), device=dev)
        tag = f"m{m}n{n}k{k}"
        for od in (torch.bfloat16, torch.float16, torch.float32):
            try_call(f"{tag}.tensor.out={od}", lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=od), ref)
        try_call(f"{tag}.tensor.b_rowmajor", lambda: torch._scaled_mm(a8, w8.t().contiguous(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16), ref)
        sa = torch.rand(m, 1, device=dev) + 0.5
        sb = torch.rand(1, n, device=dev) + 0.5
        rref = ref * sa * sb
        for od in (torch.bfloat16, torch.float16, torch.float32):
            try_call(f"{tag}.rowwise.out={od}", lambda: torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sb, out_dtype=od), rref)
        try_call(f"{tag}.rowwise.bias", lambda: torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sb, bias=torch.ones(n, device=dev, dtype=torch.bfloat16), out_dtype=torch.bfloat16), rref + 1)
        # blockwise: activation 1x128 [M, K/128], weight 128x128 [K/128, N/128] (of the [K, N] operand)
        kb, nb = -(-k // 128), -(-n // 128)
        sab = torch.rand(m, kb, device=dev) + 0.5
        swb = torch.rand(nb, kb, device=dev) + 0.5     # checkpoint layout [N/128, K/128]
        sa_full = sab.repeat_interleave(128, 1)[:, :k]
        sw_full = swb.repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
        bref = (a8.float() * sa_full) @ (w8.float() * sw_full).t()
        l4 = -(-kb // 4) * 4
        pad = torch.zeros(nb, l4, device=dev)
        pad[:, :kb] = swb
        a_layouts = {"rowmajor": sab.contiguous(), "mmajor": sab.t().contiguous().t()}
        b_layouts = {"t_of_rowmajor": swb.t(), "contig": swb.t().contiguous(), "t_of_l4pad": pad[:, :kb].t(),
                     "l4pad_full": pad.t()}
        for an, av in a_layouts.items():
            for bn, bv in b_layouts.items():
                try_call(f"{tag}.block_v1.a={an}.b={bn}", lambda: torch._scaled_mm(a8, w8.t(), scale_a=av, scale_b=bv, out_dtype=torch.bfloat16), bref)
        if hasattr(torch.nn.functional, "scaled_mm"):
            F = torch.nn.functional
            ST = F.ScalingType
            for an, av in a_layouts.items():
                for bn, bv in b_layouts.items():
                    try_call(f"{tag}.block_v2.a={an}.b={bn}", lambda: F.scaled_mm(a8, w8.t(), av, ST.BlockWise1x128, bv, ST.BlockWise128x128, output_dtype=torch.bfloat16), bref)
            try_call(f"{tag}.rowwise_v2", lambda: F.scaled_mm(a8, w8.t(), sa, ST.RowWise, sb, ST.RowWise, output_dtype=torch.bfloat16), rref)
            try_call(f"{tag}.tensor_v2", lambda: F.scaled_mm(a8, w8.t(), one, ST.TensorWise, one, ST.TensorWise, output_dtype=torch.bfloat16), ref)
    # MX / NVFP4 on this device (expected to fail on SM90)
    a8 = torch.randn(128, 256, device=dev).to(F8)
    w8 = torch.randn(128, 256, device=dev).to(F8)
    e8 = torch.full((128 * 8,), 127, dtype=torch.uint8, device=dev).view(torch.float8_e8m0fnu)
    try_call("mxfp8_v1", lambda: torch._scaled_mm(a8, w8.t(), scale_a=e8, scale_b=e8, out_dtype=torch.bfloat16))
    # timings: one large shape, each recipe vs bf16
    def bench(fn, iters=20):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / iters * 1e3
    big = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    bench(lambda: big @ big, 30)  # clocks up
    for (m, n, k) in [(4096, 7168, 18432), (4096, 5120, 2048), (16, 7168, 18432)]:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        a8, w8 = a.to(F8), w.to(F8)
        one = torch.ones((), device=dev)
        sa, sb = torch.ones(m, 1, device=dev), torch.ones(1, n, device=dev)
        kb, nb = k // 128, n // 128
        sab = torch.ones(m, kb, device=dev).t().contiguous().t()
        swb = torch.ones(nb, kb, device=dev).t()
        t_bf = bench(lambda: a @ w.t())
        line = {"bf16": t_bf}
        for name, fn in [("tensor", lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)),
                         ("tensor_fast", lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True)),
                         ("rowwise", lambda: torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)),
                         ("block", lambda: torch._scaled_mm(a8, w8.t(), scale_a=sab, scale_b=swb, out_dtype=torch.bfloat16))]:
            try:
                line[name] = bench(fn)
            except Exception as exc:  # noqa: BLE001
                line[name] = f"FAIL {str(exc).splitlines()[0][:120]}"
        note(f"time_ms m{m}n{n}k{k}", json.dumps({k2: (round(v, 4) if isinstance(v, float) else v) for k2, v in line.items()}))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
