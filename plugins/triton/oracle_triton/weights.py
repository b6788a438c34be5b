"""Checkpoint tensors -> the packed tensors the kernels read, checked once.

Shapes and dtypes are those of oracle.kernel's table (a leading expert dim for MoE).
Weights keep their packed bytes (FP8/E8M0/E4M3 are viewed as uint8, nothing is expanded);
a wrong tensor is named with the shape or dtype it should have had.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from oracle.errors import TensorError

from .formats import Layout, layout_for

FP8 = torch.float8_e4m3fn
E8M0 = tuple(d for d in (torch.uint8, getattr(torch, "float8_e8m0fnu", None)) if d is not None)


def _shape(t: Any) -> list[int]:
    return [int(s) for s in t.shape]


def check(name: str, t: Any, dtypes: tuple, shape: list[int], why: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TensorError(name, f"a torch.Tensor ({why})", "None" if t is None else type(t).__name__)
    if t.dtype not in dtypes:
        names = " or ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TensorError(name, f"dtype {names} ({why})", str(t.dtype).replace("torch.", ""))
    if _shape(t) != shape:
        raise TensorError(name, f"shape {shape} ({why})", str(_shape(t)))
    return t


def finite_positive(name: str, values: torch.Tensor, allow_zero: bool = True) -> None:
    v = values.float()
    bad = ~torch.isfinite(v) | ((v < 0) if allow_zero else (v <= 0))
    if bool(bad.any()):
        idx = [int(i) for i in bad.nonzero()[0].tolist()]
        raise TensorError(name, "finite, non-negative scales" if allow_zero else "finite, positive scales",
                          f"{float(v[tuple(idx)])} at index {idx}")


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
    if fmt != "int4" and z is not None:
        raise TensorError(zn, f"None ({fmt} weights are symmetric)", f"a tensor of shape {_shape(z)}")
    if fmt in ("fp8_tensor", "fp8_channel", "fp8_block"):
        check(wn, w, (FP8,), lead + [n, k], "E4M3, one byte per weight")
        if fmt == "fp8_tensor":
            sh = [[], [1]] + ([lead, lead + [1]] if lead else [])
            if not isinstance(s, torch.Tensor) or _shape(s) not in sh:
                raise TensorError(sn, f"an fp32 tensor of shape {' or '.join(map(str, sh))} (one scale per tensor)",
                                  "None" if s is None else str(_shape(s)))
            check(sn, s, (torch.float32,), _shape(s), "one fp32 scale per tensor")
            scale = s.reshape(lead + [1]) if lead else s.reshape(1)
        elif fmt == "fp8_channel":
            if isinstance(s, torch.Tensor) and _shape(s) == lead + [n, 1]:
                s = s.squeeze(-1)
            scale = check(sn, s, (torch.float32,), lead + [n], "one fp32 scale per output channel")
        else:
            scale = check(sn, s, (torch.float32,), lead + [-(-n // 128), -(-k // 128)],
                          "one fp32 scale per 128x128 block, [ceil(N/128), ceil(K/128)]")
        finite_positive(sn, scale)
        return Packed(layout_for(fmt, n, k), w.contiguous().view(torch.uint8), scale.contiguous().float(), None, None)
    if fmt in ("mxfp4", "nvfp4"):
        check(wn, w, (torch.uint8,), lead + [n, k // 2], "two E2M1 codes per byte along K, low nibble = even k")
        if fmt == "mxfp4":
            check(sn, s, E8M0, lead + [n, k // 32], "one E8M0 byte per 32 weights along K")
            if bool((s.view(torch.uint8) == 0xFF).any()):
                raise TensorError(sn, "E8M0 scales (byte 0xFF is NaN)", "a 0xFF byte")
            return Packed(layout_for(fmt, n, k), w.contiguous(), s.contiguous().view(torch.uint8), None, None)
        check(sn, s, (FP8,), lead + [n, k // 16], "one E4M3 scale per 16 weights along K")
        finite_positive(sn, s)
        sh = [[], [1]] + ([lead, lead + [1]] if lead else [])
        if not isinstance(g, torch.Tensor) or _shape(g) not in sh or g.dtype != torch.float32:
            raise TensorError(gn, f"an fp32 tensor of shape {' or '.join(map(str, sh))} (ModelOpt weight_scale_2)",
                              "None" if g is None else f"{str(g.dtype).replace('torch.', '')} {_shape(g)}")
        finite_positive(gn, g, allow_zero=False)
        gs = (g.reshape(lead) if lead and g.numel() > 1 else g.reshape(-1)[:1].expand(lead or [1])).contiguous()
        return Packed(layout_for(fmt, n, k), w.contiguous(), s.contiguous().view(torch.uint8), None, gs.float())
    if fmt == "int4":
        check(wn, w, (torch.int32,), lead + [k // 8, n], "GPTQ qweight: 8 nibbles per int32 along K, [K/8, N]")
        if not isinstance(s, torch.Tensor) or s.dim() != len(lead) + 2 or _shape(s)[-1] != n or \
                s.shape[-2] == 0 or k % s.shape[-2]:
            raise TensorError(sn, f"shape {lead + ['K/group', n]} (fp16 scales per group along K)",
                              "None" if s is None else str(_shape(s)))
        groups = int(s.shape[-2])
        group = k // groups
        if group_size is not None and group != group_size:
            raise TensorError(sn, f"shape {lead + [k // group_size, n]} (group_size {group_size})", str(_shape(s)))
        if group not in (32, 64, 128):
            raise TensorError(sn, "a group size of 32, 64 or 128 along K", f"group size {group}")
        check(sn, s, (torch.float16, torch.bfloat16, torch.float32), lead + [groups, n], "per-group scales")
        finite_positive(sn, s)
        layout = layout_for(fmt, n, k, group)
        if z is None:
            layout = dataclasses.replace(layout, stride_zk=0)
        else:
            check(zn, z, (torch.int32,), lead + [groups, n // 8], "GPTQ qzeros: 8 zero points per int32 along N")
            z = z.contiguous()
        return Packed(layout, w.contiguous(), s.contiguous(), z, None)
    raise TensorError(wn, "a weight format oracle-triton serves (fp8_*, mxfp4, nvfp4, int4)", repr(fmt))
