"""Timing shared by the GPU benchmarks: CUDA events around each call, median, clocks warmed first.

Each call is timed on its own (event, call, event, sync), so the figure includes the host's
launch overhead the way one forward pass pays it; the median damps stragglers.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch


def time_cuda_ms(fn, iters: int = 10, warmup: int = 3) -> float:
    """Median milliseconds of `fn()` on the current CUDA device."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def warm_clocks(seconds: float = 2.0) -> None:
    """Keep the GPU busy with BF16 products so the first figure is not taken at idle clocks."""
    spin = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        spin @ spin
    torch.cuda.synchronize()


def warm_calls(calls: list, seconds: float) -> None:
    """Run the calls (in turn) for `seconds` before a timing, so the clocks leave idle on the timed kernels'
    own load: a BF16-GEMM warm-up (warm_clocks) just before left an H200 power-capped at 1485 MHz / 697 W
    for its first timing (R21 of the eighth pass, bench_peers.SETTLE_S)."""
    end, i = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        calls[i % len(calls)]()
        i += 1
        if i % 16 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()


def sm_clock() -> str:
    """The GPU's SM clock and power draw now, "MHz/W" (NVML through torch, else nvidia-smi; "?" if neither
    answers): what the bench logs beside a timing to tell a clock transient from a kernel's own time."""
    try:
        return f"{torch.cuda.clock_rate()}/{torch.cuda.power_draw() / 1000:.0f}"
    except Exception:  # noqa: BLE001 - pynvml missing: ask nvidia-smi
        import subprocess
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                                  f"--id={torch.cuda.current_device()}"], capture_output=True, text=True, timeout=5)
            mhz, watts = (v.strip() for v in out.stdout.strip().split(","))
            return f"{mhz}/{float(watts):.0f}"
        except Exception:  # noqa: BLE001 - a reading is a detail, never a failure
            return "?"


def graph_ms(fn, reps: int) -> float:
    """Milliseconds per call of `fn`, `reps` calls captured in one CUDA graph and replayed."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    ms = time_cuda_ms(g.replay, iters=10, warmup=2) / reps
    del g
    return ms


def copy_bandwidth() -> float:
    """Bytes/s of a 2 GiB device copy (read + write counted once each): the HBM limit's divisor."""
    a = torch.empty(2**30, dtype=torch.uint16, device="cuda")
    b = torch.empty_like(a)
    ms = time_cuda_ms(lambda: b.copy_(a), iters=10)
    return 2 * a.numel() * 2 / (ms * 1e-3)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative Frobenius error of a against the reference b."""
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def start(script: str) -> bool:
    """The GPU benchmarks' prologue: False (with the reason on stderr) without a CUDA device; else
    print the device and torch, and warm the clocks."""
    if not torch.cuda.is_available():
        print(f"{script}: needs a CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return False
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    warm_clocks()
    return True


def table_args(description: str, dense: dict, moe: dict) -> argparse.ArgumentParser:
    """The options every dense+MoE table script takes: --m, --only, --shapes, --json."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--m", type=int, nargs="+", default=[1, 16, 256, 4096])
    ap.add_argument("--only", choices=["dense", "moe"])
    ap.add_argument("--shapes", nargs="+", choices=list(dense) + list(moe), help="only these shapes / models")
    ap.add_argument("--json", help="also write the figures to this file")
    return ap


def keep_shapes(shapes: list[str] | None, *tables: dict) -> None:
    """--shapes: keep only those entries of each table, in the order given."""
    if not shapes:
        return
    for table in tables:
        kept = {k: table[k] for k in shapes if k in table}
        table.clear()
        table.update(kept)
