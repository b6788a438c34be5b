"""Emulated fused MoE: top-k routing from given ids/weights, per-expert GEMMs, activation, sum.

Weights of every expert are dequantized once in process_weights (ORACLE_EMULATION_WEIGHTS=packed:
kept as checkpoint tensors and dequantized in each call, weights.StoredWeight). apply sorts the
(token, expert) pairs by expert, pads each expert's rows to a common capacity and runs
FC1 -> activation -> FC2 as batched GEMMs over the experts hit (a handful of launches,
whatever the expert count), with the activation quantize-dequantize a W4A8/W4A4 kernel
applies before each GEMM (FC1's input once per token before dispatch, FC2's input over
all routed rows), then sums the expert outputs weighted by the router weights (or, with
apply_router_weight_on_input, scales each pair's input instead and sums unweighted).
Accumulation of the top-k outputs is in float32.
"""
from __future__ import annotations

from typing import Any

import torch

from oracle.errors import TensorError
from oracle.formats import torch_dtype
from oracle.kernel import Kernel
from oracle.tensors import check_dtype, moe_activation_params, shape_of

from .activations import quantize_dequantize
from .moe_activations import apply_activation
from .weights import StoredWeight, activation_scale, check_input, check_vector


class EmulationMoE(Kernel):
    """Reference fused MoE for every weight format, activation mode and expert activation."""

    stored13: StoredWeight | None = None
    stored2: StoredWeight | None = None

    @property
    def w13(self) -> torch.Tensor | None:
        """Every expert's dequantized FC1 weight [E, rows, H] (made on demand in packed mode)."""
        return None if self.stored13 is None else self.stored13.get()

    @property
    def w2(self) -> torch.Tensor | None:
        """Every expert's dequantized FC2 weight [E, H, I] (made on demand in packed mode)."""
        return None if self.stored2 is None else self.stored2.get()

    def process_weights(self, w13: Any, w2: Any, w13_scale: Any = None, w2_scale: Any = None,
                        w13_global_scale: Any = None, w2_global_scale: Any = None,
                        w13_input_scale: Any = None, w2_input_scale: Any = None,
                        w13_bias: Any = None, w2_bias: Any = None,
                        w13_zero_point: Any = None, w2_zero_point: Any = None) -> None:
        layer, fmt = self.layer, self.mode.weight
        e = layer.num_experts // layer.ep_size
        h, i = layer.hidden_size, layer.intermediate_size // layer.tp_size
        rows = layer.w13_rows
        self.dtype = torch_dtype(layer.dtype)
        self.params = moe_activation_params(layer.activation, layer.activation_params)
        self.experts, self.hidden, self.inter = e, h, i
        self.stored13 = StoredWeight(
            fmt, {"weight": w13, "scale": w13_scale, "global": w13_global_scale, "zero": w13_zero_point},
            {"weight": "w13", "scale": "w13_scale", "global": "w13_global_scale", "zero": "w13_zero_point"},
            [e], rows, h, self.dtype)
        self.stored2 = StoredWeight(
            fmt, {"weight": w2, "scale": w2_scale, "global": w2_global_scale, "zero": w2_zero_point},
            {"weight": "w2", "scale": "w2_scale", "global": "w2_global_scale", "zero": "w2_zero_point"},
            [e], h, i, self.dtype)
        dev = self.stored13.device
        self.b13 = None if w13_bias is None else check_vector(
            "w13_bias", w13_bias, [e, rows], "one bias per expert and FC1 row").to(device=dev, dtype=self.dtype)
        self.b2 = None if w2_bias is None else check_vector(
            "w2_bias", w2_bias, [e, h], "one bias per expert and hidden unit").to(device=dev, dtype=self.dtype)
        act = self.mode.activation
        self.fc1_params: dict[str, Any] = {}
        self.fc2_params: dict[str, Any] = {}
        if act == "fp8":
            granularity = self.mode.params.get("activation_granularity", "tensor")
            self.fc1_params["granularity"] = self.fc2_params["granularity"] = granularity
            if granularity == "tensor":
                for params, name, t in ((self.fc1_params, "w13_input_scale", w13_input_scale),
                                        (self.fc2_params, "w2_input_scale", w2_input_scale)):
                    s = activation_scale(name, t, e)
                    if s is not None:
                        params["scale"] = s.to(dev)
        elif act == "nvfp4":
            for params, name, t in ((self.fc1_params, "w13_input_scale", w13_input_scale),
                                    (self.fc2_params, "w2_input_scale", w2_input_scale)):
                s = activation_scale(name, t, e)
                if s is not None:
                    params["global_scale"] = s.to(dev)

    def _check_routing(self, hidden_states: torch.Tensor, topk_weights: Any, topk_ids: Any) -> None:
        m = hidden_states.shape[0]
        if hidden_states.dim() != 2:
            raise TensorError("hidden_states", f"shape [M, {self.hidden}]", str(shape_of(hidden_states)))
        for name, t in (("topk_weights", topk_weights), ("topk_ids", topk_ids)):
            if not isinstance(t, torch.Tensor):
                raise TensorError(name, "a torch.Tensor", type(t).__name__)
            if shape_of(t) != [m, self.layer.top_k]:
                raise TensorError(name, f"shape [{m}, {self.layer.top_k}] (tokens x top_k)", str(shape_of(t)))
            if t.device != hidden_states.device:
                raise TensorError(name, f"a tensor on {hidden_states.device}", str(t.device))
        check_dtype("topk_ids", topk_ids, (torch.int32, torch.int64), "integer expert ids")
        check_dtype("topk_weights", topk_weights, (torch.float32, torch.bfloat16, torch.float16), "router weights")
        if topk_ids.numel():
            lo, hi = int(topk_ids.min()), int(topk_ids.max())
            if lo < 0 or hi >= self.experts:
                bad = lo if lo < 0 else hi
                where = [int(v) for v in (topk_ids == bad).nonzero()[0].tolist()]
                raise TensorError("topk_ids", f"expert ids in [0, {self.experts})", f"{bad} at index {where}")
        if not bool(torch.isfinite(topk_weights.float()).all()):
            raise TensorError("topk_weights", "finite router weights", "NaN or infinite values")

    def apply(self, hidden_states: Any, topk_weights: Any, topk_ids: Any) -> torch.Tensor:
        if self.stored13 is None or self.stored2 is None:
            raise RuntimeError(f"{self!r}: call process_weights before apply")
        w13, w2 = self.stored13.get(), self.stored2.get()
        check_input("hidden_states", hidden_states, self.hidden, w13)
        self._check_routing(hidden_states, topk_weights, topk_ids)
        m, k = topk_ids.shape
        out = torch.zeros(m, self.hidden, dtype=torch.float32, device=hidden_states.device)
        if m == 0:
            return out.to(self.dtype)
        act = self.mode.activation
        x = hidden_states.to(self.dtype)
        dev = x.device
        # (token, expert) pairs sorted by expert; each expert's pairs padded to a common capacity
        flat_ids = topk_ids.reshape(-1).long()
        flat_w = topk_weights.reshape(-1).float()
        order = torch.argsort(flat_ids, stable=True)
        sorted_ids, token = flat_ids[order], order // k
        counts = torch.bincount(flat_ids, minlength=self.experts)
        cap, n_active = (int(v) for v in torch.stack((counts.max(), (counts > 0).sum())).tolist())
        pos = torch.arange(m * k, device=dev) - (torch.cumsum(counts, 0) - counts)[sorted_ids]
        b13, b2 = self.b13, self.b2
        slot, group_counts = sorted_ids, counts
        if 4 * n_active <= self.experts:          # few experts hit: gather just those weights
            experts = torch.nonzero(counts).squeeze(1)
            remap = torch.full((self.experts,), -1, dtype=torch.long, device=dev)
            remap[experts] = torch.arange(n_active, device=dev)
            slot, group_counts = remap[sorted_ids], counts[experts]
            w13, w2 = w13[experts], w2[experts]
            b13 = None if b13 is None else b13[experts]
            b2 = None if b2 is None else b2[experts]
        if self.layer.apply_router_weight_on_input:
            pair_in = quantize_dequantize((x[token].float() * flat_w[order, None]).to(self.dtype),
                                          act, **self.fc1_params)
        else:
            pair_in = quantize_dequantize(x, act, **self.fc1_params)[token]
        groups = w13.shape[0]
        xpad = torch.zeros(groups, cap, self.hidden, dtype=self.dtype, device=dev)
        xpad[slot, pos] = pair_in
        h = torch.bmm(xpad, w13.transpose(1, 2)) if b13 is None else \
            torch.baddbmm(b13[:, None, :], xpad, w13.transpose(1, 2))
        a = apply_activation(h, self.layer.activation, self.params)
        valid = torch.arange(cap, device=dev)[None, :] < group_counts[:, None]
        a = (a * valid[..., None]).to(self.dtype)  # padding rows must not enter per-tensor scales
        a = quantize_dequantize(a, act, **self.fc2_params)
        y = torch.bmm(a, w2.transpose(1, 2)) if b2 is None else \
            torch.baddbmm(b2[:, None, :], a, w2.transpose(1, 2))
        out_pairs = y[slot, pos].float()
        if not self.layer.apply_router_weight_on_input:
            out_pairs *= flat_w[order, None]
        out.index_add_(0, token, out_pairs)
        return out.to(self.dtype)
