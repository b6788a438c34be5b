"""E8M0 (UE8M0): the MX shared scale, an 8-bit biased exponent: value 2**(b - 127); 0xFF is NaN.

OCP Microscaling Formats (MX) v1.0, section 5.4.1. There is no sign, no zero and no
mantissa. Decoding builds the float32 bit pattern directly, so it is exact on every
device (2**-127 is a float32 subnormal, bits 0x00400000).
"""
from __future__ import annotations

import torch

from .ieee import div

E8M0_BIAS = 127
E8M0_NAN = 0xFF


def decode(b: torch.Tensor) -> torch.Tensor:
    """uint8 (or float8_e8m0fnu) bytes -> float32 scales; 0xFF -> NaN."""
    if b.dtype != torch.uint8:
        b = b.view(torch.uint8)
    e = b.to(torch.int32)
    bits = torch.where(e == 0, torch.full_like(e, 0x00400000), e << 23)
    bits = torch.where(e == E8M0_NAN, torch.full_like(e, 0x7FC00000), bits)
    return bits.view(torch.float32)


def encode_exponent(exponent: torch.Tensor) -> torch.Tensor:
    """Unbiased integer exponents -> bytes, clamped to the representable -127..127."""
    return (exponent.to(torch.int32).clamp(-E8M0_BIAS, E8M0_BIAS) + E8M0_BIAS).to(torch.uint8)


def scale_for(amax: torch.Tensor, element_max: float, element_emax: int, rounding: str = "ceil") -> torch.Tensor:
    """The E8M0 byte for blocks with absolute maximum `amax`.

    "ceil" (default): the smallest power of two s with amax / s <= element_max, so
    nothing saturates; this is what the b12x and cuBLAS MXFP8 quantizers do
    (pow2-ceil of amax / element_max).
    "floor": the OCP MX v1.0 section 6.3 rule, 2**(floor(log2(amax)) - element_emax),
    where the largest elements may saturate to +-element_max.
    All-zero blocks get the smallest scale, 2**-127.
    """
    a = amax.float()
    if rounding == "ceil":
        exponent = ceil_log2(div(a, element_max))
    elif rounding == "floor":
        exponent = floor_log2(a) - element_emax
    else:
        raise ValueError(f"unknown E8M0 rounding {rounding!r}; expected 'ceil' or 'floor'")
    exponent = torch.where(a > 0, exponent, torch.full_like(exponent, -E8M0_BIAS))
    return encode_exponent(exponent)


def floor_log2(x: torch.Tensor) -> torch.Tensor:
    """floor(log2(x)) for positive normal float32 x, read from the exponent bits (exact)."""
    bits = x.float().contiguous().view(torch.int32)
    return ((bits >> 23) & 0xFF) - E8M0_BIAS


def ceil_log2(x: torch.Tensor) -> torch.Tensor:
    """ceil(log2(x)) for positive normal float32 x: floor, plus one unless x is a power of two."""
    bits = x.float().contiguous().view(torch.int32)
    return ((bits >> 23) & 0xFF) - E8M0_BIAS + ((bits & 0x7FFFFF) != 0).to(torch.int32)
