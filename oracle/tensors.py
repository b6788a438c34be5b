"""The tensor checks every plugin runs on what a caller hands a kernel, raising one `TensorError`.

Each check names the tensor, what was expected and what came ("w13_scale: expected shape
[32, 5760, 90] (one E8M0 scale per 32), got [32, 5760, 45]"). Tensors are read through
their attributes (shape, dtype, device), so importing this module needs no torch; the
checks that must compute on values (finiteness) import torch when they run.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Mapping, Sequence

from .errors import TensorError
from .formats import DTYPES, MOE_ACTIVATION_DEFAULTS, torch_dtype

_SIGNS = {"positive": "finite, positive scales", "non-negative": "finite, non-negative scales",
          "any": "finite scales"}


def shape_of(t: Any) -> list[int]:
    return [int(s) for s in t.shape]


def dtype_name(dtype: Any) -> str:
    """torch.bfloat16 -> "bfloat16"."""
    return str(dtype).replace("torch.", "")


def _why(why: str) -> str:
    return f" ({why})" if why else ""


def require(name: str, t: Any, why: str, *, owner: str | None = None) -> Any:
    """`t` must be given (not None); `why` completes "required ...", e.g. "for nvfp4 weights"."""
    if t is None:
        raise TensorError(name, f"a tensor (required {why})", "None", owner=owner)
    return t


def forbid(name: str, t: Any, why: str) -> None:
    """`t` must not be given (None): e.g. a static scale for activations quantized dynamically."""
    if t is not None:
        raise TensorError(name, f"None ({why})", f"a tensor of shape {shape_of(t)}")


def check_dtype(name: str, t: Any, allowed: Sequence[Any], why: str = "", *, owner: str | None = None) -> Any:
    if t.dtype not in tuple(allowed):
        raise TensorError(name, "dtype " + " or ".join(dtype_name(d) for d in allowed) + _why(why),
                          dtype_name(t.dtype), owner=owner)
    return t


def check_shape(name: str, t: Any, expected: Sequence[int], why: str = "") -> Any:
    return check_shapes(name, t, [expected], why)


def check_shapes(name: str, t: Any, shapes: Sequence[Sequence[int]], why: str = "", *,
                 owner: str | None = None) -> Any:
    """`t`'s shape must be one of `shapes` (named in that order)."""
    wanted = [[int(e) for e in shape] for shape in shapes]
    if shape_of(t) not in wanted:
        raise TensorError(name, "shape " + " or ".join(str(s) for s in wanted) + _why(why), str(shape_of(t)),
                          owner=owner)
    return t


def check_tensor(name: str, t: Any, *, dtypes: Sequence[Any], shapes: Sequence[Sequence[int]] | None,
                 why: str, owner: str | None = None) -> Any:
    """A torch tensor of one of `dtypes` and (unless `shapes` is None) one of `shapes`.

    `owner` (e.g. "b12x.linear.nvfp4 layer 'down_proj'") heads the message when given.
    """
    import torch

    require(name, t, f"for {why}", owner=owner)
    if not isinstance(t, torch.Tensor):
        raise TensorError(name, f"a torch.Tensor ({why})", type(t).__name__, owner=owner)
    check_dtype(name, t, dtypes, why, owner=owner)
    return t if shapes is None else check_shapes(name, t, shapes, why, owner=owner)


def moe_activation_params(activation: str, given: Mapping[str, float]) -> dict[str, float | None]:
    """The activation's defaults (oracle.formats) overlaid with the layer's parameters; an unknown
    activation or parameter, or a value that is not finite (or not positive where it clamps or
    divides), is a TensorError."""
    if activation not in MOE_ACTIVATION_DEFAULTS:
        raise TensorError("activation", f"one of {', '.join(MOE_ACTIVATION_DEFAULTS)}", repr(activation))
    known = MOE_ACTIVATION_DEFAULTS[activation]
    extra = sorted(set(given) - set(known))
    if extra:
        raise TensorError("activation_params", f"only {sorted(known) or 'no parameters'} for {activation}",
                          f"{extra}")
    params = {**known, **given}
    for key, value in params.items():
        if value is None:
            continue
        if not math.isfinite(value):
            raise TensorError(f"activation_params.{key}", "a finite number", str(value))
        # limit clamps, beta/linear_beta divide (SiTU): they must be positive; swigluoai's beta is an offset
        positive = key in ("limit", "linear_beta") or (key == "beta" and activation == "situ")
        if positive and value <= 0:
            raise TensorError(f"activation_params.{key}", "a positive number", str(value))
    return params


def check_device(name: str, t: Any, device_type: str, why: str) -> None:
    if t.device.type != device_type:
        raise TensorError(name, f"a {device_type.upper()} tensor ({why})", str(t.device))


def check_scales(name: str, t: Any, *, sign: str = "positive") -> None:
    """Scales must be finite and (by `sign`) positive, non-negative or of any sign: a NaN,
    infinite or wrongly signed scale silently poisons its whole block."""
    import torch

    v = t if t.dtype in (torch.float32, torch.float64) else t.float()
    bad = ~torch.isfinite(v)
    if sign == "positive":
        bad |= v <= 0
    elif sign == "non-negative":
        bad |= v < 0
    if bool(bad.any()):
        idx = [int(i) for i in bad.nonzero()[0].tolist()]
        raise TensorError(name, _SIGNS[sign], f"{float(v[tuple(idx)])} at index {idx}")


def check_finite(name: str, t: Any) -> None:
    """Finite values of any sign."""
    check_scales(name, t, sign="any")


def check_activations(x: Any, k: int, device: Any, dtypes: Sequence[Any], dtype: Any) -> tuple[Any, Any]:
    """A dense kernel's input, checked (a floating-point tensor on the weights' device whose last
    dimension is K) and returned as (leading shape, contiguous [rows, K] matrix in `dtype`)."""
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TensorError("x", "a torch.Tensor", type(x).__name__)
    if x.dtype not in dtypes:
        raise TensorError("x", "dtype bfloat16, float16 or float32 (floating-point activations)", dtype_name(x.dtype))
    if len(x.shape) == 0 or x.shape[-1] != k:
        raise TensorError("x", f"last dimension {k} (K)", f"shape {shape_of(x)}")
    if x.device != device:
        raise TensorError("x", f"a tensor on {device} (where the processed weights are)", str(x.device))
    x2 = x.reshape(-1, k)
    if x2.dtype != dtype:                    # each call below is a dispatch: skipped when it would do nothing
        x2 = x2.to(dtype)
    return x.shape[:-1], x2 if x2.is_contiguous() else x2.contiguous()


@functools.cache
def float_dtypes() -> tuple[Any, ...]:
    """The torch dtypes of a layer's `dtype` names (oracle.formats.DTYPES): what activations and biases may be."""
    return tuple(torch_dtype(name) for name in DTYPES)


def apply_dense(x: Any, k: int, n: int, device: Any, dtype: Any, run: Any) -> Any:
    """A dense kernel's `apply` around `run` ([rows, K] -> [rows, N]): the input checked
    (`check_activations`, floating-point), an empty result for no rows, the leading dimensions kept."""
    import torch

    lead, x2 = check_activations(x, k, device, float_dtypes(), dtype)
    if x2.shape[0] == 0:
        return torch.empty(*lead, n, dtype=dtype, device=device)
    return run(x2).reshape(*lead, n)


def unpack_nibbles(words: Any, dim: int) -> Any:
    """int32 words -> int32 nibbles 0..15, 8x longer along `dim`, low nibble first: the GPTQ order of
    int4 qweight (along K) and qzeros (along N), which peers' kernels need unpacked to repack.
    (oracle.checkpoints.packing's byte-wise unpacking, widened to int32.)"""
    import torch

    from .checkpoints.packing import unpack_nibbles as unpack_bytewise
    return unpack_bytewise(words, dim).to(torch.int32)