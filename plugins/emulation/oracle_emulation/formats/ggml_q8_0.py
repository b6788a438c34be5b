"""GGML Q8_0: blocks of 32 weights, 34 bytes each: fp16 scale d (little-endian), then 32 int8.

  weight uint8 [..., N, K/32, 34]; value = d * q.
Layout: block_q8_0 in ggml/src/ggml-common.h (ggml-org/llama.cpp); the quantizer
follows quantize_row_q8_0_ref in ggml-quants.c: d = amax / 127, q = roundf(x / d)
(half away from zero) computed with the unrounded d, then d is stored as fp16.
"""
from __future__ import annotations

import torch

from oracle.errors import TensorError
from oracle.formats import CODEC_BLOCKS
from oracle.tensors import check_dtype, shape_of

from .ieee import div


QK, BLOCK_BYTES = CODEC_BLOCKS["q8_0"]


def _roundf(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.floor(x.abs() + 0.5)


def quantize(w: torch.Tensor, weight_format: str = "q8_0") -> dict[str, torch.Tensor]:
    k = w.shape[-1]
    if k % QK:
        raise TensorError("weight", f"K divisible by {QK} (Q8_0 blocks of 32)", f"K = {k}")
    blocks = w.float().unflatten(-1, (-1, QK))
    d = div(blocks.abs().amax(dim=-1, keepdim=True), 127.0)
    inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
    q = _roundf(blocks * inv).clamp(-127, 127).to(torch.int8)
    d16 = d.to(torch.float16)
    raw = torch.cat((d16.view(torch.uint8), q.view(torch.uint8)), dim=-1)
    return {"weight": raw}


def dequantize(weight: torch.Tensor, weight_format: str = "q8_0", name: str = "weight") -> torch.Tensor:
    """[..., N, K/32, 34] bytes -> float32 [..., N, K]."""
    check_dtype(name, weight, (torch.uint8,), "GGML block bytes")
    if weight.dim() < 3 or shape_of(weight)[-1] != BLOCK_BYTES:
        raise TensorError(name, f"shape [..., N, K/{QK}, {BLOCK_BYTES}] (Q8_0 blocks of {BLOCK_BYTES} bytes)",
                          str(shape_of(weight)))
    raw = weight.contiguous()
    d = raw[..., :2].contiguous().view(torch.float16).float()     # [..., N, K/32, 1]
    if not bool(torch.isfinite(d).all()):
        raise TensorError(name, "finite fp16 block scales d", "a NaN or infinite d")
    q = raw[..., 2:].contiguous().view(torch.int8).float()
    return (q * d).flatten(-2)
