"""Checkpoint tensors of any weight format -> one dequantized float32 matrix per weight.

The packed shape each format must have is checked here first, against the layer's
logical [N, K], so a wrong tensor is reported with the shape it should have had.
"""
from __future__ import annotations

import os
import warnings
from typing import Any

import torch

from oracle.errors import TensorError
from oracle.formats import CODEC_BLOCKS
from oracle.memory import map_large_blocks
from oracle.tensors import check_dtype, check_finite, check_shape, require, shape_of

from .formats import codec_for


def packed_shape(fmt: str, lead: list[int], n: int, k: int) -> tuple[list[int], str]:
    """The stored shape of a [.., N, K] weight in format `fmt`, and why."""
    if fmt in ("fp8_tensor", "fp8_channel", "fp8_block", "mxfp8"):
        return lead + [n, k], "E4M3, one byte per weight"
    if fmt == "int8":
        return lead + [n, k], "int8, one byte per weight"
    if fmt in ("nvfp4", "mxfp4"):
        return lead + [n, k // 2], "two E2M1 codes per byte along K"
    if fmt == "int4":
        return lead + [k // 8, n], "GPTQ qweight: 8 nibbles per int32 along K, transposed"
    if fmt in CODEC_BLOCKS:
        block, nbytes = CODEC_BLOCKS[fmt]
        return lead + [n, k // block, nbytes], f"GGML blocks of {block} weights in {nbytes} bytes"
    raise TensorError("weight", "a quantized weight format", repr(fmt))


def dequantize_weight(fmt: str, tensors: dict[str, Any], names: dict[str, str],
                      lead: list[int], n: int, k: int) -> torch.Tensor:
    """Validate and dequantize; `names` maps roles (weight, scale, global, zero) to tensor names."""
    wname = names["weight"]
    weight = require(wname, tensors.get("weight"), f"for {fmt} weights")
    shape, why = packed_shape(fmt, lead, n, k)
    check_shape(wname, weight, shape, why)
    codec = codec_for(fmt)
    if fmt in ("q8_0", "iq2_xs", "iq2_xxs"):
        return codec.dequantize(weight, fmt, wname)
    scale = require(names["scale"], tensors.get("scale"), f"for {fmt} weights")
    if fmt in ("fp8_tensor", "fp8_channel", "fp8_block", "mxfp8", "mxfp4", "int8"):
        return codec.dequantize(weight, scale, fmt, (wname, names["scale"]))
    if fmt == "nvfp4":
        return codec.dequantize(weight, scale, tensors.get("global"), fmt, (wname, names["scale"], names["global"]))
    if fmt == "int4":
        return codec.dequantize(weight, scale, tensors.get("zero"), fmt,
                                (wname, names["scale"], names.get("zero", "weight_zero_point")))
    raise TensorError("weight", "a quantized weight format", repr(fmt))


def check_vector(name: str, t: Any, expected: list[int], what: str) -> torch.Tensor:
    check_dtype(name, t, (torch.float32, torch.bfloat16, torch.float16), what)
    check_shape(name, t, expected, what)
    check_finite(name, t)
    return t


def activation_scale(name: str, t: Any, experts: int | None = None) -> torch.Tensor | None:
    """A per-tensor activation scale ([] or [1], or [E] for MoE, reduced with max:
    activations are quantized once before dispatch, so one scale must serve all experts)."""
    if t is None:
        return None
    check_dtype(name, t, (torch.float32,), "activation scales are fp32")
    allowed = [[], [1]] + ([[experts]] if experts else [])
    if shape_of(t) not in allowed:
        raise TensorError(name, "shape " + " or ".join(str(a) for a in allowed) + " (one scale per tensor"
                          + (" or per expert" if experts else "") + ")", str(shape_of(t)))
    check_finite(name, t)
    if bool((t <= 0).any()):
        raise TensorError(name, "positive scales", str(t.flatten().tolist()[:4]))
    return t.float().max().reshape(())


def check_input(name: str, x: Any, last: int, weight: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise TensorError(name, "a torch.Tensor", type(x).__name__)
    check_dtype(name, x, (torch.bfloat16, torch.float16, torch.float32), "floating-point activations")
    if x.dim() == 0 or x.shape[-1] != last:
        raise TensorError(name, f"last dimension {last}", f"shape {shape_of(x)}")
    if x.device != weight.device:
        raise TensorError(name, f"a tensor on {weight.device} (where the processed weights are)", str(x.device))


#: Where the emulation keeps its weights. "resident" (the default): dequantized once, in the layer's
#: dtype (2 bytes a weight in BF16), so a call is one BF16 GEMM. "packed": the checkpoint's tensors
#: (their own bytes: half a byte a weight for 4-bit formats) and a dequantization inside every call,
#: so memory stays at the quantized size plus one layer's matrix while it runs, and each call pays a
#: dequantization (large blocks are then mapped and unmapped: oracle.memory.map_large_blocks, process-wide,
#: so freed matrices leave the resident set). Resident is the default because the emulation is the testing path, where call
#: speed is what tests wait for; `packed` is for loading a large checkpoint on a machine whose memory
#: holds the quantized model but not its BF16 copy (docs/user-guide.md, "Memory").
WEIGHTS_ENV = "ORACLE_EMULATION_WEIGHTS"
WEIGHTS_MODES = ("resident", "packed")


def weights_mode() -> str:
    value = os.environ.get(WEIGHTS_ENV, "") or "resident"
    if value not in WEIGHTS_MODES:
        warnings.warn(f"{WEIGHTS_ENV}={value!r} is not one of {', '.join(WEIGHTS_MODES)}; using resident",
                      stacklevel=3)
        return "resident"
    return value


class StoredWeight:
    """One weight of a layer, dequantized to `dtype` now (which validates it) and then either kept
    (resident) or dropped and made again from the checkpoint tensors on each `get()` (packed)."""

    def __init__(self, fmt: str, tensors: dict[str, Any], names: dict[str, str], lead: list[int], n: int, k: int,
                 dtype: Any, mode: str | None = None):
        self.mode = mode or weights_mode()
        if self.mode == "packed":     # each call's matrix is made and freed: map it, so freeing returns it
            map_large_blocks()
        matrix = dequantize_weight(fmt, tensors, names, lead, n, k).to(dtype).contiguous()
        self.device, self.shape = matrix.device, tuple(matrix.shape)
        self._matrix: torch.Tensor | None = matrix if self.mode == "resident" else None
        self._recipe = None if self.mode == "resident" else (
            fmt, {role: t for role, t in tensors.items() if t is not None}, names, lead, n, k, dtype)

    def get(self) -> torch.Tensor:
        if self._matrix is not None:
            return self._matrix
        fmt, tensors, names, lead, n, k, dtype = self._recipe  # type: ignore[misc]
        return dequantize_weight(fmt, tensors, names, lead, n, k).to(dtype)

    def resident_bytes(self) -> int:
        """What this weight keeps in memory between calls."""
        if self._matrix is not None:
            return self._matrix.numel() * self._matrix.element_size()
        return sum(t.numel() * t.element_size() for t in self._recipe[1].values())  # type: ignore[index]

