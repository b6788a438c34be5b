"""Activation quantizers on the device, in torch: the operands (codes and scales) a scaled GEMM takes.

They round exactly as oracle-emulation's activation functions (its `activations` module
is the reference; tests/test_torch_quantize.py compares them value for value):
  fp8    E4M3, round to nearest even, saturating at +-448 (clamp first: torch's cast turns
         |x| > 464 into NaN, seen on CPU and on an H200); scale = amax / 448 per tensor,
         per token (row) or per 1x128 group, an all-zero scope gets scale 1; a static
         per-tensor scale is used as given.
  mxfp8  E4M3 with an E8M0 scale per 32: 2**ceil(log2(amax / 448)), all-zero blocks 2**-127.
  nvfp4  E2M1 codes with an E4M3 scale per 16 times an fp32 global scale (given, or
         amax / (6 * 448) per tensor).
Divisions by a constant divide by a tensor of it, which is correctly rounded on every device.
"""
from __future__ import annotations

import torch

from oracle.formats import E2M1_MAX, E4M3_MAX, FP8_BLOCK, MX_BLOCK, NV_BLOCK


E4M3 = torch.float8_e4m3fn
GROUP = FP8_BLOCK


def _div_const(a: torch.Tensor, c: float) -> torch.Tensor:
    return a / torch.full_like(a, c)


def _guard(s: torch.Tensor) -> torch.Tensor:
    return torch.where(s > 0, s, torch.ones_like(s))


def to_e4m3(v: torch.Tensor) -> torch.Tensor:
    """Saturating round-to-nearest-even cast of float32 values to float8_e4m3fn."""
    return v.clamp_(-E4M3_MAX, E4M3_MAX).to(E4M3)


def fp8_per_tensor(x: torch.Tensor, scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, K] -> (e4m3 [M, K], fp32 scale []); dynamic amax/448 unless a static scale is given."""
    if scale is None:
        scale = _guard(_div_const(x.abs().amax().float(), E4M3_MAX))
    else:
        scale = scale.float().reshape(())
    return to_e4m3(x.float() / scale), scale


def fp8_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, K] -> (e4m3 [M, K], fp32 scales [M, 1]), one amax/448 scale per row."""
    scale = _guard(_div_const(x.abs().amax(dim=-1, keepdim=True).float(), E4M3_MAX))
    return to_e4m3(x.float() / scale), scale


def fp8_per_group(x: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, K] (K % group == 0) -> (e4m3 [M, K], fp32 scales [M, K/group]), amax/448 per 1 x group."""
    m, k = x.shape
    g = x.reshape(m, k // group, group)
    scale = _guard(_div_const(g.abs().amax(dim=-1).float(), E4M3_MAX))
    q = to_e4m3(g.float() / scale[..., None])
    return q.reshape(m, k), scale


def _ceil_log2(v: torch.Tensor) -> torch.Tensor:
    """ceil(log2(v)) of positive normal float32 values, from the exponent and mantissa bits."""
    bits = v.float().contiguous().view(torch.int32)
    return ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).to(torch.int32)


def _pow2(e: torch.Tensor) -> torch.Tensor:
    """2**e for integer e in -127..127, exactly (2**-127 is the float32 subnormal 0x00400000)."""
    e = e.to(torch.int32)
    bits = torch.where(e == -127, torch.full_like(e, 0x00400000), (e + 127) << 23)
    return bits.view(torch.float32)


def mxfp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, K] (K % 32 == 0) -> (e4m3 [M, K], E8M0 bytes uint8 [M, K/32])."""
    m, k = x.shape
    g = x.float().reshape(m, k // MX_BLOCK, MX_BLOCK)
    amax = g.abs().amax(dim=-1)
    e = torch.where(amax > 0, _ceil_log2(_div_const(amax, E4M3_MAX)), torch.full_like(amax, -127, dtype=torch.int32))
    e = e.clamp(-127, 127)
    q = to_e4m3(g * _pow2(-e)[..., None])      # exact: a power-of-two scaling
    return q.reshape(m, k), (e + 127).to(torch.uint8)


def _round_e2m1(v: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 value (0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives), ties to even, saturating at 6.

    The grid spacing is 0.5 below 2, 1 in [2, 4) and 2 in [4, 6]; torch.round is
    half-to-even, which on each segment is the even-mantissa code (OCP MX v1.0, 5.3.3).
    """
    a = v.abs().clamp(max=E2M1_MAX)
    q = torch.where(a < 2.0, torch.round(a * 2.0) * 0.5,
                    torch.where(a < 4.0, torch.round(a), torch.round(a * 0.5) * 2.0))
    return torch.copysign(q, v)


def _e2m1_codes(q: torch.Tensor) -> torch.Tensor:
    """E2M1 values -> 4-bit codes (bit 3 the sign; magnitudes 0,.5,1,1.5,2,3,4,6 -> 0..7)."""
    a = q.abs()
    mag = torch.where(a < 2.0, a * 2.0, torch.where(a < 4.0, a + 2.0, a * 0.5 + 4.0)).to(torch.uint8)
    return mag | (torch.signbit(q).to(torch.uint8) << 3)


def nvfp4(x: torch.Tensor, global_scale: torch.Tensor | None = None
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[M, K] (K % 16 == 0) -> (packed E2M1 uint8 [M, K/2], e4m3 scales [M, K/16], fp32 global [])."""
    m, k = x.shape
    xf = x.float()
    if global_scale is None:
        gs = _guard(_div_const(xf.abs().amax(), E2M1_MAX * E4M3_MAX))
    else:
        gs = global_scale.float().reshape(())
    blocks = xf.reshape(m, k // NV_BLOCK, NV_BLOCK)
    block_scale = to_e4m3(_div_const(blocks.abs().amax(dim=-1), E2M1_MAX) / gs)
    full = block_scale.float() * gs
    codes = _e2m1_codes(_round_e2m1(blocks / _guard(full)[..., None])).reshape(m, k)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)       # even element in the low nibble
    return packed, block_scale, gs
