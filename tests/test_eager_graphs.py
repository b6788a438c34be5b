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
