"""The MoE expert activations, with their parameters (MoELayer.activation_params).

Gated activations split FC1's output h [T, 2I] into gate and up halves: rows
[gate; up] (the w13 layout in oracle.kernel), except `swigluoai`, whose rows are
interleaved (gate = h[:, 0::2], up = h[:, 1::2], as gpt-oss stores them).
  silu                    silu(gate) * up                   (optional `limit` clamp)
  gelu                    gelu(gate) * up, exact erf form   (optional `limit` clamp)
  situ                    beta*tanh(gate/beta)*sigmoid(gate) * linear_beta*tanh(up/linear_beta)
                          (defaults beta=4, linear_beta=25)
  swigluoai[_uninterleave] gate = min(gate, limit), up = clamp(up, -limit, limit),
                          gate*sigmoid(alpha*gate) * (up + beta)
                          (defaults limit=7, alpha=1.702, beta=1, as gpt-oss)
  relu2, relu2_no_mul     relu(h)**2 on the I rows (not gated)
`limit` clamps gate from above and up to [-limit, limit]. Which activations are gated, which
interleave, and every parameter's default live in oracle.formats (MOE_ACTIVATION_DEFAULTS);
`oracle.tensors.moe_activation_params` resolves and checks a layer's parameters.
"""
from __future__ import annotations

from typing import Mapping

import torch

from oracle.formats import INTERLEAVED_ACTIVATIONS


def split(h: torch.Tensor, activation: str) -> tuple[torch.Tensor, torch.Tensor]:
    if activation in INTERLEAVED_ACTIVATIONS:
        return h[..., 0::2], h[..., 1::2]
    half = h.shape[-1] // 2
    return h[..., :half], h[..., half:]


def apply_activation(h: torch.Tensor, activation: str, params: Mapping[str, float | None]) -> torch.Tensor:
    """h [T, 2I] (gated) or [T, I] -> [T, I], computed in float32."""
    h = h.float()
    if activation in ("relu2", "relu2_no_mul"):
        return torch.relu(h).square()
    gate, up = split(h, activation)
    limit = params.get("limit")
    if activation in ("silu", "gelu"):
        if limit is not None:
            gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
        act = torch.nn.functional.silu(gate) if activation == "silu" else torch.nn.functional.gelu(gate)
        return act * up
    if activation == "situ":
        beta, lbeta = params["beta"], params["linear_beta"]
        return beta * torch.tanh(gate / beta) * torch.sigmoid(gate) * (lbeta * torch.tanh(up / lbeta))
    gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
    return gate * torch.sigmoid(params["alpha"] * gate) * (up + params["beta"])
