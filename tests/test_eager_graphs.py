"""oracle.integration.eager_graphs: eager few-row calls replayed from a private CUDA graph.

CPU: when it stays out of the way (CPU tensors, too many rows, switched off, a full cache).
GPU (marked): replays equal raw calls bit for bit on fresh inputs, results are the caller's
own (a later replay does not overwrite them) except inside `borrowed_outputs()` (a decode step),
where a replay hands out the graph's own buffer and reads inputs in place while they come back at the
same address, graphs of several kernels share one pool that
outlives the kernels, a call inside the caller's own capture is captured raw, and a kernel
whose capture fails falls back to raw calls with one warning.
"""
from __future__ import annotations

import types
import warnings

import pytest
import torch

from oracle.integration.eager_graphs import EagerGraphs, borrowed_outputs, enabled


class Counting:
    """A raw apply that counts its calls: y = 2x + b."""

    def __init__(self, device="cpu", refuse=False):
        self.calls = 0
        self.refuse = refuse
        self.b = torch.arange(8, dtype=torch.float32, device=device)

    def __call__(self, x):
        self.calls += 1
        if self.refuse and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("this kernel cannot be captured")
        return x * 2 + self.b


def test_switch_values():
    assert enabled({}) and enabled({"ORACLE_EAGER_GRAPHS": "1"})
    assert not enabled({"ORACLE_EAGER_GRAPHS": "0"})


def test_cpu_calls_are_raw():
    raw = Counting()
    eager = EagerGraphs(raw)
    x = torch.randn(2, 8)
    for _ in range(4):
        assert torch.equal(eager(x), x * 2 + raw.b)
    assert raw.calls == 4 and not eager.graphs and eager.served == [0, 0, 4]


def test_switched_off_says_why():
    eager = EagerGraphs(Counting(), on=False)
    assert eager.off_reason == "ORACLE_EAGER_GRAPHS=0"


def test_narrow_linears_replay_more_rows_within_the_element_budget():
    """MLA's kv_b_proj (K=512, N=32768) expands a 264-row cache every decode step: replayed; a wide
    layer keeps the 64-row limit, and no width replays past MAX_WIDE_ROWS."""
    from oracle.integration import eager_graphs as eg

    assert EagerGraphs(Counting()).max_rows == eg.MAX_ROWS == 64
    assert EagerGraphs(Counting(), width=512 + 32768).max_rows == (1 << 24) // 33280 == 504
    assert EagerGraphs(Counting(), width=7168 + 2 * 18432).max_rows == 381
    assert EagerGraphs(Counting(), width=7168 + 256 * 18432).max_rows == 64
    assert EagerGraphs(Counting(), width=64).max_rows == eg.MAX_WIDE_ROWS == 1024


gpu = pytest.mark.gpu


@gpu
def test_replays_match_raw_calls_and_results_are_owned_by_the_caller():
    raw = Counting("cuda")
    eager = EagerGraphs(raw)
    xs = [torch.randn(3, 8, device="cuda") for _ in range(5)]
    outs = [eager(x) for x in xs]
    assert len(eager.graphs) == 1 and raw.calls == 2           # one raw call, one captured; then replays
    for x, y in zip(xs, outs):
        assert torch.equal(y, x * 2 + raw.b)                   # earlier results not overwritten


@gpu
def test_borrowed_outputs_are_the_graphs_own_buffer_and_only_inside_the_block():
    raw = Counting("cuda")
    eager = EagerGraphs(raw)
    x = torch.randn(3, 8, device="cuda")
    eager(x), eager(x)                                          # captured
    with borrowed_outputs():
        a = eager(x)
        b = eager(x * 3)
        assert a is b and torch.equal(b, x * 6 + raw.b)         # the same buffer, holding the latest result
    c = eager(x)
    assert c is not a and torch.equal(c, x * 2 + raw.b) and torch.equal(a, c)   # owned again outside


@gpu
def test_decode_steps_read_inputs_in_place_while_they_lie_at_the_same_address():
    """Inside borrowed_outputs(): a kernel fed the same buffer again gets a graph that reads it where it
    lies (no copy in); new contents there are read, and an input elsewhere takes the copying graph."""
    raw = Counting("cuda")
    eager = EagerGraphs(raw)
    x = torch.randn(3, 8, device="cuda")
    with borrowed_outputs():
        for _ in range(3):
            x.copy_(torch.randn_like(x))
            assert torch.equal(eager(x), x * 2 + raw.b)
        assert len(eager.placed) == 1 and not eager.graphs and raw.calls == 2   # one raw call, one capture
        assert eager.served == [2, 0, 1]
        x.copy_(torch.randn_like(x))
        assert torch.equal(eager(x), x * 2 + raw.b)
        assert torch.equal(eager(x[:, :4].repeat(1, 2)), x[:, :4].repeat(1, 2) * 2 + raw.b)   # elsewhere
        elsewhere = torch.randn(3, 8, device="cuda")
        assert torch.equal(eager(elsewhere), elsewhere * 2 + raw.b)
    assert torch.equal(eager(x), x * 2 + raw.b) and eager.graphs     # outside: the caller's own copy
    assert len(eager.placed) <= 4


@gpu
def test_large_batches_and_the_callers_own_capture_run_raw():
    raw = Counting("cuda")
    eager = EagerGraphs(raw, max_rows=4)
    big = torch.randn(5, 8, device="cuda")
    for _ in range(3):
        eager(big)
    assert not eager.graphs
    x = torch.randn(2, 8, device="cuda")
    eager(x), eager(x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = eager(x)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, x * 2 + raw.b)


@gpu
def test_kernels_come_and_go_and_the_shared_pool_stays_usable():
    for _ in range(3):                       # each round's kernels (and their graphs) are dropped
        kernels = [EagerGraphs(Counting("cuda")) for _ in range(3)]
        for eager in kernels:
            x = torch.randn(4, 8, device="cuda")
            eager(x)
            assert torch.equal(eager(x), x * 2 + torch.arange(8, dtype=torch.float32, device="cuda"))
            assert eager.graphs and eager.off_reason is None
        del kernels


@gpu
def test_a_capture_that_fails_falls_back_with_one_warning():
    raw = Counting("cuda", refuse=True)
    eager = EagerGraphs(raw)
    x = torch.randn(2, 8, device="cuda")
    eager(x)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        y = eager(x)
    assert torch.equal(y, x * 2 + raw.b)
    assert eager.off_reason and len([w for w in seen if "not replayed" in str(w.message)]) == 1
    assert torch.equal(eager(x), x * 2 + raw.b)           # the device is still usable


# ---------------------------------------------------------------- PlacedCalls: the caller's shortcut
class FakeGraph:
    """Stands in for a CUDA graph on the CPU: a replay recomputes the kernel's result into its buffer."""

    def __init__(self, x, out, b):
        self.x, self.out, self.b, self.replays = x, out, b, 0

    def replay(self):
        self.replays += 1
        torch.add(self.x * 2, self.b, out=self.out)


class PlacingKernel:
    """A linear-like kernel whose eager calls an in-place graph serves from the second call at an address
    on (what EagerGraphs does on a GPU inside borrowed_outputs), reporting it in `eager.last_placed`."""

    def __init__(self, n=8, copy_input=False):
        self.b = torch.arange(n, dtype=torch.float32)
        self.copy_input = copy_input
        self.eager = types.SimpleNamespace(last_placed=None, generation=0, served=[0, 0, 0])
        self.graphs: dict[int, FakeGraph] = {}
        self.applies = 0

    def reset(self):
        """What EagerGraphs.reset does: every graph dropped, the generation bumped."""
        self.graphs.clear()
        self.eager.generation += 1

    def apply(self, x):
        self.applies += 1
        x2 = x.reshape(-1, x.shape[-1])
        if self.copy_input:                       # e.g. a cast: the graph would read a copy, not x
            x2 = x2.clone()
        graph = self.graphs.get(x2.data_ptr())
        if graph is None:
            self.eager.last_placed = None
            self.graphs[x2.data_ptr()] = FakeGraph(x2, torch.empty(x2.shape[0], self.b.numel()), self.b)
            return (x2 * 2 + self.b).reshape(*x.shape[:-1], -1)
        graph.replay()
        self.eager.last_placed = (graph, graph.out, (x2.data_ptr(),))
        return graph.out.reshape(*x.shape[:-1], -1)


def test_runner_replays_a_kept_graph_without_the_kernel_inside_decode_steps_only():
    from oracle.hf.modules import FusedRunner, KernelLinear

    kernel = PlacingKernel()
    runner = FusedRunner(kernel, 8, 8)
    lo, hi = KernelLinear(runner, 0, 3, None), KernelLinear(runner, 3, 8, None)
    x = torch.randn(1, 1, 8)
    with borrowed_outputs():
        for step in range(5):
            x.copy_(torch.randn_like(x))
            want = x * 2 + kernel.b
            a, b = lo(x), hi(x)
            assert torch.equal(a, want[..., :3]) and torch.equal(b, want[..., 3:])
        assert kernel.applies == 2 and runner.placed.hit                 # the kernel ran for steps 0 and 1 only
        version = a._version
        a2 = lo(x)
        assert a2 is a and a._version > version                          # same rows object; the replay bumped it
        hi(x)
    x.copy_(torch.randn_like(x))
    assert torch.equal(lo(x), (x * 2 + kernel.b)[..., :3]) and kernel.applies == 3   # outside: the kernel runs
    assert runner._x is x and torch.equal(hi(x), (x * 2 + kernel.b)[..., 3:]) and kernel.applies == 3
    assert runner._x is None                                              # the last part dropped the input


def test_runner_keeps_nothing_when_the_graph_reads_a_copy_or_the_graphs_were_reset():
    from oracle.hf.modules import FusedRunner

    copying = PlacingKernel(copy_input=True)
    runner = FusedRunner(copying, 8, 8)
    x = torch.randn(2, 8)
    with borrowed_outputs():
        for _ in range(4):
            assert torch.equal(runner(x), x * 2 + copying.b)
    assert not runner.placed.kept and copying.applies == 4

    kernel = PlacingKernel()
    runner = FusedRunner(kernel, 8, 8)
    with borrowed_outputs():
        for _ in range(3):
            runner(x)
        assert runner.placed.kept and kernel.applies == 2
        kernel.reset()
        x.copy_(torch.randn_like(x))
        assert torch.equal(runner(x), x * 2 + kernel.b) and kernel.applies == 3 and not runner.placed.kept


def test_a_kernel_output_fed_straight_to_the_next_runner_is_never_taken_for_last_steps():
    """A replay rewrites the same result tensor without autograd knowing: PlacedCalls bumps its version,
    so a runner whose input is that very tensor recomputes (no stale identity hit across steps)."""
    from oracle.hf.modules import FusedRunner

    first, second = PlacingKernel(), PlacingKernel()
    r1, r2 = FusedRunner(first, 8, 8), FusedRunner(second, 8, 8)
    x = torch.randn(1, 8)
    with borrowed_outputs():
        for _ in range(4):
            x.copy_(torch.randn_like(x))
            assert torch.equal(r2(r1(x)), (x * 2 + first.b) * 2 + second.b)


@gpu
def test_runner_replays_the_kernels_in_place_graph_directly_on_a_gpu():
    """FusedRunner over a real EagerGraphs kernel in decode steps: from the third step on the runner
    replays the in-place graph itself (the kernel's apply is not called), and every step reads the
    input's new contents."""
    from oracle.hf.modules import FusedRunner

    raw = Counting("cuda")

    class Kernel:
        eager = EagerGraphs(raw)
        applies = 0

        def apply(self, x):
            self.applies += 1
            return self.eager(x.reshape(-1, 8)).reshape(*x.shape[:-1], 8)

    kernel = Kernel()
    runner = FusedRunner(kernel, 8, 8)
    x = torch.randn(1, 1, 8, device="cuda")
    with borrowed_outputs():
        for _ in range(6):
            x.copy_(torch.randn_like(x))
            assert torch.equal(runner(x), x * 2 + raw.b)
    assert kernel.applies == 2 and raw.calls == 2 and runner.placed.kept    # raw, capture, then 4 direct replays
    assert kernel.eager.served == [5, 0, 1]


def test_kernel_mlps_are_wrapped_once_and_run_their_own_forward_outside_decode_steps(tmp_path):
    """oracle.hf.blocks: DeepSeek's dense MLPs and shared experts (three oracle projections, no weights
    of their own) are found, wrapped once, and off a decode step (or on the CPU) run their own forward."""
    import decode_models

    from oracle.hf import blocks

    model = decode_models.build("deepseek-fp8", tmp_path)
    found = [name for name, m in model.named_modules() if blocks.is_kernel_mlp(m)]
    assert found == ["model.layers.0.mlp", "model.layers.1.mlp.shared_experts", "model.layers.2.mlp.shared_experts"]
    assert blocks.install(model) == 3 and blocks.install(model) == 0
    mlp = model.get_submodule(found[0])
    x = torch.randn(1, 1, 256, dtype=torch.bfloat16)
    want = type(mlp).forward(mlp, x)
    with borrowed_outputs():
        assert torch.equal(mlp(x), want) and mlp._oracle_mlp_graph.eager.served == [0, 0, 0]   # CPU: its own forward
    assert not blocks.is_kernel_mlp(model.get_submodule("model.layers.1.mlp"))    # the MoE block holds a router
