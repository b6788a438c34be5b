"""Checkpoint tensors -> the packed tensors the kernels read, checked once.

Shapes and dtypes are those of oracle.kernel's table (a leading expert dim for MoE).
Weights keep their packed bytes (FP8/E8M0/E4M3 are viewed as uint8, nothing is expanded);
a wrong tensor is named with the shape or dtype it should have had, by oracle.tensors' checks
(every plugin words a bad tensor the same way).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from oracle.errors import TensorError
from oracle.formats import FP8_BLOCK, MX_BLOCK, NV_BLOCK
from oracle.tensors import check_scales, check_tensor, forbid, shape_of

from .formats import Layout, layout_for, words_layout

FP8 = torch.float8_e4m3fn
E8M0 = tuple(d for d in (torch.uint8, getattr(torch, "float8_e8m0fnu", None)) if d is not None)


def _per_tensor(lead: list[int]) -> list[list[int]]:
    """The shapes one scale per tensor (per expert, with a leading [E]) may come in."""
    return [[], [1]] + ([lead, lead + [1]] if lead else [])


@dataclasses.dataclass
class Packed:
    """Device tensors of one weight (per expert when lead = [E]) and its layout."""

    layout: Layout
    weight: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor | None
    global_scale: torch.Tensor | None

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.weight, self.scale, self.zero, self.global_scale)
                   if t is not None)


def pack(fmt: str, names: dict[str, str], tensors: dict[str, Any], lead: list[int], n: int, k: int,
         group_size: int | None) -> Packed:
    """Validate the checkpoint tensors of a [*lead, N, K] weight in `fmt` and lay them out."""
    w, s, z, g = (tensors.get(r) for r in ("weight", "scale", "zero", "global"))
    wn, sn, zn, gn = (names[r] for r in ("weight", "scale", "zero", "global"))
    if fmt != "int4":
        forbid(zn, z, f"{fmt} weights are symmetric")
    if fmt in ("fp8_tensor", "fp8_channel", "fp8_block"):
        check_tensor(wn, w, dtypes=(FP8,), shapes=[lead + [n, k]], why="E4M3, one byte per weight")
        if fmt == "fp8_tensor":
            check_tensor(sn, s, dtypes=(torch.float32,), shapes=_per_tensor(lead), why="one fp32 scale per tensor")
            scale = s.reshape(lead + [1]) if lead else s.reshape(1)
        elif fmt == "fp8_channel":
            if isinstance(s, torch.Tensor) and shape_of(s) == lead + [n, 1]:
                s = s.squeeze(-1)
            scale = check_tensor(sn, s, dtypes=(torch.float32,), shapes=[lead + [n]],
                                 why="one fp32 scale per output channel")
        else:
            blocks = [-(-n // FP8_BLOCK), -(-k // FP8_BLOCK)]
            scale = check_tensor(sn, s, dtypes=(torch.float32,), shapes=[lead + blocks],
                                 why="one fp32 scale per 128x128 block, [ceil(N/128), ceil(K/128)]")
        check_scales(sn, scale, sign="non-negative")
        return Packed(layout_for(fmt, n, k), w.contiguous().view(torch.uint8), scale.contiguous().float(), None, None)
    if fmt == "bf16":
        check_tensor(wn, w, dtypes=(torch.bfloat16,), shapes=[lead + [n, k]], why="unquantized BF16 weights")
        unit = torch.ones(1, dtype=torch.float32, device=w.device)      # no scales: a pointer never read
        return Packed(layout_for(fmt, n, k), w.contiguous(), unit, None, None)
    if fmt in ("mxfp4", "nvfp4"):
        check_tensor(wn, w, dtypes=(torch.uint8,), shapes=[lead + [n, k // 2]],
                     why="two E2M1 codes per byte along K, low nibble = even k")
        if fmt == "mxfp4":
            check_tensor(sn, s, dtypes=E8M0, shapes=[lead + [n, k // MX_BLOCK]],
                         why="one E8M0 byte per 32 weights along K")
            if bool((s.view(torch.uint8) == 0xFF).any()):
                raise TensorError(sn, "E8M0 scales (byte 0xFF is NaN)", "a 0xFF byte")
            return Packed(layout_for(fmt, n, k), w.contiguous(), s.contiguous().view(torch.uint8), None, None)
        check_tensor(sn, s, dtypes=(FP8,), shapes=[lead + [n, k // NV_BLOCK]],
                     why="one E4M3 scale per 16 weights along K")
        check_scales(sn, s, sign="non-negative")
        check_tensor(gn, g, dtypes=(torch.float32,), shapes=_per_tensor(lead), why="ModelOpt weight_scale_2")
        check_scales(gn, g, sign="positive")
        gs = (g.reshape(lead) if lead and g.numel() > 1 else g.reshape(-1)[:1].expand(lead or [1])).contiguous()
        return Packed(layout_for(fmt, n, k), w.contiguous(), s.contiguous().view(torch.uint8), None, gs.float())
    if fmt == "int4":
        check_tensor(wn, w, dtypes=(torch.int32,), shapes=[lead + [k // 8, n]],
                     why="GPTQ qweight: 8 nibbles per int32 along K, [K/8, N]")
        if not isinstance(s, torch.Tensor) or s.dim() != len(lead) + 2 or shape_of(s)[-1] != n or \
                s.shape[-2] == 0 or k % s.shape[-2]:
            raise TensorError(sn, f"shape {lead + ['K/group', n]} (fp16 scales per group along K)",
                              "None" if s is None else str(shape_of(s)))
        groups = int(s.shape[-2])
        group = k // groups
        if group_size is not None and group != group_size:
            raise TensorError(sn, f"shape {lead + [k // group_size, n]} (group_size {group_size})", str(shape_of(s)))
        if group not in (32, 64, 128):
            raise TensorError(sn, "a group size of 32, 64 or 128 along K", f"group size {group}")
        check_tensor(sn, s, dtypes=(torch.float16, torch.bfloat16, torch.float32), shapes=[lead + [groups, n]],
                     why="per-group scales")
        check_scales(sn, s, sign="non-negative")
        layout = layout_for(fmt, n, k, group)
        if z is None:
            layout = dataclasses.replace(layout, stride_zk=0)
        else:
            check_tensor(zn, z, dtypes=(torch.int32,), shapes=[lead + [groups, n // 8]],
                         why="GPTQ qzeros: 8 zero points per int32 along N")
            z = z.contiguous()
        return Packed(layout, w.contiguous(), s.contiguous(), z, None)
    raise TensorError(wn, "a weight format oracle-triton serves (fp8_*, mxfp4, nvfp4, int4; bf16 in the fused MoE)", repr(fmt))


def repack_words(fmt: str, packed: Packed, n: int, k: int) -> Packed:
    """A dense MXFP4 / NVFP4 weight [N, K/2] (bytes, low nibble = even k) in GPTQ's word layout:
    each row's bytes read as little-endian int32 words (8 codes in k order, the low nibble first),
    transposed to [K/8, N]; the group scales to [K/group, N]. Same bytes, no expansion: the one-row
    GEMV reads it as INT4's (formats.words_layout says why). Needs K a multiple of 8; the caller
    keeps the checkpoint layout otherwise."""
    w = packed.weight.view(torch.int32).t().contiguous()
    s = packed.scale.t().contiguous()
    return Packed(words_layout(fmt, n, k), w, s, None, packed.global_scale)
