"""INT8 weights, symmetric, one scale per output channel or per group along K.

  weight        int8 [..., N, K]      values -128..127 (quantize clamps to +-127, as compressed-tensors)
  weight_scale  fp32 [..., N, K/g]    g = K: per output channel ([..., N, 1])
  value = q * scale. The group size is K / weight_scale.shape[-1].
"""
from __future__ import annotations

import torch

from oracle.errors import TensorError
from oracle.tensors import check_dtype, check_finite, shape_of

from .ieee import div

QMAX = 127


def quantize(w: torch.Tensor, weight_format: str = "int8", group_size: int | None = None) -> dict[str, torch.Tensor]:
    """Float weights [..., N, K] -> int8 weights and fp32 scales amax/127 per row (or per group of K)."""
    k = w.shape[-1]
    g = group_size or k
    if k % g:
        raise ValueError(f"K = {k} is not divisible by group size {g}")
    groups = w.float().unflatten(-1, (-1, g))
    scale = div(groups.abs().amax(dim=-1, keepdim=True), float(QMAX))
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(groups / scale).clamp(-QMAX, QMAX).to(torch.int8)
    return {"weight": q.flatten(-2), "weight_scale": scale.squeeze(-1)}


def dequantize(weight: torch.Tensor, scale: torch.Tensor, weight_format: str = "int8",
               names: tuple[str, str] = ("weight", "weight_scale")) -> torch.Tensor:
    """int8 [..., N, K] x scales [..., N, K/g] -> float32 [..., N, K]."""
    wname, sname = names
    check_dtype(wname, weight, (torch.int8,), "int8 weights")
    check_dtype(sname, scale, (torch.float32, torch.bfloat16, torch.float16), "int8 weight scales")
    n, k = weight.shape[-2], weight.shape[-1]
    if scale.dim() != weight.dim() or list(scale.shape[:-1]) != list(weight.shape[:-1]) or k % scale.shape[-1]:
        raise TensorError(sname, f"shape [..., {n}, K/g] with g dividing K = {k} (one scale per row or per group)",
                          str(shape_of(scale)))
    check_finite(sname, scale)
    g = k // scale.shape[-1]
    return (weight.float().unflatten(-1, (-1, g)) * scale.float()[..., None]).flatten(-2)
