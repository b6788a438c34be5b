"""The scaled GEMM calls and the scale layouts torch expects, in one place (probes and kernels share them).

Operands: A is the quantized activation, row-major [M, K]; B is the weight's transpose,
a column-major [K, N] view of the row-major [N, K] checkpoint weight (cuBLASLt multiplies
only row-major by column-major FP8 matrices: seen on the H200 probe).
"""
from __future__ import annotations

import functools

import torch

from oracle.formats import FP8_BLOCK


BLOCK = FP8_BLOCK
#: cuBLAS refused blockwise scaling at M = 1 on the H200 (CUBLAS_STATUS_NOT_SUPPORTED) and
#: accepted M = 16, so blockwise products run on M padded to a multiple of this.
BLOCK_M_MULTIPLE = 16


def tensorwise(a: torch.Tensor, b_t: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
               out_dtype: torch.dtype) -> torch.Tensor:
    """Per-tensor scales: sa, sb fp32 scalars."""
    return torch._scaled_mm(a, b_t, scale_a=sa, scale_b=sb, out_dtype=out_dtype)


def rowwise(a: torch.Tensor, b_t: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
            out_dtype: torch.dtype) -> torch.Tensor:
    """Rowwise scales: sa fp32 [M, 1], sb fp32 [1, N], both contiguous."""
    return torch._scaled_mm(a, b_t, scale_a=sa, scale_b=sb, out_dtype=out_dtype)


def m_major(scale: torch.Tensor) -> torch.Tensor:
    """[M, G] activation group scales laid out M-major (strides (1, M)), as cuBLASLt reads them."""
    m, g = scale.shape
    if scale.stride() == (1, m):
        return scale
    out = torch.empty_strided((m, g), (1, m), dtype=torch.float32, device=scale.device)
    out.copy_(scale)
    return out


def block_weight_scale(weight_scale: torch.Tensor, layout: str) -> torch.Tensor:
    """Checkpoint [N/128, K/128] fp32 -> the [K/128, N/128] scale of B (column-major).

    layout "kblocks": strides (1, K/128); "l4": the K blocks padded to a multiple of 4,
    strides (1, round_up(K/128, 4)) as torch's scaled_mm meta documents. The two agree
    whenever K/128 is a multiple of 4; the runtime probe picks the one this torch accepts.
    """
    nb, kb = weight_scale.shape
    width = kb if layout == "kblocks" else -(-kb // 4) * 4
    padded = torch.zeros(nb, width, dtype=torch.float32, device=weight_scale.device)
    padded[:, :kb] = weight_scale
    return padded[:, :kb].t()


def blockwise(a: torch.Tensor, b_t: torch.Tensor, sa_m_major: torch.Tensor, sb: torch.Tensor,
              out_dtype: torch.dtype) -> torch.Tensor:
    """1x128 activation groups x 128x128 weight blocks (fp32 scales)."""
    return torch._scaled_mm(a, b_t, scale_a=sa_m_major, scale_b=sb, out_dtype=out_dtype)


def swizzle_128x4(scale: torch.Tensor) -> torch.Tensor:
    """[R, C] block scales (1 byte each) -> cuBLAS's tiled layout, flattened.

    cuBLAS "1D block scaling factors layout": rows padded to 128 and columns to 4; each
    128x4 tile is stored as 32 x (4 x 4): element (r, c) of a tile sits at
    (r % 32) * 16 + (r // 32) * 4 + c; tiles run along C first, then along R.
    """
    rows, cols = scale.shape
    rb, cb = -(-rows // 128), -(-cols // 4)
    raw = scale.view(torch.uint8)
    padded = torch.zeros(rb * 128, cb * 4, dtype=torch.uint8, device=scale.device)
    padded[:rows, :cols] = raw
    tiles = padded.view(rb, 4, 32, cb, 4).permute(0, 3, 2, 1, 4)
    return tiles.contiguous().view(-1).view(scale.dtype)


@functools.lru_cache(maxsize=1)
def _functional() -> tuple:
    f = torch.nn.functional
    return f.scaled_mm, f.ScalingType, f.SwizzleType


def mx_blockwise(a: torch.Tensor, b_t: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, recipe: str,
                 out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Block-scaled product through torch.nn.functional.scaled_mm; sa, sb already swizzled.

    recipe "mxfp8": E8M0 scales per 1x32; "nvfp4": E4M3 scales per 1x16 (global scales are
    applied by the caller).
    """
    scaled_mm, scaling, swizzle = _functional()
    kind = scaling.BlockWise1x32 if recipe == "mxfp8" else scaling.BlockWise1x16
    sw = swizzle.SWIZZLE_32_4_4
    return scaled_mm(a, b_t, sa, kind, sb, kind, swizzle_a=sw, swizzle_b=sw, output_dtype=out_dtype)
