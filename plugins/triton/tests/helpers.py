"""Shared by the CPU (interpreter) and GPU tests: checkpoint tensors from oracle-emulation's
quantizers (an independent implementation of each format) and the emulation kernels as reference."""
from __future__ import annotations

import torch

from oracle import LinearLayer, MoELayer
from oracle.catalog import Mode
from oracle_emulation.formats import codec_for
from oracle_emulation.linear import EmulationLinear

def quantize(fmt: str, w: torch.Tensor, group: int = 128, symmetric: bool = False) -> dict:
    codec = codec_for(fmt)
    if fmt == "int4":
        q = codec.quantize(w, fmt, group_size=group, symmetric=symmetric)
    else:
        q = codec.quantize(w, fmt)
    return {k: v for k, v in q.items() if v is not None}


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def linear_pair(fmt: str, n: int, k: int, mode: str, act: str, params: dict | None = None, *,
                device="cpu", group=128, symmetric=False, bias=False, input_scale=None):
    """(triton kernel, emulation kernel), both holding the same checkpoint tensors."""
    from oracle_triton.linear import TritonLinear

    layer = LinearLayer(name=f"{fmt}-{n}x{k}", in_features=k, out_features=n, weight_format=fmt,
                        group_size=group if fmt == "int4" else None, has_bias=bias)
    tensors = quantize(fmt, torch.randn(n, k, device=device) * 0.05, group, symmetric)
    if bias:
        tensors["bias"] = torch.randn(n, device=device)
    if input_scale is not None:
        tensors["input_scale"] = input_scale
    t = TritonLinear(layer, Mode(weight=fmt, activation=act, name=mode, params=params or {}), None)
    t.process_weights(**tensors)
    e = EmulationLinear(layer, t.mode, None)
    e.process_weights(**tensors)
    return t, e
