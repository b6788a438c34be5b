"""INT4 weights in the GPTQ checkpoint layout (also what AWQ/compressed-tensors convert to).

  weight            int32 [..., K/8, N]   8 nibbles per int32, nibble i = row 8r+i (low nibble first)
  weight_scale      fp16  [..., K/g, N]   one scale per group of g rows along K, per column
  weight_zero_point int32 [..., K/g, N/8] 8 zero points per int32 along N (low nibble first),
                    or None: symmetric, zero point 8
  value = (q - zero) * scale, q and zero unsigned 0..15.
The stored zero point is the zero point itself; GPTQ "v1" files, which store zero - 1,
must add one when converting. The group size is K / weight_scale.shape[-2].
"""
from __future__ import annotations

import torch

from oracle.errors import TensorError
from oracle.tensors import check_dtype, check_finite, check_shape, shape_of

from .ieee import div


PACK = 8
_SHIFTS = tuple(4 * i for i in range(PACK))


def _round_half_even(x: torch.Tensor) -> torch.Tensor:
    return torch.round(x)


def pack_int32(nibbles: torch.Tensor, dim: int) -> torch.Tensor:
    """Pack unsigned 4-bit values 8 per int32 along `dim`, first element in the low nibble."""
    n = nibbles.to(torch.int64).movedim(dim, -1)
    n = n.unflatten(-1, (-1, PACK))
    shifts = torch.tensor(_SHIFTS, dtype=torch.int64, device=n.device)
    word = (n << shifts).sum(dim=-1)
    word = torch.where(word >= 2 ** 31, word - 2 ** 32, word)   # reinterpret as signed int32
    return word.to(torch.int32).movedim(-1, dim)


def unpack_int32(words: torch.Tensor, dim: int) -> torch.Tensor:
    """Inverse of pack_int32: int32 words -> int64 nibbles, 8x longer along `dim`."""
    w = words.to(torch.int64).movedim(dim, -1) & 0xFFFFFFFF
    shifts = torch.tensor(_SHIFTS, dtype=torch.int64, device=w.device)
    n = (w[..., None] >> shifts) & 0xF
    return n.flatten(-2).movedim(-1, dim)


def _fp16_at_least(s: torch.Tensor) -> torch.Tensor:
    """The smallest fp16 >= s (s >= 0): a scale rounded down could push a group's extremes past 0..15.

    For non-negative finite halves, adding one to the bit pattern gives the next value up.
    """
    h = s.to(torch.float16)
    up = (h.view(torch.int16) + 1).view(torch.float16)
    return torch.where(h.float() < s, up, h)


def quantize(w: torch.Tensor, weight_format: str = "int4", group_size: int = 128,
             symmetric: bool = False) -> dict[str, torch.Tensor]:
    """Float weights [..., N, K] -> GPTQ tensors; asymmetric min/max per group unless `symmetric`.

    Asymmetric: scale = (max - min) / 15, zero = round(-min / scale) in 0..15.
    Symmetric: scale = amax / 7, zero 8 (q = round(w / scale) + 8, clamped to 0..15).
    The scale is rounded up to fp16 (so the group still spans at most 15 steps) and that
    stored value is the one used to quantize, so dequantization matches.
    """
    *lead, n, k = w.shape
    if k % group_size or k % PACK:
        raise TensorError("weight", f"K divisible by the group size {group_size} and by 8", f"K = {k}")
    if n % PACK:
        raise TensorError("weight", "N divisible by 8 (zero points pack 8 columns per int32)", f"N = {n}")
    wt = w.float().transpose(-1, -2)                       # [..., K, N]
    groups = wt.unflatten(-2, (k // group_size, group_size))  # [..., G, g, N]
    if symmetric:
        scale = _fp16_at_least(div(groups.abs().amax(dim=-2), 7.0))
        zero = torch.full_like(scale, 8, dtype=torch.int64)
    else:
        lo = groups.amin(dim=-2).clamp(max=0.0)
        hi = groups.amax(dim=-2).clamp(min=0.0)
        scale = _fp16_at_least(div(hi - lo, 15.0))
        safe = torch.where(scale.float() > 0, scale.float(), torch.ones_like(scale.float()))
        zero = _round_half_even(-lo / safe).clamp(0, 15).to(torch.int64)
    s = scale.float()
    safe = torch.where(s > 0, s, torch.ones_like(s))
    q = (_round_half_even(groups / safe[..., None, :]) + zero[..., None, :]).clamp(0, 15)
    q = q.flatten(-3, -2)                                  # [..., K, N]
    out = {"weight": pack_int32(q, dim=-2), "weight_scale": scale,
           "weight_zero_point": None if symmetric else pack_int32(zero, dim=-1)}
    return out


def dequantize(weight: torch.Tensor, weight_scale: torch.Tensor, weight_zero_point: torch.Tensor | None,
               weight_format: str = "int4",
               names: tuple[str, str, str] = ("weight", "weight_scale", "weight_zero_point")) -> torch.Tensor:
    """GPTQ tensors -> float32 [..., N, K] (transposed back to the [N, K] GEMM layout)."""
    wname, sname, zname = names
    check_dtype(wname, weight, (torch.int32,), "GPTQ qweight packs 8 nibbles per int32")
    check_dtype(sname, weight_scale, (torch.float16, torch.bfloat16, torch.float32), "per-group scales")
    *lead, k8, n = shape_of(weight)
    k = k8 * PACK
    if weight_scale.dim() != len(lead) + 2 or shape_of(weight_scale)[-1] != n or \
            shape_of(weight_scale)[:-2] != lead or k % max(1, shape_of(weight_scale)[-2]):
        raise TensorError(sname, f"shape {lead + ['K/group', n]} with K = {k} divisible by K/group",
                          str(shape_of(weight_scale)))
    groups = shape_of(weight_scale)[-2]
    group_size = k // groups
    check_finite(sname, weight_scale)
    q = unpack_int32(weight, dim=-2)                       # [..., K, N]
    if weight_zero_point is None:
        zero = torch.full((*lead, groups, n), 8, dtype=torch.int64, device=weight.device)
    else:
        check_dtype(zname, weight_zero_point, (torch.int32,), "GPTQ qzeros pack 8 nibbles per int32")
        if n % PACK:
            raise TensorError(zname, "N divisible by 8 (8 zero points per int32)", f"N = {n}")
        check_shape(zname, weight_zero_point, lead + [groups, n // PACK], "8 zero points per int32 along N")
        zero = unpack_int32(weight_zero_point, dim=-1)
    zero_k = zero.repeat_interleave(group_size, dim=-2)
    scale_k = weight_scale.float().repeat_interleave(group_size, dim=-2)
    return ((q - zero_k).float() * scale_k).transpose(-1, -2)
