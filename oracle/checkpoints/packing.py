"""Bit-level helpers the layout conversions need (int4 nibbles in int32 words, E4M3 rounding)."""
from __future__ import annotations

import sys
from typing import Any, Sequence

from ..formats import E4M3_MAX

_PACK = 8


def unpack_nibbles(words: Any, dim: int, order: Sequence[int] | None = None) -> Any:
    """int32 words -> uint8 values 0..15, 8x longer along `dim`; nibble i (bits 4i..4i+3) is
    element i, or element `order[i]` for layouts that shuffle them (AWQ).

    Reads the words' bytes (little-endian: byte j holds nibbles 2j and 2j+1), which keeps the work
    at one byte per value instead of 64-bit shifts (the 0.5B load spent seconds here)."""
    import torch

    w = words.movedim(dim, -1).contiguous()
    if sys.byteorder != "little":      # big-endian hosts: the arithmetic way
        shifts = torch.arange(0, 32, 4, dtype=torch.int64, device=w.device)
        n = ((w.to(torch.int64)[..., None] & 0xFFFFFFFF) >> shifts) & 0xF
    else:
        b = w.view(torch.uint8).unflatten(-1, (-1, 4))           # [..., words, 4 bytes]
        n = torch.stack((b & 0xF, b >> 4), dim=-1).flatten(-2)  # [..., words, 8 nibbles]
    if order is not None:
        n = n[..., _inverse(order)]
    return n.flatten(-2).movedim(-1, dim)


def pack_nibbles(values: Any, dim: int) -> Any:
    """Values 0..15 -> int32 words along `dim`, element 8j+i in nibble i of word j (GPTQ order)."""
    import torch

    v = values.movedim(dim, -1).to(torch.uint8).unflatten(-1, (-1, _PACK))
    if sys.byteorder != "little":
        shifts = torch.arange(0, 32, 4, dtype=torch.int64, device=v.device)
        word = (v.to(torch.int64) << shifts).sum(dim=-1)
        word = torch.where(word >= 2 ** 31, word - 2 ** 32, word)
        return word.to(torch.int32).movedim(-1, dim)
    pairs = v.unflatten(-1, (4, 2))                              # [..., words, 4 bytes, lo/hi]
    byte = (pairs[..., 0] | (pairs[..., 1] << 4)).contiguous()  # [..., words, 4]
    return byte.flatten(-2).view(torch.int32).movedim(-1, dim)


def unpack_bytes(words: Any, dim: int) -> Any:
    """int32 words -> int64 values 0..255, 4x longer along `dim`; byte i (bits 8i..8i+7) is element i."""
    import torch

    w = words.to(torch.int64).movedim(dim, -1) & 0xFFFFFFFF
    shifts = torch.arange(0, 32, 8, dtype=torch.int64, device=w.device)
    return ((w[..., None] >> shifts) & 0xFF).flatten(-2).movedim(-1, dim)


def _inverse(order: Sequence[int]) -> list[int]:
    inv = [0] * len(order)
    for nibble, element in enumerate(order):
        inv[element] = nibble
    return inv


def to_e4m3(x: Any) -> Any:
    """Saturating round to float8_e4m3fn (a plain cast turns |x| > 448 into NaN)."""
    import torch

    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
