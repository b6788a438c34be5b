"""Eager kernel calls replayed from a private CUDA graph, so a few-token call costs one graph launch.

Why: at decode sizes a quantized kernel's GPU time is 10-100 us, while launching its pieces from
Python (Triton's argument binding per launch, allocations, small torch ops) costs as much or more;
measured on an H200, one Qwen3-30B MoE layer took 316 us eagerly against 38 us under graph
replay. Engines hide that by capturing the whole model; callers that run eagerly (transformers,
tests, `oracle run`) do not. So a kernel wraps its raw apply in `EagerGraphs`: from the second
eager call with the same input shapes and dtypes on (up to `max_rows` rows, more for a narrow
linear that states its `width`, and `max_graphs` shapes per kernel), the call is captured once into a CUDA graph with static input buffers;
later calls copy their inputs in, replay, and return a copy of the static output (the caller
owns its result; the next replay cannot overwrite it).

Inside `borrowed_outputs()` a replay returns the graph's own output buffer instead of a copy (one
allocation and one copy launch less per call: on the H200's host ~10 us of a ~40 us eager linear
call): for callers that consume every result before the same kernel runs again, as a decode step
does (oracle.hf.decode: each kernel runs once per step, and its output is read within the step).
There, the copy in goes too where it can: a decode step allocates the same tensors in the same order
every step, so a kernel's input usually lies at the same address each time; once the same addresses
(and strides) came back `after` times, a graph is captured that reads the inputs where they lie, and
replayed whenever they lie there again (at most MAX_PLACED per kernel; other calls copy in as above).
It reads memory it does not own only while the caller's input of the same shape, dtype and strides
is there, so it reads exactly that input. R13 (H200, DeepSeek-R1 geometry, eager batch 1) put each
copy in at 11.5 us of cudaMemcpyAsync plus ~3 us of dispatch, about 21 per step for 4 layers.

Never used while the caller is itself capturing a graph (the raw call is captured instead), on
CPU, or when `ORACLE_EAGER_GRAPHS=0`. A capture that fails switches the kernel back to raw calls
for good, with one warning naming the reason. All kernels share one memory pool per device
(graphs replay one at a time on the caller's stream, so their temporaries never overlap): the
pool of the device's first graph, which is kept for the life of the process (a pool is freed, and
its id becomes unusable, when the last graph using it is destroyed; measured on torch 2.11). All
captures, these and oracle.hf.decode's, run on one capture stream per device (`capture_stream`):
cuBLAS keeps a workspace per (handle, stream) from the caching allocator for the life of the
process, so a fresh side stream per capture (torch hands out 32 per device, round-robin) held up
to 32 workspaces, about 2.5 GiB of a 48-layer FP8 model's decode peak on an H200.
Worth it only for kernels whose raw call is several launches or a Triton launch (about 60 us of
host time each on the H200's host); a single aten op costs less than the copy, replay and copy back.
The raw call must not synchronize with the host (the graph could not hold it), which is the
contract of `Kernel.apply` under capture anyway.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import warnings
from typing import Any, Callable

from ..envvars import EAGER_GRAPHS, flag

#: Rows above this are not replayed: their GPU time dwarfs the launch cost.
MAX_ROWS = 64
#: A kernel that states its row width (K + N of a linear) is replayed above MAX_ROWS while rows x width
#: stays within this many elements (32 MB of bf16 input and output, ~10 us of HBM traffic: still far less
#: than the ~50-200 us of host time its launches cost). Why: MLA attention (DeepSeek's kv_b_proj, K=512,
#: N=32768 in transformers 5.23) expands the whole static cache every decode step, 264 rows at batch 1 in
#: bench_decode; R13 measured that raw call at 209 us of host time per layer against BF16's 38.
MAX_ELEMENTS = 1 << 24
#: ... and never above this many rows (prefill chunks: a graph per prompt length is not worth its memory)
MAX_WIDE_ROWS = 1024
#: Shapes per kernel with a graph (each holds its static inputs, output and temporaries).
MAX_GRAPHS = 8
#: Graphs per kernel that read their inputs in place (decode steps; see `borrowed_outputs`)
MAX_PLACED = 4
#: Input addresses per kernel counted towards such a graph (addresses that keep changing stop the counting)
MAX_ADDRESSES = 16
#: device -> its first captured graph, kept alive so that its memory pool stays usable by the others
_anchors: dict[Any, Any] = {}
#: device -> the one side stream every capture on it runs on (see the module docstring)
_streams: dict[Any, Any] = {}
#: PlacedCalls replays kept graphs directly (benchmarks switch it off to measure what it saves)
DIRECT = True
#: set inside `borrowed_outputs()`: replays hand out the graph's output buffer itself
_borrowing: contextvars.ContextVar[bool] = contextvars.ContextVar("oracle_eager_borrowing", default=False)


@contextlib.contextmanager
def borrowed_outputs() -> Any:
    """Within this block, eager graph replays return their static output buffer, not a copy: the
    caller must have read a kernel's result before calling that kernel again (a decode step)."""
    token = _borrowing.set(True)
    try:
        yield
    finally:
        _borrowing.reset(token)


def borrowing() -> bool:
    """Whether the caller is inside `borrowed_outputs()` (an eager decode step)."""
    return _borrowing.get()


def capture_stream(device: Any) -> Any:
    """The side stream all CUDA-graph captures (and their warm-up calls) on `device` share."""
    import torch

    device = torch.device(device)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device not in _streams:
        _streams[device] = torch.cuda.Stream(device)
    return _streams[device]


def enabled(env: Any = None) -> bool:
    """On unless ORACLE_EAGER_GRAPHS is "0" (unset means on)."""
    env = os.environ if env is None else env
    return env.get(EAGER_GRAPHS) is None or flag(env, EAGER_GRAPHS)


class EagerGraphs:
    """Per-kernel cache of captured eager calls: (shapes, dtypes) -> (graph, static inputs, output)."""

    def __init__(self, raw: Callable[..., Any], *, max_rows: int = MAX_ROWS, max_graphs: int = MAX_GRAPHS,
                 after: int = 2, on: bool | None = None, width: int | None = None):
        self.raw = raw
        if width:       # a narrow linear: rows whose whole input + output stays small are replayed too
            max_rows = max(max_rows, min(MAX_WIDE_ROWS, MAX_ELEMENTS // width))
        self.max_rows, self.max_graphs, self.after = max_rows, max_graphs, after
        self.off_reason: str | None = None if (enabled() if on is None else on) else "ORACLE_EAGER_GRAPHS=0"
        self.graphs: dict[tuple, tuple[Any, tuple, Any]] = {}
        self.seen: dict[tuple, int] = {}
        self.placed: dict[tuple, tuple[Any, Any]] = {}     # (shapes, dtypes, addresses) -> (graph, output)
        self.seen_at: dict[tuple, int] = {}
        #: calls served by [an in-place replay, a replay after a copy in, the raw call] (benchmarks read it)
        self.served = [0, 0, 0]
        #: the last call's (in-place graph, its output, its inputs' addresses), None if another path served
        #: it: what a caller's `PlacedCalls` keeps to replay that graph without this kernel's Python
        self.last_placed: tuple[Any, Any, tuple[int, ...]] | None = None
        #: bumped by `reset`: a caller's kept graphs of an older generation are stale
        self.generation = 0

    def reset(self) -> None:
        """Forget every captured call (the kernel's launch parameters changed)."""
        self.generation += 1
        self.last_placed = None
        self.graphs.clear()
        self.seen.clear()
        self.placed.clear()
        self.seen_at.clear()

    def __call__(self, *inputs: Any) -> Any:
        import torch

        first = inputs[0]
        self.last_placed = None
        if self.off_reason is not None or not first.is_cuda or first.shape[0] > self.max_rows or \
                torch.cuda.is_current_stream_capturing():
            self.served[2] += 1
            return self.raw(*inputs)
        key = tuple(t.shape for t in inputs) + tuple(t.dtype for t in inputs)   # the kernel fixes the device
        if _borrowing.get():
            found = self._in_place(key, inputs)
            if found is not None:
                self.served[0] += 1
                return found
        entry = self.graphs.get(key)
        self.served[1 if entry is not None else 2] += 1
        if entry is not None:
            graph, static, out = entry
            if len(inputs) == 1:
                static[0].copy_(first)
            else:
                torch._foreach_copy_(static, inputs)     # one host call for all inputs (the host time is the cost)
            graph.replay()
            return out if _borrowing.get() else out.clone()
        count = self.seen[key] = self.seen.get(key, 0) + 1
        if count < self.after or len(self.graphs) >= self.max_graphs:
            return self.raw(*inputs)
        return self._capture(key, inputs)

    def _in_place(self, key: tuple, inputs: tuple) -> Any:
        """Inside a decode step: the output of a graph that reads these inputs where they lie (no copy in),
        captured once the same addresses came back `after` times; None where there is none (yet)."""
        where = key + tuple((t.data_ptr(), t.stride()) for t in inputs)
        placed = self.placed.get(where)
        if placed is not None:
            placed[0].replay()
            self.last_placed = (placed[0], placed[1], tuple(t.data_ptr() for t in inputs))
            return placed[1]
        if len(self.placed) >= MAX_PLACED or (where not in self.seen_at and len(self.seen_at) >= MAX_ADDRESSES):
            return None
        count = self.seen_at[where] = self.seen_at.get(where, 0) + 1
        if count < self.after:
            return None
        return self._capture(where, inputs, in_place=True)

    def _capture(self, key: tuple, inputs: tuple, in_place: bool = False) -> Any:
        import torch

        device = inputs[0].device
        static = inputs if in_place else tuple(t.clone() for t in inputs)
        anchor = _anchors.get(device)
        pool = anchor.pool() if anchor is not None else None
        graph = torch.cuda.CUDAGraph()
        side = capture_stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        token = _borrowing.set(False)      # what runs inside runs raw: no replay of another graph, no borrowing
        try:
            with torch.cuda.stream(side):
                graph.capture_begin(pool=pool)
                try:
                    out = self.raw(*static)
                finally:
                    graph.capture_end()
        except Exception as exc:  # noqa: BLE001 - a kernel that cannot be captured keeps working eagerly
            self.off_reason = f"{type(exc).__name__}: {str(exc)[:300]}"
            owner = type(getattr(self.raw, "__self__", self.raw)).__name__
            warnings.warn(f"eager calls of {owner} are not replayed from a CUDA graph: the capture failed "
                          f"({self.off_reason})", RuntimeWarning, stacklevel=3)
            torch.cuda.current_stream(device).wait_stream(side)
            _borrowing.reset(token)
            return self.raw(*inputs)
        _borrowing.reset(token)
        torch.cuda.current_stream(device).wait_stream(side)
        _anchors.setdefault(device, graph)
        if in_place:         # the graph reads the caller's tensors: replayed only while inputs lie there
            self.placed[key] = (graph, out)
            graph.replay()
            self.last_placed = (graph, out, tuple(t.data_ptr() for t in inputs))
            return out
        static = list(static)
        self.graphs[key] = (graph, static, out)
        torch._foreach_copy_(static, inputs)
        graph.replay()
        return out.clone()


class PlacedCalls:
    """A caller's shortcut to a kernel's in-place graphs inside a decode step: inputs at the same
    addresses, shapes, strides, dtypes and device as a call that an in-place graph served -> replay that
    graph and hand back the result that call returned (a view of the graph's output buffer), without
    running the kernel's `apply` (its input checks, reshapes and the graph lookup are functions of
    exactly that key, so they would give the same answer).

    Why: R13's host profile (H200, DeepSeek-R1 geometry, eager batch 1) put an in-place replayed FP8
    projection at 47-73 us of host time against 31-44 for BF16's one cuBLAS call; the graph launch is
    ~17 us of it, the rest is Python around it (module -> runner -> apply -> checks -> reshape ->
    graph lookup -> reshape -> slice), paid ~28 times per step.

    Kept only when the kernel reports (`EagerGraphs.last_placed`) that the graph read the caller's own
    tensors (the same addresses: no copy, cast or reshape-copy in between) and the result is a view of
    that graph's output in the caller's dtype. Used only inside `borrowed_outputs()` (each result is
    read before the same kernel runs again); dropped when the kernel's graphs are reset."""

    def __init__(self, kernel: Any, limit: int = MAX_PLACED):
        from torch.autograd.graph import increment_version

        self._bump_version = increment_version
        self.eager = getattr(kernel, "eager", None)
        self.limit = limit
        self.kept: dict[tuple, tuple[Any, Any]] = {}
        self.generation = getattr(self.eager, "generation", 0)
        #: whether the last `replay` served its call (callers may keep views of the result then)
        self.hit = False

    @staticmethod
    def key(inputs: tuple) -> tuple:
        return tuple((t.data_ptr(), t.shape, t.stride(), t.dtype, t.get_device()) for t in inputs)

    def replay(self, key: tuple) -> Any:
        """The kept result for `key` after replaying its graph; None (nothing run) if there is none."""
        self.hit = False
        if not self.kept or not DIRECT or not _borrowing.get():
            return None
        if self.eager.generation != self.generation:       # the kernel's graphs were reset
            self.kept.clear()
            return None
        found = self.kept.get(key)
        if found is None:
            return None
        found[0].replay()
        self.eager.served[0] += 1       # an in-place replay, counted where the kernel counts its own
        self._bump_version(found[1])    # a replay rewrote it: callers that key on `_version` must see that
        self.hit = True
        return found[1]

    def remember(self, key: tuple, inputs: tuple, result: Any) -> None:
        """After a call through the kernel: keep (graph, result) if an in-place graph served exactly `inputs`."""
        last = getattr(self.eager, "last_placed", None)
        if last is None or not _borrowing.get() or len(self.kept) >= self.limit:
            return
        graph, out, addresses = last
        if addresses != tuple(t.data_ptr() for t in inputs) or not all(t.is_contiguous() for t in inputs):
            return
        if not isinstance(result, type(out)) or result.data_ptr() != out.data_ptr() or result.dtype != out.dtype:
            return
        if self.eager.generation != self.generation:
            self.kept.clear()
            self.generation = self.eager.generation
        self.kept[key] = (graph, result)


def served_counts(kernels: Any) -> dict[str, int]:
    """How the eager calls of `kernels` (a model's `oracle.kernels` values; fused parts counted each)
    were served, summed: replayed in place, replayed after a copy in, raw. Empty if none was counted."""
    totals = [0, 0, 0]
    for kernel in kernels:
        for part in getattr(kernel, "parts", [kernel]):
            served = getattr(getattr(part, "eager", None), "served", None)
            if served:
                totals = [a + b for a, b in zip(totals, served)]
    return dict(zip(("in place", "copied in", "raw"), totals)) if any(totals) else {}
