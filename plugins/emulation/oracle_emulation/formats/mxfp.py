"""OCP MX weight formats: MXFP8 (E4M3 elements) and MXFP4 (E2M1, two per byte), one E8M0 scale per 32 along K.

  mxfp8  weight e4m3 [..., N, K];   weight_scale uint8 E8M0 [..., N, K/32]
  mxfp4  weight uint8 [..., N, K/2]; weight_scale uint8 E8M0 [..., N, K/32]
(OCP Microscaling Formats v1.0: block size 32; E4M3 emax 8, E2M1 emax 2.)
"""
from __future__ import annotations

import torch

from oracle.errors import TensorError
from oracle.formats import MX_BLOCK
from oracle.tensors import check_dtype, check_finite, check_shape, shape_of

from . import e2m1, e8m0, fp8


ELEMENT = {"mxfp8": (fp8.E4M3_MAX, 8), "mxfp4": (e2m1.E2M1_MAX, 2)}
_E8M0_DTYPES = tuple(d for d in (torch.uint8, getattr(torch, "float8_e8m0fnu", None)) if d is not None)


def block_scales(x: torch.Tensor, fmt: str, rounding: str = "ceil") -> tuple[torch.Tensor, torch.Tensor]:
    """[..., K] -> (E8M0 bytes [..., K/32], float32 scales broadcastable to [..., K/32, 1])."""
    element_max, emax = ELEMENT[fmt]
    blocks = x.float().unflatten(-1, (-1, MX_BLOCK))
    byte = e8m0.scale_for(blocks.abs().amax(dim=-1), element_max, emax, rounding)
    return byte, e8m0.decode(byte)[..., None]


def quantize(w: torch.Tensor, weight_format: str, rounding: str = "ceil") -> dict[str, torch.Tensor]:
    """Float weights [..., N, K] (K % 32 == 0) -> {weight, weight_scale} as an MX checkpoint holds them."""
    k = w.shape[-1]
    if k % MX_BLOCK:
        raise TensorError("weight", f"K divisible by {MX_BLOCK} (one E8M0 scale per 32 along K)", f"K = {k}")
    byte, scale = block_scales(w, weight_format, rounding)
    scaled = (w.float().unflatten(-1, (-1, MX_BLOCK)) / scale).flatten(-2)
    if weight_format == "mxfp8":
        q = fp8.to_e4m3(scaled)
    else:
        q = e2m1.pack(e2m1.encode(scaled))
    return {"weight": q, "weight_scale": byte}


def check_e8m0(name: str, scale: torch.Tensor, expected: list[int], why: str) -> torch.Tensor:
    check_dtype(name, scale, _E8M0_DTYPES, "E8M0 bytes")
    check_shape(name, scale, expected, why)
    decoded = e8m0.decode(scale)
    check_finite(name, decoded)   # byte 0xFF is the E8M0 NaN
    return decoded


def dequantize(weight: torch.Tensor, weight_scale: torch.Tensor, weight_format: str,
               names: tuple[str, str] = ("weight", "weight_scale")) -> torch.Tensor:
    """Checkpoint tensors -> float32 [..., N, K]."""
    wname, sname = names
    if weight_format == "mxfp8":
        check_dtype(wname, weight, (fp8.E4M3,), "MXFP8 elements are E4M3")
        *lead, n, k = shape_of(weight)
        values = weight.float()
    else:
        check_dtype(wname, weight, (torch.uint8,), "MXFP4 packs two E2M1 codes per byte")
        *lead, n, half = shape_of(weight)
        k = 2 * half
        values = None
    if k % MX_BLOCK:
        raise TensorError(wname, f"K divisible by {MX_BLOCK} (one E8M0 scale per 32 along K)", f"K = {k}")
    scale = check_e8m0(sname, weight_scale, list(lead) + [n, k // MX_BLOCK], "one E8M0 per 32 along K")
    if values is None:
        values = e2m1.dequantize_packed(weight)
    return (values.unflatten(-1, (-1, MX_BLOCK)) * scale[..., None]).flatten(-2)
