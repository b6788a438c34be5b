"""fastlaunch's record-and-replay logic on CPU, with stand-ins for Triton's JIT function and compiled
kernel (the real launcher needs a GPU: test_triton_gpu.py checks planned calls bit for bit there)."""
from __future__ import annotations

import pytest
import torch

from oracle_triton import fastlaunch


class FakeCompiled:
    """What fastlaunch reads of a CompiledKernel: run (the launcher), function, packed_metadata."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.function, self.packed_metadata = object(), object()

    def run(self, gx, gy, gz, stream, function, meta, launch_meta, enter, leave, *args):
        assert function is self.function and meta is self.packed_metadata
        assert launch_meta is None and enter is None and leave is None
        self.calls.append(((gx, gy, gz), stream, args))


class Param:
    def __init__(self, name, default):
        self.name, self.default = name, default


class FakeJit:
    """kernel[grid](**args) returns the compiled kernel, like triton's JITFunction.run."""

    arg_names = ["x_ptr", "w_ptr", "y_ptr", "part_ptr", "M", "BLOCK"]
    params = [Param(n, None) for n in arg_names[:-1]] + [Param("BLOCK", 64)]

    def __init__(self):
        self.compiled = FakeCompiled()
        self.launched: list[dict] = []

    def __getitem__(self, grid):
        def start(**args):
            self.launched.append(args)
            return self.compiled
        return start


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch):
    monkeypatch.setattr(fastlaunch, "current_stream", lambda: "stream")
    monkeypatch.setattr(fastlaunch, "hooks_idle", lambda: True)
    monkeypatch.setattr(fastlaunch, "supported", lambda: True)


def _record(fn, x, w, big_part=False):
    rec = fastlaunch.recording()
    try:
        y = torch.empty(1, 4)
        shape = (1 << 18, 1) if big_part else (2, 1, 4)
        part = fastlaunch.temp(torch.zeros(shape))
        fastlaunch.launch(fn, (3, 1), 4, 2, x_ptr=x, w_ptr=w, y_ptr=y, part_ptr=part, M=1)
    finally:
        fastlaunch.stop()
    return rec, y, part


def test_replay_puts_the_call_tensors_in_their_slots_and_keeps_the_rest():
    fn, x, w = FakeJit(), torch.ones(1, 8), torch.ones(4, 8)
    rec, y, part = _record(fn, x, w)
    plan = fastlaunch.Plan.build(rec, x, y, [w])
    assert plan is not None
    x2 = torch.full((1, 8), 2.0)
    out = plan(x2, (1, 1, 4))
    assert out.shape == (1, 1, 4) and out.dtype == y.dtype
    grid, stream, args = fn.compiled.calls[-1]
    assert grid == (3, 1, 1) and stream == "stream"
    assert args[0] is x2 and args[1] is w and args[2] is out and args[4] == 1 and args[5] == 64
    assert args[3] is part                       # a small temporary is kept and reused
    out2 = plan(x2, (1, 4))
    assert fn.compiled.calls[-1][2][2] is out2 and out2 is not out   # a fresh output every call


def test_a_large_temporary_is_allocated_per_call():
    fn, x, w = FakeJit(), torch.ones(1, 8), torch.ones(4, 8)
    rec, y, part = _record(fn, x, w, big_part=True)
    plan = fastlaunch.Plan.build(rec, x, y, [w])
    plan(x, (1, 4))
    fresh = fn.compiled.calls[-1][2][3]
    assert fresh is not part and fresh.shape == part.shape and fresh.dtype == part.dtype


def test_an_unregistered_tensor_refuses_the_plan():
    fn, x, w = FakeJit(), torch.ones(1, 8), torch.ones(4, 8)
    rec, y, _ = _record(fn, x, w)
    assert fastlaunch.Plan.build(rec, x, y, []) is None       # w is no one's: it could be stale


def test_a_spoiled_or_empty_recording_refuses_the_plan():
    fn, x, w = FakeJit(), torch.ones(1, 8), torch.ones(4, 8)
    rec = fastlaunch.recording()
    try:
        fastlaunch.spoil("cuBLAS product")
    finally:
        fastlaunch.stop()
    assert fastlaunch.Plan.build(rec, x, torch.empty(1, 4), [w]) is None
    rec, y, _ = _record(fn, x, w)
    rec.spoiled = "torch._scaled_mm"
    assert fastlaunch.Plan.build(rec, x, y, [w]) is None


def test_launch_outside_a_recording_only_launches():
    fn = FakeJit()
    fastlaunch.launch(fn, (1, 1, 1), 4, x_ptr=1, w_ptr=2, y_ptr=3, part_ptr=4, M=5)
    assert fn.launched == [dict(x_ptr=1, w_ptr=2, y_ptr=3, part_ptr=4, M=5, num_warps=4)]


def test_an_interpreted_launch_spoils_the_recording():
    class Interpreted(FakeJit):
        def __getitem__(self, grid):
            return lambda **args: None          # the interpreter returns no compiled kernel
    rec = fastlaunch.recording()
    try:
        fastlaunch.launch(Interpreted(), (1, 1, 1), 4, x_ptr=1, w_ptr=2, y_ptr=3, part_ptr=4, M=5)
    finally:
        fastlaunch.stop()
    assert rec.spoiled and not rec.launches


def test_a_plan_launches_nothing_while_launch_hooks_are_set(monkeypatch):
    fn, x, w = FakeJit(), torch.ones(1, 8), torch.ones(4, 8)
    rec, y, _ = _record(fn, x, w)
    plan = fastlaunch.Plan.build(rec, x, y, [w])
    monkeypatch.setattr(fastlaunch, "hooks_idle", lambda: False)
    assert plan(x, (1, 4)) is None and fn.compiled.calls == []


def test_every_dense_launch_goes_through_fastlaunch():
    """A dense call's plan repeats only what fastlaunch.launch recorded: a kernel started directly
    (kernel[grid](...)) in the dense call path would be silently left out of its replays."""
    import inspect
    import re

    from oracle_triton import launch, linear

    for module in (launch, linear):
        direct = re.findall(r"\w+_kernel\[[^\]]*\]\s*\(", inspect.getsource(module))
        assert not direct, (module.__name__, direct)


class FakeLauncher:
    """Triton's CudaLauncher as a plan reads it: its C `launch` and the fixed launch arguments."""

    def __init__(self, c_launch, scratch=0):
        self.launch, self.global_scratch_size, self.profile_scratch_size = c_launch, scratch, 0
        self.launch_cooperative_grid, self.launch_pdl = False, True
        self.arg_annotations, self.kernel_signature = object(), object()
        self.wrapped: list[tuple] = []

    def __call__(self, *args):
        self.wrapped.append(args)


@pytest.mark.parametrize("scratch,direct", [(0, True), (64, False)])
def test_a_plan_calls_the_c_launcher_itself_when_the_launcher_adds_nothing(monkeypatch, scratch, direct):
    """Triton 3.7: without scratch buffers the plan calls the C launch with the launcher's own fixed
    arguments (cooperative, pdl, annotations, signature) and the call's tensors; else the launcher."""
    c_calls = []

    def c_launch(*a):
        c_calls.append(a)
    monkeypatch.setattr(fastlaunch, "c_launcher", lambda: c_launch)
    monkeypatch.setattr(fastlaunch, "triton_kind", lambda: 37)
    fn, x, w = FakeJit(), torch.ones(1, 8), torch.ones(4, 8)
    fn.compiled.run = FakeLauncher(c_launch, scratch)
    rec, y, part = _record(fn, x, w)
    plan = fastlaunch.Plan.build(rec, x, y, [w])
    out = plan(x, (1, 4))
    run = fn.compiled.run
    if not direct:
        assert not c_calls and len(run.wrapped) == 1 and run.wrapped[0][9] is x
        return
    assert not run.wrapped and len(c_calls) == 1
    (gx, gy, gz, stream, function, coop, pdl, meta, lmeta, enter, leave, gscratch, pscratch, ann, sig,
     args) = c_calls[0]
    assert (gx, gy, gz, stream) == (3, 1, 1, "stream") and function is fn.compiled.function
    assert (coop, pdl, meta) == (False, True, fn.compiled.packed_metadata)
    assert lmeta is enter is leave is gscratch is pscratch is None
    assert ann is run.arg_annotations and sig is run.kernel_signature
    assert args[0] is x and args[1] is w and args[2] is out and args[3] is part and args[4:] == [1, 64]


def test_on_triton_36_a_plan_calls_the_kernels_own_c_launch(monkeypatch):
    """Triton 3.6: each kernel has its own C launch module; the plan calls it with (grid, stream,
    function, cooperative, pdl, no scratch, packed metadata, no launch metadata or hooks, *args), which
    is what 3.6's CudaLauncher.__call__ passes it."""
    calls = []
    monkeypatch.setattr(fastlaunch, "triton_kind", lambda: 36)
    fn, x, w = FakeJit(), torch.ones(1, 8), torch.ones(4, 8)
    fn.compiled.run = FakeLauncher(len, 0)          # a builtin stands for the compiled C function
    rec, y, part = _record(fn, x, w)
    plan = fastlaunch.Plan.build(rec, x, y, [w])
    kind, c_launch, *_ = plan.steps[0][0]
    assert kind == 36 and c_launch is len
    plan.steps[0] = ((36, lambda *a: calls.append(a), False, True, None, None), *plan.steps[0][1:])
    out = plan(x, (1, 4))
    (gx, gy, gz, stream, function, coop, pdl, gscratch, pscratch, meta, lmeta, enter, leave, *args), = calls
    assert (gx, gy, gz, stream, coop, pdl) == (3, 1, 1, "stream", False, True)
    assert function is fn.compiled.function and meta is fn.compiled.packed_metadata
    assert gscratch is pscratch is lmeta is enter is leave is None
    assert args[0] is x and args[1] is w and args[2] is out and args[3] is part and args[4:] == [1, 64]


# ---------------------------------------------------------------- whole calls (CallPlans: the fused MoE)
class FakeJitClass:
    """Triton's JITFunction as record_call wraps it: kernel[grid](*args, **kwargs) -> run(grid=, warmup=)."""

    arg_names = ["x_ptr", "ids_ptr", "w_ptr", "y_ptr", "t_ptr", "M", "BLOCK"]
    params = [Param(n, None) for n in arg_names[:-1]] + [Param("BLOCK", 64)]

    def __init__(self):
        self.compiled = FakeCompiled()

    def run(self, *args, grid, warmup, **kwargs):
        return self.compiled

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)


@pytest.fixture
def jit(monkeypatch):
    monkeypatch.setattr(fastlaunch, "_jit_class", lambda: FakeJitClass)
    return FakeJitClass()


def _moe_like(fn, w, temp_bytes=64, offset=0, op=None):
    """A raw call as TritonMoE.forward makes one: views of its inputs, an allocated temporary and output,
    launches with positional and keyword arguments (num_warps: an option, no parameter)."""
    def raw(x, topw, ids):
        flat = ids.reshape(-1)
        t = torch.empty(temp_bytes, dtype=torch.uint8)
        y = torch.empty(x.shape[0], 4)
        if op is not None:
            topw = op(topw)
        fn[(2, 3)](x, flat, w, y, t[offset:], x.shape[0], num_warps=4)
        fn[(1,)](topw, flat, w, y, t.view(torch.int8), M=1)
        return y
    return raw


def test_a_call_plan_replays_the_recorded_launches_from_the_second_call_on(jit):
    w = torch.ones(4, 8)
    plans = fastlaunch.CallPlans(_moe_like(jit, w))
    x, topw, ids = torch.ones(1, 8), torch.ones(1, 2), torch.zeros(1, 2, dtype=torch.int32)
    assert plans(x, topw, ids) is None                        # the first call takes the ordinary path
    y = plans(x, topw, ids)                                   # the second runs raw, recorded
    assert isinstance(y, torch.Tensor) and y.shape == (1, 4) and not jit.compiled.calls
    x2, topw2, ids2 = torch.full((1, 8), 2.0), torch.ones(1, 2), torch.ones(1, 2, dtype=torch.int32)
    out = plans(x2, topw2, ids2)
    (g1, _, a1), (g2, _, a2) = jit.compiled.calls
    assert g1 == (2, 3, 1) and g2 == (1, 1, 1)
    assert a1[0] is x2 and a1[1] is ids2 and a1[2] is w and a1[3] is out and a1[5] == 1 and a1[6] == 64
    assert a2[0] is topw2 and a2[1] is ids2 and a2[3] is out and a2[5] == 1
    assert a1[4].data_ptr() == a2[4].data_ptr()               # the small temporary is kept, as its views
    assert out is not y and out.shape == y.shape and out.dtype == y.dtype
    other = plans(x2, topw2, ids2)
    assert jit.compiled.calls[-1][2][3] is other and other is not out      # a fresh output every call


def test_a_call_plan_allocates_a_large_temporary_per_call(jit):
    w = torch.ones(4, 8)
    big = fastlaunch.KEEP_TEMP_BYTES + 16
    plans = fastlaunch.CallPlans(_moe_like(jit, w, temp_bytes=big), after=1)
    x, topw, ids = torch.ones(1, 8), torch.ones(1, 2), torch.zeros(1, 2, dtype=torch.int32)
    plans(x, topw, ids)
    plans(x, topw, ids)
    plans(x, topw, ids)
    first, second = jit.compiled.calls[-4][2][4], jit.compiled.calls[-2][2][4]    # each call's first launch
    assert first.shape == (big,) and first.dtype == torch.uint8 and first.data_ptr() != second.data_ptr()


@pytest.mark.parametrize("case", ["torch op", "offset view", "input signature"])
def test_a_call_that_a_plan_could_not_repeat_is_refused(jit, case):
    """A torch op other than an allocation or a view (here a cast of the router weights: a plan would not
    repeat it) and an argument pointing inside a temporary at an offset refuse the plan; a new input
    signature (strides, alignment) gets a recording of its own."""
    w = torch.ones(4, 8)
    raw = _moe_like(jit, w, offset=8 if case == "offset view" else 0,
                    op=(lambda t: t.to(torch.bfloat16)) if case == "torch op" else None)
    plans = fastlaunch.CallPlans(raw, after=1)
    x, topw, ids = torch.ones(1, 8), torch.ones(1, 2), torch.zeros(1, 2, dtype=torch.int32)
    if case == "input signature":
        plans(x, topw, ids)
        wide = torch.ones(1, 16)[:, ::2]                      # the same shape, another stride
        assert plans(wide, topw, ids) is not None and len(plans.plans) == 2
        odd = torch.ones(9)[1:].view(1, 8)                    # contiguous, 4 bytes off 16-byte alignment
        assert plans(odd, topw, ids) is not None and len(plans.plans) == 3
        return
    assert isinstance(plans(x, topw, ids), torch.Tensor)      # the recorded call's own result
    assert not plans.plans and len(plans.refused) == 1
    if case == "torch op":
        assert "_to_copy" in next(iter(plans.refused.values()))
    assert plans(x, topw, ids) is None                        # from then on: the ordinary path


class FakeDescriptor:
    """A TMA descriptor as the kernels get one (TensorDescriptor.from_tensor): an object around its tensor."""

    def __init__(self, base):
        self.base, self.shape = base, list(base.shape)


def test_holds_tensor_sees_the_kernels_tma_descriptors():
    """fastlaunch.holds_tensor: true for the TMA descriptor w4_ws takes (w4_ws.x_tma_desc: Gluon's TensorDescriptor,
    built on the host), false for tensors, ints and None, which plans place or keep."""
    pytest.importorskip("triton.experimental.gluon")
    from oracle_triton.w4_ws import x_tma_desc

    x = torch.zeros(256, 64, dtype=torch.bfloat16)
    assert fastlaunch.holds_tensor(x_tma_desc(x, 128))
    assert not any(fastlaunch.holds_tensor(v) for v in (x, 3, 1.5, None, True))


def test_a_descriptor_of_a_calls_tensor_refuses_the_plan(jit):
    """A launch argument holding a tensor (a TMA descriptor of the call's activations, moe_ws) refuses the plan: a
    replay would hand the kernel the recorded call's address (R94: a planned eager call after a graph replay read a
    freed temporary). spoil() refuses a whole call's recording as it does a layer's."""
    w = torch.ones(4, 8)

    def raw(x, topw, ids):
        y = torch.empty(x.shape[0], 4)
        jit[(1,)](x, ids, w, y, FakeDescriptor(x), 1)
        return y

    plans = fastlaunch.CallPlans(raw, after=1)
    x, topw, ids = torch.ones(1, 8), torch.ones(1, 2), torch.zeros(1, 2, dtype=torch.int32)
    assert isinstance(plans(x, topw, ids), torch.Tensor) and not plans.plans and len(plans.refused) == 1
    assert plans(x, topw, ids) is None
    rec = fastlaunch.Recording()
    rec.launches.append((jit.compiled, (1, 1, 1), [x, FakeDescriptor(x)]))
    assert fastlaunch.Plan.build(rec, x, torch.empty(1, 4), []) is None

    def spoiling(x, topw, ids):
        fastlaunch.spoil("a TMA descriptor of the call's activations")
        return _moe_like(jit, w)(x, topw, ids)

    plans = fastlaunch.CallPlans(spoiling, after=1)
    plans(x, topw, ids)
    assert not plans.plans and list(plans.refused.values()) == ["a TMA descriptor of the call's activations"]


def test_record_call_restores_jit_run_and_records_nothing_after(jit):
    w = torch.ones(4, 8)
    plain = FakeJitClass.run
    _, rec = fastlaunch.record_call(_moe_like(jit, w), (torch.ones(1, 8), torch.ones(1, 2), torch.zeros(1, 2)))
    assert FakeJitClass.run is plain and len(rec.launches) == 2 and rec.spoiled is None
    jit[(1,)](1, 2, 3, 4, 5, 6)
    assert len(rec.launches) == 2
