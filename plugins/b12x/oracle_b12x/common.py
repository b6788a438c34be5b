"""Pieces every b12x kernel class shares: input checks, FP4 canonicalisation, stable
packed storage across reloads, plan capacities and the capture guard.

torch is imported lazily inside functions, so importing this module stays cheap.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Hashable, Iterable, Sequence

from oracle import tensors
from oracle.errors import CaptureError, TensorError
from oracle.warmup import is_capturing


def check_tensor(owner: str, name: str, value: Any, *, dtypes: Sequence[Any], shape: Sequence[int] | None,
                 what: str) -> Any:
    """`value` must be a tensor of one of `dtypes` and exactly `shape`; else one TensorError naming `owner`."""
    return tensors.check_tensor(name, value, dtypes=dtypes, shapes=None if shape is None else [shape], why=what,
                                owner=owner)


def check_scalar(owner: str, name: str, value: Any, what: str, *, positive: bool = True) -> Any:
    """A one-element fp32 tensor (or a Python number), finite and (by default) > 0."""
    import math

    import torch

    tensors.require(name, value, f"for {what}", owner=owner)
    tensor = value if isinstance(value, torch.Tensor) else torch.tensor(float(value))
    if tensor.numel() != 1:
        raise TensorError(name, f"one value ({what})", f"shape {list(tensor.shape)}", owner=owner)
    number = float(tensor.detach().float().cpu().reshape(()))
    if not math.isfinite(number) or (positive and number <= 0) or number < 0:
        raise TensorError(name, f"a finite {'positive' if positive else 'non-negative'} value ({what})", str(number),
                          owner=owner)
    return tensor.detach().to(torch.float32).reshape(())


def per_expert(owner: str, name: str, value: Any, experts: int, what: str):
    """A scalar or [E] fp32 scale -> [E] fp32 (b12x takes one value per expert)."""
    import torch

    tensors.require(name, value, f"for {what}", owner=owner)
    tensor = value if isinstance(value, torch.Tensor) else torch.tensor(float(value))
    tensor = tensor.detach().to(torch.float32)
    if tensor.numel() == 1:
        return tensor.reshape(1).expand(experts).contiguous()
    if tuple(tensor.shape) != (experts,):
        raise TensorError(name, f"one value or [{experts}] ({what})", f"shape {list(tensor.shape)}", owner=owner)
    if not bool(torch.isfinite(tensor).all()) or bool((tensor <= 0).any()):
        raise TensorError(name, f"finite positive values ({what})", "a NaN, infinite or non-positive value",
                          owner=owner)
    return tensor.contiguous()


def canonicalize_fp4_zero_signs_(packed):
    """Clear the sign of E2M1 negative zeros (nibble 0b1000 -> 0b0000) in place, both nibbles.

    -0 and +0 are the same value, but b12x's packed paths assume canonical zeros (as the
    best-known engine's integration does before handing weights over).
    """
    import torch

    if packed.dtype != torch.uint8:
        raise TypeError("FP4 values must be packed uint8")
    low_negzero = (packed & 0x0F) == 0x08
    high_negzero = (packed & 0xF0) == 0x80
    packed.sub_(low_negzero.to(torch.uint8) * 0x08 + high_negzero.to(torch.uint8) * 0x80)
    return packed


def swap_gate_up(tensor, rows_per_half: int):
    """[gate; up] rows -> [up; gate] along dim 1 (per expert): the checkpoint order is gate first."""
    import torch

    return torch.cat((tensor[:, rows_per_half:], tensor[:, :rows_per_half]), dim=1).contiguous()


def same_layout(current: Any, replacement: Any) -> bool:
    """True when `replacement` has exactly `current`'s packed layout (recursively)."""
    import torch

    if type(current) is not type(replacement):
        return False
    if isinstance(current, torch.Tensor):
        return (current.shape == replacement.shape and current.stride() == replacement.stride()
                and current.dtype == replacement.dtype and current.device == replacement.device)
    if dataclasses.is_dataclass(current) and not isinstance(current, type):
        return all(same_layout(getattr(current, f.name), getattr(replacement, f.name))
                   for f in dataclasses.fields(current))
    if isinstance(current, (tuple, list)):
        return len(current) == len(replacement) and all(map(same_layout, current, replacement))
    if isinstance(current, dict):
        return current.keys() == replacement.keys() and all(same_layout(current[k], replacement[k]) for k in current)
    return current == replacement


def _copy_into(current: Any, replacement: Any) -> None:
    import torch

    if isinstance(current, torch.Tensor):
        if current.data_ptr() != replacement.data_ptr():
            current.copy_(replacement)
    elif dataclasses.is_dataclass(current) and not isinstance(current, type):
        for f in dataclasses.fields(current):
            _copy_into(getattr(current, f.name), getattr(replacement, f.name))
    elif isinstance(current, (tuple, list)):
        for a, b in zip(current, replacement):
            _copy_into(a, b)
    elif isinstance(current, dict):
        for k in current:
            _copy_into(current[k], replacement[k])


def reuse_packed_storage(current: Any, replacement: Any) -> tuple[Any, bool]:
    """Keep `current`'s storage when a reload produces the same layout (copy in place), so
    CUDA graphs captured over it stay valid. Returns (object to keep, storage_changed)."""
    import torch

    if current is None or not same_layout(current, replacement):
        return replacement, current is not None
    with torch.no_grad():
        _copy_into(current, replacement)
    return current, False


def capacity(rows: int) -> int:
    """The power-of-two row capacity a plan for `rows` tokens is made for (b12x does the same)."""
    return 1 << (max(1, int(rows)) - 1).bit_length()


def capacities(token_counts: Iterable[int]) -> list[int]:
    return sorted({capacity(int(m)) for m in token_counts if int(m) > 0})


def refuse_during_capture(what: str) -> None:
    """Planning, packing or scratch allocation must happen before CUDA-graph capture."""
    if is_capturing():
        raise CaptureError(f"{what} during CUDA-graph capture: prepare weights, plan and warm up "
                           "(oracle.warmup) before capturing")


class PlanCache:
    """b12x plans shared across layers by signature, and the signatures that have run once.

    Planning allocates (scratch, workspaces) and may compile, so it must happen before
    CUDA-graph capture; during capture only a plan that has already run may be used.
    One instance per kernel family (linear, MoE, embedding).
    """

    def __init__(self) -> None:
        self.plans: dict[Hashable, Any] = {}
        self.warmed: set[Hashable] = set()

    def get(self, key: Hashable, make: Callable[[], Any], *, owner: str, what: str, running: bool = False) -> Any:
        """The plan for `key`, made by `make()` once; `running` marks it warmed after use."""
        plan = self.plans.get(key)
        if running and is_capturing() and (plan is None or key not in self.warmed):
            raise CaptureError(f"{owner}: no warmed b12x plan for {what} during CUDA-graph capture; "
                               "include this token count in oracle.warmup before capturing")
        if plan is None:
            refuse_during_capture(f"{owner}: planning b12x for {what}")
            plan = self.plans[key] = make()
        if running:
            self.warmed.add(key)
        return plan

    def mark_warmed(self, key: Hashable) -> None:
        self.warmed.add(key)

    def forget_warmed(self, keep: Callable[[Hashable], bool]) -> None:
        """Un-warm the signatures `keep` rejects (their launches may hold storage that moved)."""
        self.warmed = {k for k in self.warmed if keep(k)}

    def clear(self) -> None:
        self.plans.clear()
        self.warmed.clear()


def release_sources(tensors: Iterable[Any]) -> int:
    """Empty the caller's nn.Parameters b12x said it no longer needs; returns how many.

    Plain tensors are left alone (the caller owns them; this kernel just drops its references).
    """
    import torch

    released = 0
    for t in tensors:
        if isinstance(t, torch.nn.Parameter) and t.numel():
            t.data = torch.empty(0, dtype=t.dtype, device=t.device)
            released += 1
    return released
