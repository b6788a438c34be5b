"""KernelConfig: what the caller explicitly asks for (the top of the precedence ladder)."""
from __future__ import annotations

from functools import cached_property
from typing import Any

from .validation import Revalidating
from pydantic import ConfigDict, field_validator

from .catalog import normalize_backend
from .formats import ACTIVATION_FORMATS, WEIGHT_FORMATS

Choice = str | dict[str, str]


def _normalize_choice(value: Any, field: str, allowed: tuple[str, ...] | None) -> Any:
    """A name, or a per-format map {format: name, default: name}; names normalised."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if "=" in text:  # CLI form: nvfp4=b12x,fp8_block=auto
            pairs = {}
            for part in filter(None, (p.strip() for p in text.split(","))):
                key, sep, name = part.partition("=")
                if not sep or not key.strip() or not name.strip():
                    raise ValueError(f"{field}: {part!r} is not FORMAT=NAME")
                pairs[key.strip().lower()] = name
            value = pairs
        else:
            return _name(text, allowed, field)
    if isinstance(value, dict):
        out = {}
        for key, name in value.items():
            k = str(key).strip().lower()
            if k != "default" and k not in WEIGHT_FORMATS:
                raise ValueError(f"{field}: unknown weight format {key!r}; expected default or one of "
                                 f"{', '.join(WEIGHT_FORMATS)}")
            out[k] = _name(str(name), allowed, field)
        return out
    raise ValueError(f"{field}: expected a name or a per-format mapping, got {type(value).__name__}")


def _name(text: str, allowed: tuple[str, ...] | None, field: str) -> str:
    name = normalize_backend(text) if allowed is None else text.strip().lower()
    if allowed is not None and name not in allowed:
        raise ValueError(f"{field}: unknown activation format {text!r}; expected one of {', '.join(allowed)}")
    if not name:
        raise ValueError(f"{field}: empty name")
    return name


class KernelConfig(Revalidating):
    """Explicit choices; "auto" defers to the policy's deployment and platform defaults.

    Backend names are case-insensitive and '-' equals '_'. A value may be a per-format
    map for mixed checkpoints: ``{"nvfp4": "b12x", "default": "auto"}``.
    `*_activation` request an activation format; one that contradicts what the
    checkpoint declares is an error.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    linear_backend: Choice = "auto"
    moe_backend: Choice = "auto"
    embedding_backend: Choice = "auto"
    linear_activation: Choice | None = None
    moe_activation: Choice | None = None

    @field_validator("linear_backend", "moe_backend", "embedding_backend", mode="before")
    @classmethod
    def _backend(cls, v: Any, info: Any) -> Any:
        return _normalize_choice(v, info.field_name, None)

    @field_validator("linear_activation", "moe_activation", mode="before")
    @classmethod
    def _activation(cls, v: Any, info: Any) -> Any:
        return _normalize_choice(v, info.field_name, ACTIVATION_FORMATS)

    @cached_property
    def cache_hash(self) -> int:
        return hash(self._key())

    def __hash__(self) -> int:  # cached: configs key the decision cache
        return self.cache_hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, KernelConfig) and self._key() == other._key())

    def _key(self) -> tuple:
        return tuple(tuple(sorted(v.items())) if isinstance(v, dict) else v
                     for v in (self.linear_backend, self.moe_backend, self.embedding_backend,
                               self.linear_activation, self.moe_activation))

    def backend_for(self, op: str, weight_format: str) -> str:
        return pick(getattr(self, f"{op}_backend"), weight_format) or "auto"

    def activation_for(self, op: str, weight_format: str) -> str | None:
        value = getattr(self, f"{op}_activation", None)
        return pick(value, weight_format)

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


def pick(choice: Any, weight_format: str) -> str | None:
    if isinstance(choice, dict):
        return choice.get(weight_format, choice.get("default"))
    return choice
