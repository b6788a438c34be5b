"""NVFP4: E2M1 elements two per byte, an E4M3 scale per 16 along K, and an FP32 global scale.

  weight uint8 [..., N, K/2]; weight_scale e4m3 [..., N, K/16]; weight_global_scale fp32 [...] or []
  value = e2m1 * weight_scale * weight_global_scale
The global scale is ModelOpt's `weight_scale_2` (a dequantization multiplier), chosen
as amax(W) / (6 * 448) so that every block scale fits E4M3. Block scales are rounded
to E4M3 with round-to-nearest-even, as ModelOpt and the kernels' quantizers do.
"""
from __future__ import annotations

import torch

from oracle.errors import TensorError
from oracle.formats import NV_BLOCK
from oracle.tensors import check_dtype, check_finite, check_shape, shape_of

from . import e2m1, fp8
from .ieee import div


def global_scale_for(amax: torch.Tensor) -> torch.Tensor:
    g = div(amax.float(), e2m1.E2M1_MAX * fp8.E4M3_MAX)
    return torch.where(g > 0, g, torch.ones_like(g))


def block_quantize(x: torch.Tensor, global_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[..., K] -> (codes [..., K], e4m3 scales [..., K/16], dequantized float32).

    `global_scale` must broadcast against the blocks [..., K/16, 1] (a scalar does).
    """
    g = global_scale.float()
    blocks = x.float().unflatten(-1, (-1, NV_BLOCK))
    scale = fp8.to_e4m3(div(blocks.abs().amax(dim=-1, keepdim=True), e2m1.E2M1_MAX) / g)
    total = scale.float() * g
    safe = torch.where(total > 0, total, torch.ones_like(total))
    values = e2m1.round_to_e2m1(blocks / safe)
    return e2m1.encode(values).flatten(-2), scale.squeeze(-1), (values * total).flatten(-2)


def quantize(w: torch.Tensor, weight_format: str = "nvfp4",
             global_scale: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Float weights [..., N, K] (K % 16 == 0) -> {weight, weight_scale, weight_global_scale}."""
    k = w.shape[-1]
    if k % NV_BLOCK:
        raise TensorError("weight", f"K divisible by {NV_BLOCK} (one E4M3 scale per 16 along K)", f"K = {k}")
    if global_scale is None:
        global_scale = global_scale_for(w.float().abs().amax(dim=(-2, -1)))
    g = global_scale.float()
    codes, scale, _ = block_quantize(w, g.reshape(list(g.shape) + [1, 1, 1]))
    return {"weight": e2m1.pack(codes), "weight_scale": scale, "weight_global_scale": global_scale.float()}


def dequantize(weight: torch.Tensor, weight_scale: torch.Tensor, weight_global_scale: torch.Tensor | None,
               weight_format: str = "nvfp4",
               names: tuple[str, str, str] = ("weight", "weight_scale", "weight_global_scale")) -> torch.Tensor:
    """Checkpoint tensors -> float32 [..., N, K]."""
    wname, sname, gname = names
    check_dtype(wname, weight, (torch.uint8,), "NVFP4 packs two E2M1 codes per byte")
    check_dtype(sname, weight_scale, (fp8.E4M3,), "NVFP4 block scales are E4M3")
    *lead, n, half = shape_of(weight)
    k = 2 * half
    if k % NV_BLOCK:
        raise TensorError(wname, f"K divisible by {NV_BLOCK} (one E4M3 scale per 16 along K)", f"K = {k}")
    check_shape(sname, weight_scale, list(lead) + [n, k // NV_BLOCK], "one E4M3 per 16 along K")
    scale = weight_scale.float()
    check_finite(sname, scale)
    if weight_global_scale is None:
        raise TensorError(gname, "an fp32 global scale (ModelOpt weight_scale_2)", "None")
    check_dtype(gname, weight_global_scale, (torch.float32,), "the NVFP4 global scale is fp32")
    g = weight_global_scale
    if shape_of(g) not in ([], list(lead), list(lead) + [1]):
        raise TensorError(gname, f"shape [] or {list(lead)} (one global scale per tensor)", str(shape_of(g)))
    check_finite(gname, g)
    if g.dim() == len(lead) + 1:
        g = g.squeeze(-1)
    values = e2m1.dequantize_packed(weight).unflatten(-1, (-1, NV_BLOCK))
    out = (values * scale[..., None]).flatten(-2)
    return out * g.float().reshape(list(g.shape) + [1, 1])
