"""What FlashInfer's SM12x kernels (backend flashinfer_b12x) share: lazy access to flashinfer and
the 128x4 block-scale layout its FP4 kernels read.

torch and flashinfer are imported inside functions, so importing this module stays cheap.
"""
from __future__ import annotations

import importlib
from typing import Any

from .errors import B12xUnavailableError


def flashinfer(module: str = "flashinfer") -> Any:
    """Import a flashinfer module, or one clear error saying what is missing."""
    try:
        return importlib.import_module(module)
    except Exception as exc:  # a missing or broken install must surface as one clear error
        raise B12xUnavailableError(f"{module} failed to import ({type(exc).__name__}: {exc}); FlashInfer's "
                                   "SM12x kernels need flashinfer-python 0.7.2 (pip install 'flashinfer-python==0.7.2')"
                                   ) from None


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def swizzle_128x4(scales: Any) -> Any:
    """E4M3 block scales [..., M, K/16] -> the 128x4-interleaved layout of NVFP4 GEMMs, padded to
    M % 128 and (K/16) % 4 with zeros, returned as [..., M_pad, Kg_pad] (the same bytes reshaped).

    Scale (m, g) of each matrix lands at byte ((m // 128) * (Kg_pad // 4) + g // 4) * 512
    + (m % 32) * 16 + ((m % 128) // 32) * 4 + g % 4: tiles of 128 rows x 4 groups, rows
    interleaved in four 32-row quarters (cuBLAS "1D block scaling factors layout").
    """
    import torch

    *lead, m, kg = scales.shape
    mp, kp = round_up(m, 128), round_up(kg, 4)
    flat = scales.reshape(-1, m, kg)
    padded = torch.zeros((flat.shape[0], mp, kp), dtype=scales.dtype, device=scales.device)
    padded[:, :m, :kg] = flat
    tiles = padded.view(flat.shape[0], mp // 128, 4, 32, kp // 4, 4).permute(0, 1, 4, 3, 2, 5)
    return tiles.contiguous().reshape(*lead, mp, kp)
