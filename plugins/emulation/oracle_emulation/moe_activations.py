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
`limit` clamps gate from above and up to [-limit, limit].
"""
from __future__ import annotations

import math
from typing import Mapping

import torch

from oracle.errors import TensorError


GATED = frozenset({"silu", "situ", "swigluoai", "swigluoai_uninterleave", "gelu"})
PARAMS = {
    "silu": {"limit": None},
    "gelu": {"limit": None},
    "situ": {"beta": 4.0, "linear_beta": 25.0},
    "swigluoai": {"limit": 7.0, "alpha": 1.702, "beta": 1.0},
    "swigluoai_uninterleave": {"limit": 7.0, "alpha": 1.702, "beta": 1.0},
    "relu2": {},
    "relu2_no_mul": {},
}


def resolve_params(activation: str, given: Mapping[str, float]) -> dict[str, float | None]:
    """Defaults overlaid with the layer's parameters; unknown or non-finite ones are errors."""
    if activation not in PARAMS:
        raise TensorError("activation", f"one of {', '.join(PARAMS)}", repr(activation))
    known = PARAMS[activation]
    extra = sorted(set(given) - set(known))
    if extra:
        raise TensorError("activation_params", f"only {sorted(known) or 'no parameters'} for {activation}",
                          f"{extra}")
    params = {**known, **given}
    for key, value in params.items():
        if value is None:
            continue
        if not math.isfinite(value):
            raise TensorError(f"activation_params.{key}", "a finite number", str(value))
        # limit clamps, beta/linear_beta divide (SiTU): they must be positive; swigluoai's beta is an offset
        positive = key in ("limit", "linear_beta") or (key == "beta" and activation == "situ")
        if positive and value <= 0:
            raise TensorError(f"activation_params.{key}", "a positive number", str(value))
    return params


def split(h: torch.Tensor, activation: str) -> tuple[torch.Tensor, torch.Tensor]:
    if activation == "swigluoai":
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
