"""Helpers shared by the emulation tests: spec loading, building kernels, quantizing weights."""
from __future__ import annotations

from typing import Any

import torch

from oracle.catalog import load_kernel_file
from oracle.sources import load_yaml_file

from oracle_emulation.formats import codec_for
from oracle_emulation.plugin import KERNELS_FILE

LINEAR_MODES = [
    ("fp8_tensor", "fp8"), ("fp8_tensor", "bf16"), ("fp8_channel", "fp8"), ("fp8_channel", "bf16"),
    ("fp8_block", "fp8"), ("fp8_block", "bf16"), ("mxfp8", "mxfp8"), ("mxfp8", "bf16"),
    ("nvfp4", "nvfp4"), ("nvfp4", "mxfp8"), ("nvfp4", "bf16"),
    ("mxfp4", "mxfp4"), ("mxfp4", "mxfp8"), ("mxfp4", "bf16"),
    ("int4", "bf16"), ("q8_0", "bf16"), ("iq2_xs", "bf16"), ("iq2_xxs", "bf16"),
]
MOE_MODES = [
    ("mxfp4", "mxfp8"), ("mxfp4", "bf16"), ("nvfp4", "nvfp4"), ("nvfp4", "mxfp8"), ("nvfp4", "bf16"),
    ("fp8_block", "fp8"), ("fp8_block", "bf16"), ("fp8_tensor", "fp8"), ("fp8_tensor", "bf16"),
    ("fp8_channel", "fp8"), ("fp8_channel", "bf16"), ("mxfp8", "mxfp8"), ("mxfp8", "bf16"),
    ("int4", "bf16"), ("q8_0", "bf16"), ("iq2_xs", "bf16"), ("iq2_xxs", "bf16"),
]


def load_specs() -> dict:
    data = load_yaml_file(KERNELS_FILE)
    return {s.name: s for s in load_kernel_file(data, plugin="emulation", what=str(KERNELS_FILE))}


def mode_of(spec: Any, weight: str, activation: str) -> Any:
    return next(m for m in spec.modes if m.weight == weight and m.activation == activation)


def quantize(w: torch.Tensor, fmt: str, **kw: Any) -> dict[str, torch.Tensor]:
    """Checkpoint tensors for `w` [.., N, K] in `fmt` (int4: symmetric groups of 32 unless told)."""
    codec = codec_for(fmt)
    if fmt == "int4":
        kw.setdefault("group_size", 32)
    return codec.quantize(w, fmt, **kw)


def linear_tensors(q: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in q.items() if v is not None}


def moe_tensors(q13: dict, q2: dict) -> dict[str, torch.Tensor]:
    out = {"w13": q13["weight"], "w2": q2["weight"]}
    for role, suffix in (("weight_scale", "_scale"), ("weight_global_scale", "_global_scale")):
        if q13.get(role) is not None:
            out["w13" + suffix] = q13[role]
            out["w2" + suffix] = q2[role]
    return out
