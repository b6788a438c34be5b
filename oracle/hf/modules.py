"""torch modules that stand in for a transformers model's quantized modules and run oracle kernels.

A fused kernel (qkv_proj, gate_up_proj) serves several of the model's nn.Linear modules
(q_proj, k_proj, v_proj are called one after the other with the same input): a
`FusedRunner` runs the kernel once per input and each `KernelLinear` returns its rows.

Under torch.compile the modules call the opaque custom ops of oracle.integration.ops instead
(one graph node per kernel call, shape from the op's fake implementation): Dynamo never traces a
kernel's Python. The fused runner's identity cache is an eager device; compiled, each part calls
the op with the same input and the compiler's common-subexpression pass keeps one call.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..integration.eager_graphs import PlacedCalls


class FusedRunner:
    """Runs one linear kernel once per input tensor and hands out row slices of the output."""

    def __init__(self, kernel: Any, in_features: int, out_features: int):
        from ..integration import ops

        self.kernel = kernel
        self.handle = ops.register(kernel)       # a Python int: a constant to Dynamo
        self.traced_handle = self.handle         # what compiled code calls (oracle.hf.compiled shares one)
        self.in_features, self.out_features = in_features, out_features
        self._x: torch.Tensor | None = None      # held, so its memory cannot be reused by a new input
        self._version = -1
        self._out: torch.Tensor | None = None
        self._x_traced: Any = None               # the same cache while Dynamo traces (graph values)
        self._out_traced: Any = None
        self.placed = PlacedCalls(kernel)        # decode steps: the kernel's in-place graphs, replayed directly

    def __call__(self, x: torch.Tensor, last: bool = True) -> torch.Tensor:
        if torch.compiler.is_compiling():
            return self._traced(x, last)
        if x is not self._x or x._version != self._version or self._out is None:
            key = self.placed.key((x,))
            y = self.placed.replay(key)
            if y is None:
                y = self.kernel.apply(x)             # [*lead, N]: the kernel keeps the leading dimensions
                y = y if y.dtype == x.dtype else y.to(x.dtype)
                self.placed.remember(key, (x,), y)
            self._out, self._x, self._version = y, x, x._version
        out = self._out
        if last:    # the last part drops the cache: a replayed result is the same tensor object every step
            self._x = self._out = None               # (a replay bumps no version), so it must never key it
        return out


    def _traced(self, x: torch.Tensor, last: bool) -> torch.Tensor:
        """Compiled: one oracle::linear node per input; the part with the last rows drops the cache, so
        no tensor stays on the runner between calls (Dynamo would guard on it and recompile each call)."""
        if x is not self._x_traced:
            y = torch.ops.oracle.linear(x.reshape(-1, self.in_features), self.traced_handle)
            self._out_traced = y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)
            self._x_traced = x
        out = self._out_traced
        if last:
            self._x_traced = self._out_traced = None
        return out


class KernelLinear(nn.Module):
    """Rows [start, stop) of a (possibly fused) linear kernel's output; replaces one nn.Linear."""

    def __init__(self, runner: FusedRunner, start: int, stop: int, decision: Any, layer_name: str = ""):
        super().__init__()
        self.runner, self.start, self.stop = runner, start, stop
        self.in_features, self.out_features = runner.in_features, stop - start
        self.decision, self.layer_name = decision, layer_name
        self._sliced: tuple[torch.Tensor, torch.Tensor] | None = None   # (replayed result, its rows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.runner(x, last=self.stop == self.runner.out_features)
        if self.start == 0 and self.stop == self.runner.out_features:
            return y
        if self._sliced is not None and self._sliced[0] is y:
            return self._sliced[1]
        rows = y[..., self.start:self.stop]
        if self.runner.placed.hit:          # a replayed result lives as long as its graph: keeping it costs nothing
            self._sliced = (y, rows)
        return rows

    def extra_repr(self) -> str:
        return f"rows {self.start}:{self.stop} of {self.layer_name}, {self.decision.kernel} [{self.decision.mode}]"


class KernelExperts(nn.Module):
    """Replaces a transformers fused-experts module: forward(hidden, top_k_index, top_k_weights)."""

    def __init__(self, kernel: Any, decision: Any):
        super().__init__()
        from ..integration import ops

        self.kernel, self.decision = kernel, decision
        self.handle = ops.register(kernel)
        self.traced_handle = self.handle
        kernel.check_inputs = False        # the ids come from the model's router: no host read-back per call
        self.placed = PlacedCalls(kernel)  # decode steps: the kernel's in-place graphs, replayed directly

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            out = torch.ops.oracle.moe(hidden_states, top_k_weights.float(), top_k_index, self.traced_handle)
        else:                                    # the kernels take fp32 weights (oracle.kernel); most routers give them
            weights = top_k_weights if top_k_weights.dtype == torch.float32 else top_k_weights.float()
            inputs = (hidden_states, weights, top_k_index)
            key = self.placed.key(inputs)
            out = self.placed.replay(key)
            if out is None:
                out = self.kernel.apply(*inputs)
                self.placed.remember(key, inputs, out)
        return out if out.dtype == hidden_states.dtype else out.to(hidden_states.dtype)

    def extra_repr(self) -> str:
        return f"{self.decision.kernel} [{self.decision.mode}]"


class PartKernels:
    """One kernel per part of a fused layer (q/k/v with their own per-tensor scales): what a fused
    kernel would offer, for inspection and direct calls (`weight`, `apply`), from the parts."""

    def __init__(self, kernels: list[Any]):
        self.parts = kernels
        self.mode = kernels[0].mode

    @property
    def weight(self) -> torch.Tensor:
        return torch.cat([k.weight for k in self.parts])

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([k.apply(x) for k in self.parts], dim=-1)
