"""One error type for bad tensors: it names the tensor, what was expected and what came.

Kept free of torch so that the checks can be imported and unit-tested cheaply.
"""
from __future__ import annotations

from typing import Any, Sequence

from oracle.errors import TensorError  # noqa: F401  (re-exported: the plugin raises it)


def shape_of(t: Any) -> list[int]:
    return [int(s) for s in t.shape]


def check_shape(name: str, t: Any, expected: Sequence[int], why: str = "") -> None:
    if shape_of(t) != [int(e) for e in expected]:
        extra = f" ({why})" if why else ""
        raise TensorError(name, f"shape {list(expected)}{extra}", f"{shape_of(t)}")


def check_dtype(name: str, t: Any, allowed: Sequence[Any], why: str = "") -> None:
    if t.dtype not in tuple(allowed):
        names = " or ".join(str(d).replace("torch.", "") for d in allowed)
        extra = f" ({why})" if why else ""
        raise TensorError(name, f"dtype {names}{extra}", str(t.dtype).replace("torch.", ""))


def check_ndim(name: str, t: Any, ndim: int, what: str) -> None:
    if t.dim() != ndim:
        raise TensorError(name, f"{ndim} dimensions ({what})", f"shape {shape_of(t)}")


def check_finite(name: str, t: Any) -> None:
    """Scales must be finite: a NaN or infinite scale silently poisons a whole block."""
    import torch

    values = t.float() if t.dtype not in (torch.float32, torch.float64) else t
    bad = ~torch.isfinite(values)
    if bool(bad.any()):
        idx = [int(i) for i in bad.nonzero()[0].tolist()]
        raise TensorError(name, "finite scales", f"{float(values[tuple(idx)])} at index {idx}")


def check_divisible(name: str, size: int, block: int, what: str) -> None:
    if size % block:
        raise TensorError(name, f"{what} divisible by {block}", str(size))


def require(name: str, t: Any, fmt: str) -> Any:
    if t is None:
        raise TensorError(name, f"a tensor (required for {fmt} weights)", "None")
    return t
