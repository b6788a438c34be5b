"""E2M1 (FP4): 1 sign, 2 exponent (bias 1), 1 mantissa bit; no inf/NaN; max 6.

Value table from the OCP Microscaling Formats (MX) v1.0 spec, section 5.3.3:
positive codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign. Checkpoints
store two codes per byte, the even element in the low nibble.
"""
from __future__ import annotations

import torch

from oracle.formats import E2M1_MAX


#: Code -> value, codes 0..15 (bit 3 = sign).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def _lut(device: torch.device) -> torch.Tensor:
    return torch.tensor(E2M1_VALUES, dtype=torch.float32, device=device)


def round_to_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Round (saturating at +-6) to the nearest E2M1 value, ties to even mantissa.

    The grid spacing is 0.5 below 2, 1 in [2, 4) and 2 in [4, 6]; torch.round is
    round-half-to-even, which on each segment picks the code with an even mantissa.
    """
    a = x.float().abs().clamp(max=E2M1_MAX)
    q = torch.where(a < 2.0, torch.round(a * 2.0) * 0.5,
                    torch.where(a < 4.0, torch.round(a), torch.round(a * 0.5) * 2.0))
    return torch.copysign(q, x.float())


def encode(x: torch.Tensor) -> torch.Tensor:
    """Float values -> uint8 codes 0..15 (after rounding to the E2M1 grid)."""
    q = round_to_e2m1(x)
    a = q.abs()
    # magnitude -> code: 0,0.5,1,1.5 -> 0..3 (2a); 2,3 -> 4,5 (a+2); 4,6 -> 6,7 (a/2+4)
    mag = torch.where(a < 2.0, a * 2.0, torch.where(a < 4.0, a + 2.0, a * 0.5 + 4.0))
    sign = torch.signbit(q).to(torch.uint8) << 3
    return mag.to(torch.uint8) | sign


def decode(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes 0..15 -> float32 values."""
    return _lut(codes.device)[codes.long()]


def pack(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] codes -> [..., K/2] bytes, element 2i in the low nibble of byte i."""
    if codes.shape[-1] % 2:
        raise ValueError(f"E2M1 packing needs an even last dimension, got {codes.shape[-1]}")
    c = codes.to(torch.uint8)
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] bytes -> [..., K] codes (low nibble first)."""
    lo = packed & 0x0F
    hi = packed >> 4
    return torch.stack((lo, hi), dim=-1).flatten(-2)


def dequantize_packed(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] packed bytes -> [..., K] float32 E2M1 values (unscaled)."""
    lut = _lut(packed.device)
    pk = packed.long()
    return torch.stack((lut[pk & 0x0F], lut[pk >> 4]), dim=-1).flatten(-2)
