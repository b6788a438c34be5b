"""Eager decode steps: a gated MLP whose three projections are all oracle kernels runs as one graph replay.

Why: in an eager decode step every oracle kernel is one private-graph replay (oracle.integration.
eager_graphs), but a dense MLP `down(act(gate(x)) * up(x))` still costs two replays plus the
activation's and the product's launches, each with its Python around it: on the H200's host R13
measured a DeepSeek-R1 MLP at ~170 us of host time per call in an eager step (gate_up 70, down 48,
act_fn 24, the product and the module calls the rest) against ~0.5 us per launch of GPU work. Such a
block holds no weights of its own (its three projections are oracle kernels, the activation is
parameter-free), so inside a decode step it is replayed like a kernel: one in-place graph per input
address, the same machinery and the same rules (`EagerGraphs`: captured from the second step at an
address, never under the caller's own capture, raw on a failed capture).

Only inside `borrowed_outputs()` (oracle.hf.decode's eager steps) and never while torch.compile traces:
elsewhere the module's own forward runs. `eager_graphs.DIRECT = False` switches it off with the
callers' direct replays (benchmarks' A/B). Blocks with weights of their own (attention with its
norms, a router) are not wrapped: their unquantized work stays the caller's, as in the BF16 model.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..integration import eager_graphs
from .modules import KernelLinear

PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


def is_kernel_mlp(module: nn.Module) -> bool:
    """A gated MLP whose three projections are oracle kernels and which holds no weights of its own."""
    return (all(isinstance(getattr(module, name, None), KernelLinear) for name in PROJECTIONS)
            and callable(getattr(module, "act_fn", None))
            and not any(True for _ in module.parameters(recurse=False)))


class MLPGraph:
    """The eager-step replacement of one MLP's forward: its whole forward as one replayed graph."""

    def __init__(self, mlp: nn.Module):
        self.original = type(mlp).forward.__get__(mlp)      # the class's forward, bound: what runs otherwise
        self.eager = eager_graphs.EagerGraphs(self.original)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling() or not eager_graphs.DIRECT or not eager_graphs.borrowing() \
                or not x.is_cuda:
            return self.original(x)
        return self.eager(x)


def install(model: nn.Module) -> int:
    """Wrap every kernel MLP of `model` (once); the number wrapped now."""
    wrapped = 0
    for module in model.modules():
        if "_oracle_mlp_graph" not in module.__dict__ and is_kernel_mlp(module):
            module._oracle_mlp_graph = MLPGraph(module)
            module.forward = module._oracle_mlp_graph.forward
            wrapped += 1
    return wrapped
