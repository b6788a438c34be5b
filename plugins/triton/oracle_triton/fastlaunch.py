"""Replaying a call's Triton launches without Triton's per-launch argument binding.

Why: at one activation row a dense layer's GPU time is a few microseconds while its host time is
not. Each `kernel[grid](**args)` binds and specializes every argument (17 tensors and integers
for the GEMV), hashes the specialization and looks the compiled kernel up; the layer's own Python
builds the same argument dict on every call. Issue #26 asks for under 30 us of host time per eager
call at M = 1 on a host where BF16's `x @ w.T` alone takes about 24 us.

How: the first call of a given shape runs the ordinary path while `recording()` collects what each
`launch()` started (the compiled kernel, the grid, the arguments in the kernel's parameter order).
`Plan.build` then keeps every argument fixed except the call's own tensors, which it finds by
device pointer: the activation `x`, the output `y` (allocated again on every call) and the call's registered temporaries (`temp()`: split-K partials, activation codes). Small
temporaries are kept by the plan and reused; larger ones are allocated again on every call. A
later call of the same key allocates its output and starts the same compiled kernels directly.

Safety: a plan is refused (the call keeps the ordinary path) when any tensor argument is none of
those and not one of the layer's own persistent tensors, when anything other than `launch()` put
work on the GPU during the recorded call (`spoil()`), while a CUDA graph is being captured, under
Triton's interpreter, when Triton's launch hooks are set (profilers), or for a Triton version whose
launcher signature was not checked. Reused temporaries share the hazard the layer's split-K
counters already have: two calls of one layer running at once on two streams would race.
"""
from __future__ import annotations

import threading
from typing import Any, Sequence

import torch

#: A temporary up to this many bytes is allocated once and kept by its plan; larger ones per call.
KEEP_TEMP_BYTES = 256 << 10
#: Triton versions whose CompiledKernel.run takes (grid x/y/z, stream, function, packed metadata,
#: launch metadata, enter hook, exit hook, *every parameter in order) (3.6 on the H200, 3.7 here).
CHECKED_TRITON = ("3.4", "3.5", "3.6", "3.7")

#: Triton versions whose CudaLauncher.__call__ only allocates the (here empty) scratch buffers and then
#: calls a C `launch` that a plan can call itself (read from 3.7's source here and 3.6's on the H200,
#: bench/results/h200-2026-12-02/dense6b_r10_triton_launcher.txt): 3.7's one C function takes (grid
#: x/y/z, stream, function, cooperative, pdl, packed metadata, launch metadata, enter hook, exit hook,
#: global scratch, profile scratch, annotations, signature, args); 3.6's per-kernel module's takes (grid
#: x/y/z, stream, function, cooperative, pdl, global scratch, profile scratch, packed metadata, launch
#: metadata, enter hook, exit hook, *args).
DIRECT_TRITON = {"3.7": 37, "3.6": 36}

_local = threading.local()


class Recording:
    """What one call started: launches [(compiled kernel, grid, ordered args)] and its temporaries."""

    def __init__(self) -> None:
        self.launches: list[tuple[Any, tuple[int, int, int], list[Any]]] = []
        self.temps: list[torch.Tensor] = []
        self.spoiled: str | None = None


def recording() -> Recording:
    """Start recording this thread's launches (end with `stop()`)."""
    rec = Recording()
    _local.rec = rec
    return rec


def stop() -> None:
    _local.rec = None


def temp(t: torch.Tensor) -> torch.Tensor:
    """Register a call's temporary with the recording (if any); returns t."""
    rec = getattr(_local, "rec", None)
    if rec is not None:
        rec.temps.append(t)
    return t


def spoil(reason: str) -> None:
    """Mark the recording unusable, a layer's (`recording`) or a whole call's (`record_call`): the call put work on
    the GPU that no plan would repeat."""
    for name in ("rec", "call_rec"):
        rec = getattr(_local, name, None)
        if rec is not None:
            rec.spoiled = reason


def holds_tensor(value: Any) -> bool:
    """Is this launch argument an object around a tensor (a TMA descriptor: its address is in the bytes the
    launcher builds from it), which a plan would pass on as recorded, pointing at the recorded call's memory?"""
    return not isinstance(value, torch.Tensor) and isinstance(getattr(value, "base", None), torch.Tensor)


def launch(fn: Any, grid: tuple[int, int, int], num_warps: int, num_stages: int | None = None,
           pdl: bool = False, maxnreg: int | None = None, **args: Any) -> None:
    """fn[grid](**args) with the given warps (and stages; pdl: launch_pdl, programmatic dependent
    launch, which the compiled kernel keeps, so a plan's replay launches it the same way; maxnreg: the
    registers a thread may hold, a warp-specialized kernel's budget), recorded when a recording is on."""
    opts = {"num_warps": num_warps} if num_stages is None else {"num_warps": num_warps, "num_stages": num_stages}
    if pdl:
        opts["launch_pdl"] = True
    if maxnreg is not None:
        opts["maxnreg"] = maxnreg
    compiled = fn[grid](**args, **opts)
    rec = getattr(_local, "rec", None)
    if rec is None:
        return
    names = getattr(fn, "arg_names", None)
    if compiled is None or names is None or not hasattr(compiled, "packed_metadata"):
        rec.spoiled = "no compiled kernel handle (interpreter or an unchecked Triton)"
        return
    params = getattr(fn, "params", None) or []
    defaults = {p.name: p.default for p in params if hasattr(p, "default")}
    try:
        ordered = [args[name] if name in args else defaults[name] for name in names]
    except KeyError as exc:
        rec.spoiled = f"argument {exc} has no value"
        return
    rec.launches.append((compiled, (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1),
                         ordered))


def supported() -> bool:
    """Is this Triton's launcher signature one this module was checked against, with no launch hooks?"""
    try:
        import triton
    except Exception:  # noqa: BLE001 - no Triton, no plans
        return False
    return triton.__version__.startswith(CHECKED_TRITON) and hooks_idle()


_RUNTIME: list = []     # triton.knobs.runtime, looked up once (an import statement per call costs ~1 us)


def hooks_idle() -> bool:
    """No launch hooks (a profiler such as proton sets them; a plan would skip them): None, or an
    empty HookChain (Triton >= 3.5)."""
    if not _RUNTIME:
        from triton import knobs
        _RUNTIME.append(knobs.runtime)
    rt = _RUNTIME[0]
    enter, leave = rt.launch_enter_hook, rt.launch_exit_hook
    return (enter is None or not getattr(enter, "calls", True)) and (leave is None or not getattr(leave, "calls", True))


_STREAM: list = []     # Triton's (get_current_stream, get_current_device), looked up once


def current_stream() -> Any:
    """The stream Triton's own launch would use: the current stream of the current device."""
    if not _STREAM:
        from triton.runtime import driver
        # the current device as torch.cuda.current_device() returns it, without its lazy-init check
        # (a plan exists only after a launch on the device)
        _STREAM[:] = [driver.active.get_current_stream, getattr(torch._C, "_cuda_getDevice", None)
                      or driver.active.get_current_device]
    return _STREAM[0](_STREAM[1]())


X, Y = 0, 1       # slot kinds: the call's tensors in order x, y, then the temporaries allocated per call


class Plan:
    """A recorded call's launches with the call's own tensors as slots: `plan(x, out_shape)`."""

    def __init__(self, steps: list[tuple[Any, Any, Any, tuple, list, list[tuple[int, int]]]],
                 fresh: list[tuple[tuple, torch.dtype]], kept: list[torch.Tensor], out_dtype: torch.dtype,
                 device: torch.device):
        self.steps, self.fresh, self.out_dtype, self.device = steps, fresh, out_dtype, device
        self.kept = kept            # the reused temporaries live as long as the plan

    @classmethod
    def build(cls, rec: Recording, x: torch.Tensor, y: torch.Tensor,
              persistent: Sequence[torch.Tensor | None]) -> "Plan | None":
        """The plan of a recorded call, or None where replaying it could differ from the call."""
        if rec.spoiled or not rec.launches or not supported():
            return None
        kinds = {x.data_ptr(): X, y.data_ptr(): Y}
        fresh: list[tuple[tuple, torch.dtype]] = []
        kept: dict[int, torch.Tensor] = {}
        for t in rec.temps:
            if t.data_ptr() in kinds:
                continue
            if t.numel() * t.element_size() > KEEP_TEMP_BYTES:
                kinds[t.data_ptr()] = 2 + len(fresh)
                fresh.append((tuple(t.shape), t.dtype))
            else:
                kept[t.data_ptr()] = t
        fixed = {t.data_ptr() for t in persistent if t is not None} | set(kept)
        steps = []
        for compiled, grid, args in rec.launches:
            slots, values = [], list(args)
            for j, v in enumerate(args):
                if holds_tensor(v):
                    return None          # a descriptor of this call's tensor: a replay would read the old one
                if not isinstance(v, torch.Tensor):
                    continue
                ptr = v.data_ptr()
                if ptr in kinds:
                    slots.append((j, kinds[ptr]))
                    values[j] = None
                elif ptr not in fixed:
                    return None          # a tensor this call made that no one registered: never bake it in
            steps.append((_direct(compiled.run), compiled.run, compiled.function,
                          compiled.packed_metadata, grid, values, slots))
        return cls(steps, fresh, list(kept.values()), y.dtype, y.device)

    def __call__(self, x: torch.Tensor, out_shape: tuple) -> torch.Tensor | None:
        """The call's output, or None (nothing launched) while launch hooks are set."""
        if not hooks_idle():
            return None
        # x is on the plan's device (DenseGemm.planned's contract); x.new_empty parses no dtype / device
        # arguments: ~0.4 us less than torch.empty
        y = x.new_empty(out_shape) if x.dtype is self.out_dtype else \
            torch.empty(out_shape, dtype=self.out_dtype, device=self.device)
        tensors = [x, y]
        for shape, dtype in self.fresh:
            tensors.append(torch.empty(shape, dtype=dtype, device=self.device))
        run_steps(self.steps, tensors)
        return y


def run_steps(steps: list, tensors: list[torch.Tensor]) -> None:
    """A plan's launches on the current stream, each slot (argument index, kind) given tensors[kind]."""
    stream = current_stream()
    for direct, run, function, meta, grid, values, slots in steps:
        args = values.copy()
        for j, kind in slots:
            args[j] = tensors[kind]
        if direct is not None:
            kind, c_launch, coop, pdl, annotations, signature = direct
            if kind == 37:
                c_launch(grid[0], grid[1], grid[2], stream, function, coop, pdl, meta, None, None, None, None,
                         None, annotations, signature, args)
            else:
                c_launch(grid[0], grid[1], grid[2], stream, function, coop, pdl, None, None, meta, None, None,
                         None, *args)
        else:
            run(grid[0], grid[1], grid[2], stream, function, meta, None, None, None, *args)


def _direct(run: Any) -> tuple | None:
    """(calling convention, C launch function, cooperative, pdl, argument annotations, kernel signature)
    of a compiled kernel's launcher where a plan may call the C function itself (DIRECT_TRITON, no
    scratch buffers, no tensor descriptors: the launch is the C function itself), else None (the plan
    calls the launcher)."""
    kind = triton_kind()
    try:
        if kind is None or run.global_scratch_size or run.profile_scratch_size:
            return None
        if kind == 37 and run.launch is c_launcher():
            return kind, run.launch, run.launch_cooperative_grid, run.launch_pdl, run.arg_annotations, \
                run.kernel_signature
        if kind == 36 and type(run.launch).__name__ == "builtin_function_or_method":
            return kind, run.launch, run.launch_cooperative_grid, run.launch_pdl, None, None
        return None
    except AttributeError:      # another launcher
        return None


def triton_kind() -> int | None:
    """DIRECT_TRITON's calling convention of the installed Triton, or None."""
    import triton

    return next((kind for version, kind in DIRECT_TRITON.items() if triton.__version__.startswith(version)), None)


def c_launcher() -> Any:
    """Triton 3.7's one C launch function (the active driver's)."""
    from triton.runtime import driver
    return driver.active.utils.launch


# ------------------------------------------------------------------ whole calls (the fused MoE)
# A dense layer registers its temporaries and launches through `launch()`. A call with many launch sites
# (TritonMoE.forward: up to five launches on a dozen paths) is recorded from outside instead: every Triton
# launch of the call (JITFunction.run, wrapped while the call runs) and every torch op it runs (a dispatch
# mode). Allocations are its temporaries; views need no GPU work; any other torch op spoils the recording,
# since a plan would not repeat it.

#: torch ops a recorded call may run: allocations (their results are the call's temporaries) ...
ALLOC_OPS = frozenset({"aten.empty.memory_format", "aten.empty_strided.default", "aten.empty_like.default",
                       "aten.new_empty.default", "aten.new_empty_strided.default"})
#: ... and views (no GPU work, no memory of their own)
VIEW_OPS = frozenset({"aten.view.default", "aten.view.dtype", "aten._reshape_alias.default", "aten.as_strided.default",
                      "aten.slice.Tensor", "aten.select.int", "aten.unsqueeze.default", "aten.squeeze.dim",
                      "aten.squeeze.default", "aten.t.default", "aten.transpose.int", "aten.permute.default",
                      "aten.expand.default", "aten.alias.default", "aten.detach.default", "aten._unsafe_view.default"})

_record_lock = threading.Lock()


def _jit_class() -> Any:
    """The class whose `run` every `kernel[grid](...)` goes through (Triton's JITFunction)."""
    from triton.runtime.jit import JITFunction
    return JITFunction


def _note_launch(rec: Recording, fn: Any, grid: Any, args: tuple, kwargs: dict, compiled: Any) -> None:
    """Add one JITFunction.run to `rec`: its compiled kernel, grid and arguments in parameter order."""
    names = getattr(fn, "arg_names", None)
    if compiled is None or names is None or not hasattr(compiled, "packed_metadata"):
        rec.spoiled = "no compiled kernel handle (interpreter or an unchecked Triton)"
        return
    if callable(grid):
        rec.spoiled = "a grid computed from the arguments"
        return
    defaults = {p.name: p.default for p in getattr(fn, "params", None) or [] if hasattr(p, "default")}
    ordered = list(args)
    for name in names[len(args):]:
        value = kwargs[name] if name in kwargs else defaults.get(name, inspect_empty())
        if value is inspect_empty():
            rec.spoiled = f"argument {name} has no value"
            return
        ordered.append(value)
    grid = tuple(grid)
    rec.launches.append((compiled, (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1),
                         ordered))


def inspect_empty() -> Any:
    import inspect
    return inspect.Parameter.empty


def record_call(raw: Any, inputs: Sequence[torch.Tensor]) -> tuple[Any, Recording]:
    """raw(*inputs) run once while its Triton launches and torch ops are recorded: (its result, the recording).
    Recordings run one at a time (JITFunction.run is wrapped for their duration; other threads' launches
    pass through the wrapper unrecorded)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    rec = Recording()

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = str(func)
            if name in ALLOC_OPS:
                rec.temps.append(out)
            elif name not in VIEW_OPS and rec.spoiled is None:
                rec.spoiled = f"torch op {name}"
            return out

    cls = _jit_class()
    with _record_lock:
        plain = cls.run

        def run(self, *args, grid, warmup, **kwargs):
            compiled = plain(self, *args, grid=grid, warmup=warmup, **kwargs)
            if getattr(_local, "call_rec", None) is rec and not warmup:
                _note_launch(rec, self, grid, args, kwargs, compiled)
            return compiled

        cls.run = run
        _local.call_rec = rec
        try:
            with Watch():
                out = raw(*inputs)
        finally:
            _local.call_rec = None
            cls.run = plain
    return out, rec


class CallPlan:
    """A recorded call's launches with its inputs, output and larger temporaries as slots: `plan(inputs)`."""

    def __init__(self, steps: list, n_inputs: int, fresh: list[tuple[tuple, torch.dtype]], kept: list[Any],
                 out_shape: tuple, out_dtype: torch.dtype, device: torch.device):
        self.steps, self.n_inputs, self.fresh, self.kept = steps, n_inputs, fresh, kept
        self.out_shape, self.out_dtype, self.device = out_shape, out_dtype, device

    @classmethod
    def build(cls, rec: Recording, inputs: Sequence[torch.Tensor], y: Any) -> "CallPlan | None":
        """The plan of a recorded call, or None where a replay could differ from the call: a spoiled or empty
        recording, an output that is not one of the call's allocations, an argument that points inside an
        input, the output or a temporary other than at its start, or inputs that share memory."""
        if rec.spoiled or not rec.launches or not supported() or not isinstance(y, torch.Tensor):
            return None
        kinds = {t.data_ptr(): j for j, t in enumerate(inputs)}
        if len(kinds) != len(inputs) or y.data_ptr() in kinds or \
                not any(t.data_ptr() == y.data_ptr() and t.numel() == y.numel() for t in rec.temps):
            return None
        kinds[y.data_ptr()] = len(inputs)
        spans = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in (*inputs, y, *rec.temps)]
        fresh: list[tuple[tuple, torch.dtype]] = []
        kept: set[int] = set()
        for t in rec.temps:
            ptr = t.data_ptr()
            if ptr in kinds or t.numel() == 0:
                continue
            if t.numel() * t.element_size() > KEEP_TEMP_BYTES:
                kinds[ptr] = len(inputs) + 1 + len(fresh)
                fresh.append((tuple(t.shape), t.dtype))
            else:
                kept.add(ptr)
        steps = []
        for compiled, grid, args in rec.launches:
            slots, values = [], list(args)
            for j, v in enumerate(args):
                if holds_tensor(v):
                    return None          # a descriptor of this call's tensor: a replay would read the old one
                if not isinstance(v, torch.Tensor) or v.numel() == 0:
                    continue
                ptr = v.data_ptr()
                if ptr in kinds:
                    slots.append((j, kinds[ptr]))
                    values[j] = None
                elif ptr not in kept and any(lo <= ptr < hi for lo, hi in spans):
                    return None          # a view into the call's own memory at an offset: never bake it in
            steps.append((_direct(compiled.run), compiled.run, compiled.function,
                          compiled.packed_metadata, grid, values, slots))
        keep = [t for t in rec.temps if t.data_ptr() in kept]       # the reused temporaries live with the plan
        return cls(steps, len(inputs), fresh, keep, tuple(y.shape), y.dtype, y.device)

    def __call__(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor | None:
        """The call's output, or None (nothing launched) while launch hooks are set."""
        if not hooks_idle():
            return None
        y = torch.empty(self.out_shape, dtype=self.out_dtype, device=self.device)
        tensors = [*inputs, y]
        for shape, dtype in self.fresh:
            tensors.append(torch.empty(shape, dtype=dtype, device=self.device))
        run_steps(self.steps, tensors)
        return y


class CallPlans:
    """A kernel's plans of whole calls (`record_call`, `CallPlan`), one per input signature (shapes, strides,
    dtypes, 16-byte alignment): from the `after`-th call of a signature on, `plans(*inputs)` records the call
    once and then replays its launches; None means "use the ordinary path" (not yet, refused, hooks set, too
    many plans).

    Every argument other than the inputs, the output and the call's allocations is taken to outlive the plan
    (the kernel's weights, scales and arrival counters): a call that passes anything else made during the
    call is refused by the recording (the op that made it spoils it). Reused small temporaries share the
    hazard `Plan` states: two calls of one kernel at once on two streams would race."""

    def __init__(self, raw: Any, after: int = 2, max_plans: int = 8):
        self.raw, self.after, self.max_plans = raw, after, max_plans
        self.plans: dict[tuple, CallPlan] = {}
        self.seen: dict[tuple, int] = {}
        #: signature -> why its call could not be planned (benchmarks and tests read it)
        self.refused: dict[tuple, str] = {}

    def reset(self) -> None:
        self.plans.clear()
        self.seen.clear()
        self.refused.clear()

    def __call__(self, *inputs: torch.Tensor) -> Any:
        # Triton specializes pointers on 16-byte alignment: an input off it gets a plan of its own
        key = tuple((t.shape, t.stride(), t.dtype, t.data_ptr() % 16 == 0) for t in inputs)
        plan = self.plans.get(key)
        if plan is not None:
            return plan(inputs)
        if key in self.refused or len(self.plans) >= self.max_plans:
            return None
        count = self.seen[key] = self.seen.get(key, 0) + 1
        if count < self.after or not supported():
            return None
        y, rec = record_call(self.raw, inputs)
        plan = CallPlan.build(rec, inputs, y)
        if plan is None:
            self.refused[key] = rec.spoiled or "an argument the plan could not place"
        else:
            self.plans[key] = plan
        return y
