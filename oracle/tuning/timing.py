"""Timing one callable: CUDA-graph replay when capture works, eager otherwise; CPU eagerly.

CUDA: warm-up calls, then capture one call in a graph and time each replay between
CUDA events (how engines run decode). A kernel that cannot be captured (it synchronizes
with the host -- found first with torch's sync debug mode -- or capture fails) is timed
by eager calls, and the result says so.
The median of the repeats is the figure; min, max and the interquartile range the spread.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    repeats: int
    method: str  # graph | eager


def summarize(samples: list[float], method: str) -> Timing:
    ordered = sorted(samples)
    if len(ordered) >= 4:
        q = statistics.quantiles(ordered, n=4)
        iqr = q[2] - q[0]
    else:
        iqr = ordered[-1] - ordered[0]
    return Timing(statistics.median(ordered), ordered[0], ordered[-1], max(iqr, 0.0), len(ordered), method)


def repeats_for(first_ms: float, repeats: int, budget_ms: float = 400.0) -> int:
    """Fewer repeats for slow calls: about `budget_ms` of timing per figure, at least 3."""
    if first_ms <= 0:
        return repeats
    return max(3, min(repeats, int(budget_ms / first_ms)))


def time_cpu(fn: Callable[[], Any], repeats: int) -> Timing:
    start = time.perf_counter()
    fn()  # warm-up, and the estimate that sizes the repeats
    first = (time.perf_counter() - start) * 1e3
    samples = []
    for _ in range(repeats_for(first, repeats)):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return summarize(samples, "eager")


def time_cuda(fn: Callable[[], Any], repeats: int, *, graphs: bool = True, warmup: int = 3,
              capture_safe: bool = False) -> Timing:
    """`capture_safe`: the kernel skips its host synchronization under capture (oracle.kernel.Kernel),
    so an eager call that synchronizes does not rule capture out."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up on a side stream, as torch recommends before capture
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    run: Callable[[], Any] = fn
    method = "eager"
    if graphs and (capture_safe or not _synchronizes(fn)):
        graph = _capture(fn)
        if graph is not None:
            run, method = graph.replay, "graph"
    first = _event_ms(run)
    samples = [_event_ms(run) for _ in range(repeats_for(first, repeats))]
    return summarize(samples, method)


def _synchronizes(fn: Callable[[], Any]) -> bool:
    """Does `fn` synchronize with the host (.item(), .tolist(), nonzero)? Such a call cannot be captured,
    and a capture that fails half-way can leave torch's CUDA generator unusable: do not try."""
    import torch

    import warnings

    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():  # torch warns that the mode is a prototype on every switch
        warnings.simplefilter("ignore")
        torch.cuda.set_sync_debug_mode("error")
        try:
            fn()
            return False
        except Exception:
            return True
        finally:
            torch.cuda.set_sync_debug_mode(previous)
            torch.cuda.synchronize()


def _capture(fn: Callable[[], Any]) -> Any:
    import torch

    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
        graph.replay()
        torch.cuda.synchronize()
        return graph
    except Exception:
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        return None


def _event_ms(run: Callable[[], Any]) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)
