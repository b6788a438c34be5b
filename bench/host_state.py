"""Why one process's eager host time differs from another's: the process-wide state that can slow
every torch call, and a fixed micro-benchmark of the host cost of small CUDA ops, taken at the same
stages in each engine's process (bench_decode.py --host-probe).

Why: in R17 (seventh pass) transformers' own RMSNorm cost ~25% more host time per call in the
oracle process than in the BF16 process (103-115 against 80-96 us), the same module code. A
per-call slowdown of every op points to something process-wide: a torch-function or dispatch mode
left on, thread-local dispatch keys, grad mode, a trace or profile hook, garbage collection over
many more objects, threads competing for the GIL or the cores. `snapshot` lists each of those;
`op_cost` times the same op sequence (an RMSNorm's ops on one [1, 1, hidden] BF16 row, and a
bare in-place add) in the process as it is, so stages and processes can be compared directly; on
CUDA also a one-kernel graph's replay, and that replay followed by the RMSNorm's ops (an eager oracle
step interleaves graph replays with transformers' own launches; BF16's step has no replays): what
the mix costs beyond its parts.

`GcClock` adds up the time the garbage collector takes (gc.callbacks), per run.
"""
from __future__ import annotations

import gc
import os
import sys
import threading
import time
from typing import Any


def snapshot() -> dict[str, Any]:
    """The process-wide state that changes the cost of every torch call."""
    import torch

    state: dict[str, Any] = {
        "threads": sorted(t.name for t in threading.enumerate()),
        "os_threads": len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None,
        "grad": torch.is_grad_enabled(),
        "inference_mode": torch.is_inference_mode_enabled(),
        "torch_function_modes": torch._C._len_torch_function_stack(),
        "trace": repr(sys.gettrace()), "profile": repr(sys.getprofile()),
        "gc_objects": len(gc.get_objects()), "gc_counts": gc.get_count(), "gc_threshold": gc.get_threshold(),
        "gc_frozen": gc.get_freeze_count(), "torch_threads": torch.get_num_threads(),
        "switchinterval": sys.getswitchinterval(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "anomaly": torch.is_anomaly_enabled(),
        "modules": len(sys.modules),
    }
    try:
        state["dispatch_include"] = str(torch._C._dispatch_tls_local_include_set())
        state["dispatch_exclude"] = str(torch._C._dispatch_tls_local_exclude_set())
    except AttributeError:                          # private API: absent in some builds
        pass
    try:
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
        state["dispatch_modes"] = len(_get_current_dispatch_mode_stack())
    except ImportError:
        pass
    if "torch._dynamo" in sys.modules:
        from torch._dynamo import eval_frame
        state["dynamo_callback"] = repr(getattr(eval_frame, "_get_callback", lambda: "?")()) \
            if hasattr(eval_frame, "_get_callback") else "n/a"
    return state


def op_cost(hidden: int = 7168, calls: int = 400, device: str = "cuda") -> dict[str, float]:
    """Host us per call of an RMSNorm's ops on a [1, 1, hidden] BF16 row (transformers' formula:
    to fp32, pow, mean, rsqrt, mul, to bf16, mul by the weight) and of a bare in-place add,
    `calls` back to back without synchronisation (the median of 5 batches)."""
    import torch

    x = torch.randn(1, 1, hidden, device=device, dtype=torch.bfloat16)
    w = torch.ones(hidden, device=device, dtype=torch.bfloat16)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def rms(h: torch.Tensor) -> torch.Tensor:
        f = h.to(torch.float32)
        var = f.pow(2).mean(-1, keepdim=True)
        return w * (f * torch.rsqrt(var + 1e-6)).to(torch.bfloat16)

    def add() -> None:
        x.add_(0)

    fns: list[tuple[str, Any]] = [("rmsnorm_us", lambda: rms(x)), ("add_us", add)]
    if device.startswith("cuda"):      # the same ops right after a graph replay, as an eager oracle step runs them
        graph, y = torch.cuda.CUDAGraph(), torch.zeros_like(x)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y.add_(1)
        torch.cuda.current_stream().wait_stream(side)
        with torch.no_grad(), torch.cuda.graph(graph, stream=side):
            y.add_(1)
        fns += [("replay_us", graph.replay), ("replay_rmsnorm_us", lambda: (graph.replay(), rms(x)))]
    out: dict[str, float] = {}
    with torch.no_grad():
        for name, fn in fns:
            fn()
            per = []
            for _ in range(5):
                sync()
                t = time.perf_counter()
                for _ in range(calls):
                    fn()
                per.append(1e6 * (time.perf_counter() - t) / calls)
            sync()
            out[name] = sorted(per)[2]
    return out


def probe(stage: str, device: str = "cuda") -> dict[str, Any]:
    """`op_cost` and `snapshot` at a named stage of a process (one line printed)."""
    try:
        cost = op_cost(device=device)
        state = snapshot()
    except Exception as exc:  # noqa: BLE001 - a diagnostic must never cost the run its figures
        print(f"host probe [{stage}] failed: {type(exc).__name__}: {exc}", flush=True)
        return {"stage": stage, "error": f"{type(exc).__name__}: {exc}"}
    graphs = (f", a graph replay {cost['replay_us']:.1f}, replay then rmsnorm {cost['replay_rmsnorm_us']:.1f} "
              f"(+{cost['replay_rmsnorm_us'] - cost['replay_us'] - cost['rmsnorm_us']:.1f} from mixing them)"
              if "replay_us" in cost else "")
    print(f"host probe [{stage}]: rmsnorm {cost['rmsnorm_us']:.1f} us, add {cost['add_us']:.1f} us{graphs} per call; "
          f"threads {state['os_threads']} ({', '.join(state['threads'])}); torch-function modes "
          f"{state['torch_function_modes']}, dispatch modes {state.get('dispatch_modes')}, grad {state['grad']}, "
          f"gc objects {state['gc_objects']}, trace {state['trace']}, profile {state['profile']}, "
          f"TLS include {state.get('dispatch_include')}, exclude {state.get('dispatch_exclude')}", flush=True)
    return {"stage": stage, **cost, "state": state}


class GcClock:
    """Seconds the garbage collector ran, and collections per generation, since `start()`."""

    def __init__(self) -> None:
        self.seconds, self.collections, self._t = 0.0, [0, 0, 0], 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t
            self.collections[info["generation"]] += 1

    def start(self) -> None:
        self.seconds, self.collections = 0.0, [0, 0, 0]

    def read(self) -> dict[str, Any]:
        return {"gc_ms": 1e3 * self.seconds, "gc_collections": list(self.collections)}
