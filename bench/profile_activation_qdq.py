"""Where does an emulated A8/A4 linear spend its time? CUDA-event timing of each step, M=4096, 4096x4096.

Run on a GPU: python3 bench/profile_activation_qdq.py
"""
import torch
from gpu_timing import time_cuda_ms

from oracle_emulation import activations as act
from oracle_emulation import activations_triton as tk


def timed(fn, iters=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters * 1e3  # us


def cpu_us(fn, iters=50):
    """Host time to issue one call (no sync inside): launch overhead of the Python path."""
    import time
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    issued = (time.perf_counter() - t) / iters * 1e6
    torch.cuda.synchronize()
    return issued


def synced_us(fn, iters=30):
    """Per-call time with a sync after each call, as the benchmarks measure."""
    return time_cuda_ms(fn, iters) * 1e3


def main():
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    rows = {
        "bf16 matmul": lambda: torch.nn.functional.linear(x, w),
        "abs_max (vector_norm inf)": lambda: tk.abs_max(x),
        "amax of abs": lambda: x.abs().amax(),
        "aminmax": lambda: torch.aminmax(x),
        "qdq fp8 per-tensor dynamic": lambda: act.quantize_dequantize(x, "fp8", granularity="tensor"),
        "qdq fp8 per-token": lambda: act.quantize_dequantize(x, "fp8", granularity="token"),
        "qdq nvfp4 dynamic global": lambda: act.quantize_dequantize(x, "nvfp4"),
        "qdq mxfp8": lambda: act.quantize_dequantize(x, "mxfp8"),
        "kernel FP8_STATIC alone": lambda: tk.qdq(x, tk.FP8_STATIC, scale=torch.ones(1, device="cuda")),
        "kernel NVFP4 alone": lambda: tk.qdq(x, tk.NVFP4, scale=torch.ones(1, device="cuda")),
    }
    from oracle import KernelConfig, LinearLayer, Platform, select_backend
    from oracle_emulation.formats import codec_for
    wf = torch.randn(4096, 4096, device="cuda") * 0.02
    for fmt, a in (("fp8_tensor", "fp8"), ("fp8_channel", "fp8"), ("nvfp4", "nvfp4"), ("mxfp4", "mxfp8")):
        layer = LinearLayer(in_features=4096, out_features=4096, weight_format=fmt, activation_format=a)
        k = select_backend(layer, Platform.detect(), KernelConfig(linear_backend="emulation")).instantiate(layer)
        q = codec_for(fmt).quantize(wf, fmt)
        k.process_weights(**{n: v for n, v in q.items() if v is not None})
        rows[f"apply {fmt}/{a}"] = lambda k=k: k.apply(x)
    print(f"{'':32s} {'back2back':>10s} {'synced':>9s} {'cpu issue':>10s}")
    for name, fn in rows.items():
        print(f"{name:32s} {timed(fn):9.1f}  {synced_us(fn):8.1f}  {cpu_us(fn):9.1f}")


if __name__ == "__main__":
    main()
