"""Input checks: a bad tensor gets one error naming it, what was expected and what came."""
from __future__ import annotations

from typing import Any, Sequence

from oracle.errors import TensorError  # noqa: F401  (re-exported: the plugin raises it)


def shape_of(t: Any) -> list[int]:
    return [int(s) for s in t.shape]


def _dtype_name(d: Any) -> str:
    return str(d).replace("torch.", "")


def check_tensor(name: str, t: Any, *, dtypes: Sequence[Any], shapes: Sequence[Sequence[int]], why: str) -> Any:
    """Must be a tensor of one of `dtypes` with one of `shapes` (the first is the one named)."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise TensorError(name, f"a torch.Tensor ({why})", type(t).__name__)
    if t.dtype not in tuple(dtypes):
        raise TensorError(name, "dtype " + " or ".join(_dtype_name(d) for d in dtypes) + f" ({why})",
                          _dtype_name(t.dtype))
    if shape_of(t) not in [list(s) for s in shapes]:
        raise TensorError(name, "shape " + " or ".join(str(list(s)) for s in shapes) + f" ({why})",
                          str(shape_of(t)))
    return t


def check_cuda(name: str, t: Any) -> None:
    if t.device.type != "cuda":
        raise TensorError(name, "a CUDA tensor (torch scaled-matmul kernels run on NVIDIA GPUs)", str(t.device))


def check_scales(name: str, t: Any, *, allow_zero: bool = False) -> None:
    """Scales must be finite and positive (block scales of all-zero blocks may be 0):
    a NaN, infinite or negative scale silently poisons its block."""
    import torch

    v = t.float()
    bad = ~torch.isfinite(v) | ((v < 0) if allow_zero else (v <= 0))
    if bool(bad.any()):
        idx = [int(i) for i in bad.nonzero()[0].tolist()]
        what = "finite, non-negative scales" if allow_zero else "finite, positive scales"
        raise TensorError(name, what, f"{float(v[tuple(idx)])} at index {idx}")
