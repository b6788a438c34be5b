"""Layer specifications: what the engine is asked to find a kernel for.

Shapes are the ones the kernel sees on one rank, except `MoELayer.intermediate_size`,
which is the full size: the engine derives the per-rank size from `tp_size`, because
the b12x rules are stated on the per-rank size while checkpoints state the full one.
Layers are frozen and hashable; `signature` (everything but the name) keys the cache.
"""
from __future__ import annotations

import math
import operator
from functools import lru_cache
from typing import Annotated, Any, Literal, Union

from .validation import Revalidating
from pydantic import (ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationInfo, field_validator,
                      model_validator)

from .errors import InputError
from .formats import (ACTIVATION_PARAMS, BLOCK_WEIGHT_FORMATS, FORMAT_FACTS, GATED_ACTIVATIONS, ActivationFormat,
                      ActivationScale, DType, MoEActivation, WeightFormat, is_quantized)

#: Bounds on layer fields (docs/user-guide.md, "Limits"): far above any real model, low enough
#: that a typo or hostile value is refused at construction instead of misleading a decision.
MAX_DIM = 1 << 24          # features, hidden/intermediate sizes, vocabulary, group size
MAX_EXPERTS = 1 << 16      # num_experts (and so top_k)
MAX_PARALLEL = 1 << 12     # tp_size, ep_size

#: Integers only: True, 1.0, "128" and b"128" are refused, not coerced (pydantic's lax mode would).
PositiveInt = Annotated[StrictInt, Field(gt=0, le=MAX_DIM)]
ExpertCount = Annotated[StrictInt, Field(gt=0, le=MAX_EXPERTS)]
ParallelSize = Annotated[StrictInt, Field(gt=0, le=MAX_PARALLEL)]
Flag = StrictBool


class Signature:
    """A layer's decision-relevant fields, with the hash computed once (it keys every cache)."""

    __slots__ = ("values", "_hash")

    def __init__(self, values: tuple):
        self.values = values
        self._hash = hash(values)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is Signature and self._hash == other._hash
                                 and self.values == other.values)

    def __repr__(self) -> str:
        return f"Signature{self.values!r}"


class _computed_once:
    """functools.cached_property without its per-instance lock (Python 3.11 takes an RLock on every
    first read, several microseconds; a layer is immutable, so a race only computes the value twice)."""

    def __init__(self, fn: Any):
        self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.fn(instance)
        return value


class _Layer(Revalidating):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, ignored_types=(_computed_once,))

    name: StrictStr = ""

    @_computed_once
    def signature(self) -> Signature:
        """Everything that can change a decision: all fields but the name (computed once)."""
        names, getter = _signature_fields(type(self))
        values = getter(self.__dict__)  # pydantic keeps field values in __dict__: one C-level read
        if any(type(v) in _MUTABLE for v in values):
            values = tuple(_freeze(v) for v in values)
        return Signature((type(self).__name__,) + tuple(zip(names, values)))

    @property
    def quantized(self) -> bool:
        return is_quantized(self.weight_format)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((self.name, self.signature))

    def rule_fields(self) -> dict[str, Any]:
        """The values constraint rules may read (see `oracle.rules.FIELDS`)."""
        values = {k: getattr(self, k) for k in type(self).model_fields}
        values["checkpoint_activation_format"] = values.pop("activation_format", None)
        values.update(self._derived())
        return values

    def _derived(self) -> dict[str, Any]:
        return {}


class _QuantScales:
    """FP8 activation-scale kind and 2-D weight block: checked against the formats they describe.

    `activation_scale` None means the layer has no FP8 activations or the checkpoint does not
    say (rules see "unknown"); `weight_block` None means the format's standard block
    (`FORMAT_FACTS`, 128x128 for fp8_block).
    """

    def _check_scales(self) -> None:
        scale, block = self.activation_scale, self.weight_block  # type: ignore[attr-defined]
        act, fmt = self.activation_format, self.weight_format  # type: ignore[attr-defined]
        if scale is not None and act != "fp8":
            raise ValueError(f"activation_scale {scale!r} describes FP8 activations, but activation_format "
                             f"is {act!r}; expected activation_format 'fp8' or no activation_scale")
        if block is not None:
            if fmt not in BLOCK_WEIGHT_FORMATS:
                raise ValueError(f"weight_block {list(block)} applies to block formats "
                                 f"({', '.join(sorted(BLOCK_WEIGHT_FORMATS))}), not {fmt!r}")
            group = self.group_size  # type: ignore[attr-defined]
            if group is not None and group != block[1]:
                raise ValueError(f"group_size {group} contradicts weight_block {list(block)}: "
                                 f"the K group is the block's second value")

    def _scale_fields(self) -> dict[str, Any]:
        block = self.weight_block or (FORMAT_FACTS[self.weight_format].block  # type: ignore[attr-defined]
                                      if self.weight_format in BLOCK_WEIGHT_FORMATS else None)  # type: ignore[attr-defined]
        return {"activation_scale": self.activation_scale or "unknown",  # type: ignore[attr-defined]
                "weight_block_rows": block[0] if block else None,
                "weight_block_cols": block[1] if block else None}


class LinearLayer(_QuantScales, _Layer):
    """A dense GEMM y = x W^T (+ b): W is [out_features, in_features] on this rank (N x K)."""

    op: Literal["linear"] = "linear"
    in_features: PositiveInt
    out_features: PositiveInt
    weight_format: WeightFormat
    activation_format: ActivationFormat | None = None
    has_bias: Flag = False
    dtype: DType = "bfloat16"
    tp_size: ParallelSize = 1
    group_size: PositiveInt | None = None
    activation_scale: ActivationScale | None = None
    weight_block: tuple[PositiveInt, PositiveInt] | None = None

    @model_validator(mode="after")
    def _check_quant_scales(self) -> "LinearLayer":
        self._check_scales()
        return self

    def _derived(self) -> dict[str, Any]:
        return {"K": self.in_features, "N": self.out_features, **self._scale_fields()}


class MoELayer(_QuantScales, _Layer):
    """Routed experts of one block, as one fused-MoE call."""

    op: Literal["moe"] = "moe"
    num_experts: ExpertCount
    top_k: ExpertCount
    hidden_size: PositiveInt
    intermediate_size: PositiveInt
    weight_format: WeightFormat
    activation_format: ActivationFormat | None = None
    activation: MoEActivation = "silu"
    #: Named parameters of the activation (alpha, limit, beta, ...): each finite and positive.
    activation_params: dict[StrictStr, StrictFloat | StrictInt] = Field(default_factory=dict)
    has_bias: Flag = False
    dtype: DType = "bfloat16"
    tp_size: ParallelSize = 1
    ep_size: ParallelSize = 1
    use_all2all: Flag = False
    eplb: Flag = False
    expert_map: Flag = False
    lora: Flag = False
    apply_router_weight_on_input: Flag = False
    group_size: PositiveInt | None = None
    activation_scale: ActivationScale | None = None
    weight_block: tuple[PositiveInt, PositiveInt] | None = None

    @field_validator("activation_params")
    @classmethod
    def _finite_positive(cls, params: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        activation = info.data.get("activation")
        allowed = ACTIVATION_PARAMS.get(activation, ()) if activation is not None else None
        extra = sorted(set(params) - set(allowed)) if allowed is not None else []
        if extra:   # e.g. SwiGLU's limit on relu2_no_mul: refused here, not by a kernel at load
            raise ValueError(f"activation_params {extra} do not apply to activation {activation!r}; it takes "
                             f"{', '.join(allowed) if allowed else 'no parameters'}")
        for key, value in params.items():
            if not key.isidentifier():
                raise ValueError(f"activation_params key {key!r} must be a name such as 'limit'")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"activation_params.{key} must be a finite number > 0, got {value!r}")
        return {key: float(value) for key, value in params.items()}

    @model_validator(mode="after")
    def _check_geometry(self) -> "MoELayer":
        self._check_scales()
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) must not exceed num_experts ({self.num_experts})")
        if self.intermediate_size % self.tp_size:
            raise ValueError(
                f"intermediate_size ({self.intermediate_size}) is not divisible by tp_size ({self.tp_size})"
            )
        if self.num_experts % self.ep_size:
            raise ValueError(f"num_experts ({self.num_experts}) is not divisible by ep_size ({self.ep_size})")
        return self

    @property
    def w13_rows(self) -> int:
        """Rows of each expert's FC1 weight (w13) on this rank: gate and up halves for a gated activation."""
        rows = self.intermediate_size // self.tp_size
        return 2 * rows if self.activation in GATED_ACTIVATIONS else rows

    def _derived(self) -> dict[str, Any]:
        return {
            "intermediate_size_per_rank": self.intermediate_size // self.tp_size,
            "experts_per_rank": self.num_experts // self.ep_size,
            "expert_parallel": self.ep_size > 1,
            **self._scale_fields(),
        }


class EmbeddingLayer(_Layer):
    """A vocabulary lookup table of [num_embeddings, embedding_dim]."""

    op: Literal["embedding"] = "embedding"
    num_embeddings: PositiveInt
    embedding_dim: PositiveInt
    weight_format: WeightFormat
    dtype: DType = "bfloat16"
    tp_size: ParallelSize = 1

    @property
    def activation_format(self) -> None:
        return None


LayerSpec = Annotated[Union[LinearLayer, MoELayer, EmbeddingLayer], Field(discriminator="op")]


def field_errors(exc: Exception) -> str:
    """A pydantic error on a layer as one line: 'out_features: Input should be <= 16777216 (got 16777280)'."""
    errors = getattr(exc, "errors", None)
    if errors is None:
        return str(exc)
    parts = []
    for err in errors():
        where = ".".join(str(p) for p in err["loc"]) or "layer"
        got = err.get("input")
        shown = f" (got {got!r:.60})" if not isinstance(got, dict) else ""
        parts.append(f"{where}: {err['msg']}{shown}")
    return "; ".join(parts)


def not_a_layer(value: Any) -> InputError:
    """The error for something passed as a layer that is not one (None, a name, a dict)."""
    return InputError(f"expected a LinearLayer, MoELayer or EmbeddingLayer, got {type(value).__name__} "
                      f"{value!r:.60}", field="layer")


_MUTABLE = (dict, list)


@lru_cache(maxsize=None)
def _signature_fields(cls: type) -> tuple[tuple[str, ...], Any]:
    """The fields of a layer class that key decisions (all but the name), and a getter of their values."""
    names = tuple(k for k in cls.model_fields if k != "name")
    get = operator.itemgetter(*names)
    return names, (get if len(names) > 1 else (lambda d: (get(d),)))


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value
