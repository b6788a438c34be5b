"""What the model front end produces: modules of an architecture, and layers for the engine."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..layer import EmbeddingLayer, LinearLayer, MoELayer

LayerSpecT = LinearLayer | MoELayer | EmbeddingLayer

#: Router roles: unquantized unless the architecture's engine builds the router with the quantization
#: method (`oracle.models.quant.ROUTER_FOLLOWS_CHECKPOINT`).
ROUTER_ROLES = frozenset({"gate", "shared_expert_gate"})
#: Roles quantized only when the checkpoint names them explicitly.
EXPLICIT_ONLY_ROLES = frozenset({"embed_tokens", "lm_head"})


@dataclass(frozen=True)
class Module:
    """One kernel call of an architecture, before quantization is applied.

    `parts` are the checkpoint's own (unfused) module names: quantization lists are
    matched against them, and a fused module (qkv_proj, gate_up_proj) is quantized
    only when all its parts are, in the same format.
    """

    role: str
    op: Literal["linear", "moe", "embedding"]
    name: str                      # the module's name as this report shows it
    parts: tuple[str, ...]         # checkpoint names matched against quantization lists
    block: int | None = None       # decoder layer index; None for embed_tokens/lm_head
    shape: dict = field(default_factory=dict, compare=False)   # layer fields (per rank)


@dataclass(frozen=True)
class Quant:
    """The quantization a checkpoint declares for one module."""

    weight_format: str
    activation_format: str | None = None
    group_size: int | None = None
    activation_scale: str | None = None             # FP8 activations: formats.ActivationScale, None = unknown
    weight_block: tuple[int, int] | None = None     # block formats: [rows (N), cols (K)]


@dataclass(frozen=True)
class ModelLayer:
    """A LayerSpec with where it sits in the model, so reports can group it."""

    block: int | None
    role: str
    layer: LayerSpecT
    parts: tuple[str, ...]
    quant_note: str = ""           # why the layer is (un)quantized: the list entry that decided

    @property
    def name(self) -> str:
        return self.layer.name

    @property
    def quantized(self) -> bool:
        return self.layer.quantized


@dataclass
class Model:
    """A model's layers on one rank, with the facts the report header shows."""

    name: str
    files: list[str]
    architecture: str
    model_type: str
    dialect: str
    dialect_detail: str
    tp: int
    ep: int
    layers: list[ModelLayer]
    notes: list[str] = field(default_factory=list)
    generic: bool = False
    example: bool = False
    #: how the modules were derived: "architecture table", "transformers meta-device model" or
    #: "generic fallback"; module names come from there (and the safetensors index, when present)
    derivation: str = "architecture table"
    coverage: Any = None            # oracle.models.coverage.Coverage
    #: oracle.models.checkpoint_names.CheckpointNames: which checkpoint names stand for each module
    checkpoint_names: Any = None

    @property
    def quantized_layers(self) -> list[ModelLayer]:
        return [m for m in self.layers if m.quantized]
