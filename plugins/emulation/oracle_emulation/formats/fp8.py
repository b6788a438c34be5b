"""FP8 E4M3 (the `fn` variant: no inf, one NaN pattern per sign, max 448) and the FP8 weight formats.

E4M3 facts (OCP 8-bit Floating Point Specification v1.0, table 1): exponent bias 7,
3 mantissa bits, normal exponents -6..8, subnormal spacing 2**-9, S.1111.111 is NaN.
`decode_bits`/`round_to_e4m3` compute these from the bit layout; tests check that they
agree with torch.float8_e4m3fn, which the kernels then use for speed.

Weight formats (tensor names as in oracle.kernel):
  fp8_tensor   weight e4m3 [N, K], weight_scale fp32 []
  fp8_channel  weight e4m3 [N, K], weight_scale fp32 [N]
  fp8_block    weight e4m3 [N, K], weight_scale fp32 [ceil(N/128), ceil(K/128)]
A leading expert dimension E is allowed on every tensor (MoE).
"""
from __future__ import annotations

import math

import torch

from oracle.formats import E4M3_MAX, FP8_BLOCK
from oracle.tensors import check_dtype, check_finite, check_shape, shape_of

from .ieee import div


E4M3 = torch.float8_e4m3fn
BLOCK = FP8_BLOCK


def decode_bits(b: torch.Tensor) -> torch.Tensor:
    """uint8 E4M3 bit patterns -> float32, from the layout alone (no float8 dtype)."""
    e = ((b.to(torch.int32) >> 3) & 0xF).float()
    m = (b.to(torch.int32) & 0x7).float()
    sign = torch.where((b.to(torch.int32) & 0x80) != 0, -1.0, 1.0)
    normal = torch.exp2(e - 7.0) * (1.0 + m / 8.0)
    sub = m * 2.0 ** -9
    v = sign * torch.where(e == 0, sub, normal)
    nan = ((b.to(torch.int32) & 0x7F) == 0x7F)
    return torch.where(nan, torch.full_like(v, math.nan), v)


def round_to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Round float32 to the nearest E4M3 value (ties to even), saturating at +-448."""
    a = x.float().abs().clamp(max=E4M3_MAX)
    _, exp = torch.frexp(a)                        # a = m * 2**exp, m in [0.5, 1)
    exp = (exp - 1).clamp(min=-6)                  # unbiased exponent; subnormals share -6
    quantum = torch.exp2((exp - 3).float())        # 3 mantissa bits
    q = torch.round(a / quantum) * quantum
    return torch.copysign(q.clamp(max=E4M3_MAX), x.float())


def to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Saturating cast to float8_e4m3fn (torch's cast would turn |x| > 448 into NaN)."""
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)


def _amax_scale(amax: torch.Tensor) -> torch.Tensor:
    s = div(amax.float(), E4M3_MAX)
    return torch.where(s > 0, s, torch.ones_like(s))


def _blocks(n: int) -> int:
    return -(-n // BLOCK)


def _expand_block_scale(scale: torch.Tensor, n: int, k: int) -> torch.Tensor:
    s = scale.repeat_interleave(BLOCK, dim=-2).repeat_interleave(BLOCK, dim=-1)
    return s[..., :n, :k]


def quantize(w: torch.Tensor, weight_format: str) -> dict[str, torch.Tensor]:
    """Float weights [..., N, K] -> {weight, weight_scale}; scale = amax / 448 per tensor, row or 128x128 block."""
    w = w.float()
    if weight_format == "fp8_tensor":
        scale = _amax_scale(w.abs().amax(dim=(-2, -1)))
        q = to_e4m3(w / scale[..., None, None])
    elif weight_format == "fp8_channel":
        scale = _amax_scale(w.abs().amax(dim=-1))
        q = to_e4m3(w / scale[..., None])
    elif weight_format == "fp8_block":
        *lead, n, k = w.shape
        nb, kb = _blocks(n), _blocks(k)
        padded = torch.zeros(*lead, nb * BLOCK, kb * BLOCK, device=w.device)
        padded[..., :n, :k] = w
        amax = padded.abs().unflatten(-1, (kb, BLOCK)).unflatten(-3, (nb, BLOCK)).amax(dim=(-3, -1))
        scale = _amax_scale(amax)
        q = to_e4m3(w / _expand_block_scale(scale, n, k))
    else:
        raise ValueError(f"not an FP8 weight format: {weight_format!r}")
    return {"weight": q, "weight_scale": scale.float()}


def expected_scale_shape(weight_format: str, lead: list[int], n: int, k: int) -> tuple[list[int], str]:
    if weight_format == "fp8_tensor":
        return list(lead), "one fp32 scale per tensor"
    if weight_format == "fp8_channel":
        return list(lead) + [n], "one fp32 scale per output channel"
    return list(lead) + [_blocks(n), _blocks(k)], "one fp32 scale per 128x128 block"


def dequantize(weight: torch.Tensor, weight_scale: torch.Tensor, weight_format: str,
               names: tuple[str, str] = ("weight", "weight_scale")) -> torch.Tensor:
    """Checkpoint tensors -> float32 [..., N, K]; validates dtypes, shapes and finiteness."""
    wname, sname = names
    check_dtype(wname, weight, (E4M3,), f"{weight_format} weights are E4M3")
    check_dtype(sname, weight_scale, (torch.float32,), f"{weight_format} scales are fp32")
    *lead, n, k = shape_of(weight)
    shape, why = expected_scale_shape(weight_format, lead, n, k)
    if weight_format == "fp8_tensor" and shape_of(weight_scale) == list(lead) + [1]:
        weight_scale = weight_scale.squeeze(-1)   # a [1] per-tensor scale is the same fact
    check_shape(sname, weight_scale, shape, why)
    check_finite(sname, weight_scale)
    w = weight.float()
    if weight_format == "fp8_tensor":
        return w * weight_scale[..., None, None]
    if weight_format == "fp8_channel":
        return w * weight_scale[..., None]
    return w * _expand_block_scale(weight_scale, n, k)
