"""Joining kernel-layout tensors: fused parts along N, gate/up interleaving, experts along E.

Works on dicts keyed by the linear `process_weights` names (weight, weight_scale, ...),
already in the kernel's layout (see layouts.FUSION for the rules). torch is imported
by the caller's tensors only.
"""
from __future__ import annotations

from typing import Any

from .packing import pack_nibbles, to_e4m3, unpack_nibbles
from .source import CheckpointError

GGML = ("q8_0", "iq2_xs", "iq2_xxs")
#: linear argument -> MoE argument, for w13 (FC1) and w2 (FC2)
MOE_ARGS = {"weight": "{w}", "weight_scale": "{w}_scale", "weight_global_scale": "{w}_global_scale",
            "input_scale": "{w}_input_scale", "input_global_scale": "{w}_input_scale",
            "weight_zero_point": "{w}_zero_point", "bias": "{w}_bias"}


def row_dim(fmt: str, arg: str) -> int | None:
    """The dimension along which `arg` grows with N (None: one value per tensor)."""
    if arg == "bias" or fmt == "int4":
        return -1
    if arg == "weight":
        return -3 if fmt in GGML else -2
    if arg == "weight_scale":
        return {"fp8_tensor": None, "fp8_channel": -1}.get(fmt, -2)
    return None


def join_rows(fmt: str, parts: list[dict[str, Any]], names: list[str], *, interleave: bool = False) -> dict[str, Any]:
    """Parts [N_i, ...] -> one [sum N_i, ...] (or, interleaved, rows a0 b0 a1 b1 ...)."""
    import torch

    if len(parts) == 1:
        return dict(parts[0])
    keys = set(parts[0])
    for p, name in zip(parts[1:], names[1:]):
        if set(p) != keys:
            missing = sorted(keys ^ set(p))
            raise CheckpointError(f"fused parts disagree on tensors {missing}: {', '.join(names)} must all carry them",
                                  tensor=name)
    parts = _common_scales(fmt, parts)
    if fmt == "fp8_block" and (interleave or any(p["weight"].shape[-2] % 128 for p in parts[:-1])):
        raise CheckpointError("fp8_block parts must each have a multiple of 128 rows and cannot be interleaved "
                              "(a 128-row scale block would straddle two parts)", tensor=names[0])
    out: dict[str, Any] = {}
    for key in keys:
        tensors = [p[key] for p in parts]
        dim = row_dim(fmt, key)
        if dim is None:                                  # per-tensor scalars: already made common
            out[key] = tensors[0]
        elif key == "weight_zero_point":                  # int4 zero points: 8 per int32 along N
            if interleave:
                n = [unpack_nibbles(t, -1) for t in tensors]
                out[key] = pack_nibbles(torch.stack(n, dim=-1).flatten(-2, -1), -1)
            else:
                out[key] = torch.cat(tensors, dim=-1)
        elif interleave:
            if len({t.shape[dim] for t in tensors}) != 1:
                raise CheckpointError("interleaved gate/up parts must have the same number of rows", tensor=names[0])
            out[key] = torch.stack(tensors, dim=dim).flatten(dim - 1, dim)
        else:
            out[key] = torch.cat(tensors, dim=dim)
    return out


def _common_scales(fmt: str, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-tensor scales that differ between parts -> one shared value (vLLM's choice: the largest)."""
    import torch

    out = [dict(p) for p in parts]
    for key in ("input_scale", "input_global_scale"):
        if key in out[0]:
            top = torch.stack([p[key].float().reshape(()) for p in out]).max()
            for p in out:
                p[key] = top
    if fmt == "fp8_tensor":
        top = torch.stack([p["weight_scale"].reshape(()) for p in out]).max()
        for p in out:
            if not torch.equal(p["weight_scale"].reshape(()), top):
                p["weight"] = to_e4m3(p["weight"].float() * (p["weight_scale"].float() / top))
            p["weight_scale"] = top
    if fmt == "nvfp4":
        top = torch.stack([p["weight_global_scale"].reshape(()) for p in out]).max()
        for p in out:
            g = p["weight_global_scale"].reshape(())
            if not torch.equal(g, top):
                p["weight_scale"] = to_e4m3(p["weight_scale"].float() * (g / top))
            p["weight_global_scale"] = top
    return out


def stack_experts(fmt: str, experts: list[dict[str, Any]], which: str) -> dict[str, Any]:
    """Per-expert kernel-layout dicts -> MoE arguments with a leading E (which: 'w13' or 'w2')."""
    import torch

    out = {}
    for key in experts[0]:
        out[MOE_ARGS[key].format(w=which)] = torch.stack([e[key] for e in experts])
    return out
