"""Modules of an architecture the tables do not know, from transformers' own model class.

The model is built on the meta device (no memory, no weights) from the config, and its
modules are read back: `nn.Linear` -> linear layers, `nn.Embedding` -> embeddings, a
module holding 3-D expert weights (`gate_up_proj` [E, 2I, H], `down_proj` [E, H, I]) or a
list of per-expert MLPs -> one MoE layer, a router (a module named `gate`/`router` whose
2-D weight has one row per expert) -> an unquantized router. Names are transformers'
module names, which is what checkpoints of that class use.

The same choices as the tables apply (`architectures`): q/k/v and gate/up fused as vLLM
does; --tp splits row-parallel projections (o_proj, down_proj, out_proj, ...) along K
and the others along N, routers replicated; --ep spreads experts whole. KV-head
replication (--tp above the KV head count) is not modelled here: such a split is an error.

transformers and torch are imported only here, and this module is imported only when a
model_type outside the tables is explained.
"""
from __future__ import annotations

import re
from typing import Any

from ..errors import InputError
from .architectures import Builder, Layout
from .model import Module
from .source import ConfigView
from .spellings import ACTIVATION_KEYS, expert_count, top_k

_ROW_PARALLEL = frozenset({"o_proj", "down_proj", "out_proj", "dense", "wo", "wo_b", "w2", "fc2", "c_proj",
                           "dense_4h_to_h"})
_REPLICATED = frozenset({"q_a_proj", "kv_a_proj_with_mqa", "kv_a_proj", "wq_a", "wkv"})
_ROUTER_NAMES = frozenset({"gate", "router", "wg"})
_FUSE = ((("q_proj", "k_proj", "v_proj"), "qkv_proj"), (("gate_proj", "up_proj"), "gate_up_proj"),
         (("in_proj_qkv", "in_proj_z"), "in_proj_qkvz"), (("in_proj_b", "in_proj_a"), "in_proj_ba"))
_LAYER = re.compile(r"\.layers\.(\d+)\.")
_DROP_KEYS = ("model_type", "quantization_config", "architectures", "auto_map", "transformers_version")


def knows_model_type(model_type: str) -> bool:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    return model_type in CONFIG_MAPPING


def text_model_type(model_type: str) -> str:
    """The model_type of a multimodal model's text part, as transformers defines it."""
    from transformers import AutoConfig
    config = AutoConfig.for_model(model_type)
    return config.get_text_config().model_type


def meta_modules(top: ConfigView, text: ConfigView, model_type: str, tp: int, ep: int,
                 layout: Layout) -> tuple[list[Module], list[str]]:
    model, substituted = _build(text, model_type)
    b = Builder(text, tp, ep, layout)
    walker = _Walker(b, model)
    walker.walk()
    import transformers
    b.notes += substituted
    b.notes.append(f"modules derived from transformers {transformers.__version__} {_class_name(model)} "
                   "built on the meta device (the architecture is not in the tables); "
                   + (f"not listed: {walker.skipped_summary()}" if walker.skipped else "every weight is listed"))
    return b.modules, b.notes


def _class_name(model: Any) -> str:
    inner = getattr(model, "model", None)
    return type(inner).__name__ + " + lm_head" if getattr(model, "_oracle_wrapped", False) else type(model).__name__


def _build(text: ConfigView, model_type: str) -> tuple[Any, list[str]]:
    """The model on the meta device, and notes on what had to be substituted to build it.

    Only shapes are needed, so what transformers cannot build does not stop the derivation:
    an activation transformers does not know (SiTU) is replaced by silu for the build (the
    activation is read from the config separately, `Builder.moe_activation`), and a config
    class without a causal-LM class is built as its base model with an lm_head of
    vocab_size x hidden_size added. Each substitution is a note in the report.
    """
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
    from transformers.activations import ACT2FN
    kwargs = {k: v for k, v in text.data.items() if k not in _DROP_KEYS}
    notes: list[str] = []
    for key in ACTIVATION_KEYS:
        act = kwargs.get(key)
        if isinstance(act, str) and act not in ACT2FN:
            kwargs[key] = "silu"
            notes.append(f"transformers has no activation {act!r} ({key}): the meta-device model was built with "
                         f"'silu' in its place (shapes do not depend on it); the MoE layers keep {act!r}")
    try:
        config = AutoConfig.for_model(model_type, **kwargs)
        if config.get_text_config() is not config:    # a composite (multimodal) class: the keys are its text part's
            config = AutoConfig.for_model(model_type, text_config=kwargs)
        with torch.device("meta"):
            try:
                return AutoModelForCausalLM.from_config(config, trust_remote_code=False), notes   # never a checkpoint's code
            except ValueError as exc:
                if "Unrecognized configuration class" not in str(exc):
                    raise
                base = AutoModel.from_config(config, trust_remote_code=False)
                base = getattr(base, "language_model", base)       # multimodal base models: the text decoder
                holder = torch.nn.Module()
                holder.model = base
                holder.lm_head = torch.nn.Linear(text.int("hidden_size"), text.int("vocab_size"), bias=False)
                holder._oracle_wrapped = True
                notes.append(f"transformers has no causal-LM class for {type(config).__name__}: its text model "
                             f"{type(base).__name__} was built and an lm_head (vocab_size x hidden_size) added")
                return holder, notes
    except InputError:
        raise
    except Exception as exc:  # transformers raises many kinds; the user needs one clear line
        raise InputError(f"transformers cannot build {model_type!r} from this config: "
                         f"{type(exc).__name__}: {exc}", source=text.source,
                         field=text.key("model_type")) from None


class _Walker:
    """Reads a meta-device model's modules into Builder calls, in forward (definition) order."""

    def __init__(self, b: Builder, model: Any):
        self.b = b
        self.model = model
        self.skipped: dict[str, int] = {}
        self.experts, self.expert_key = expert_count(b.cfg)

    def walk(self) -> None:
        import torch.nn as nn
        pending: dict[str, dict[str, Any]] = {}      # parent -> {leaf: Linear} awaiting fusion
        expert_lists: set[str] = set()
        for name, mod in self.model.named_modules():
            if any(name.startswith(e + ".") for e in expert_lists):
                continue
            leaf = name.rsplit(".", 1)[-1]
            if isinstance(mod, nn.ModuleList) and leaf == "experts":
                self._expert_list(name, mod)
                expert_lists.add(name)
            elif isinstance(mod, nn.Embedding):
                self._embedding(name, mod)
            elif isinstance(mod, nn.Linear):
                if leaf in _ROUTER_NAMES and self.experts and mod.out_features == self.experts:
                    self._router(name, mod.in_features, mod.out_features)
                elif leaf == "shared_expert_gate":          # one sigmoid gate per token, replicated
                    self._router(name, mod.in_features, mod.out_features, role="shared_expert_gate")
                else:
                    parent = name.rsplit(".", 1)[0] if "." in name else ""
                    pending.setdefault(parent, {})[leaf] = (name, mod)
                    self._flush(parent, pending[parent], final=False)
            else:
                self._other(name, mod)
        for parent, group in pending.items():
            self._flush(parent, group, final=True)
        self.b.modules.sort(key=_order(self.model, self.b.layout))

    # ---- module kinds ---------------------------------------------------------------
    def _block(self, name: str) -> int | None:
        m = _LAYER.search("." + name)
        return int(m.group(1)) if m else None

    def _embedding(self, name: str, mod: Any) -> None:
        full = self.b.layout.rename(name)
        self.b.modules.append(Module("embed_tokens", "embedding", full, (full,), None, {
            "num_embeddings": -(-mod.num_embeddings // self.b.tp), "embedding_dim": mod.embedding_dim,
            "tp_size": self.b.tp}))

    def _router(self, name: str, k: int, n: int, role: str = "gate") -> None:
        full = self.b.layout.rename(name)
        self.b.linear(role, self._block(name), full, [full], k, n, sharded=False)

    def _flush(self, parent: str, group: dict[str, tuple[str, Any]], *, final: bool) -> None:
        for parts, fused in _FUSE:
            if all(p in group for p in parts):
                mods = [group.pop(p) for p in parts]
                self._linear(f"{parent}.{fused}", fused, mods)
        if final:
            for leaf, item in list(group.items()):
                self._linear(item[0], leaf, [item])
            group.clear()

    def _linear(self, name: str, role: str, mods: list[tuple[str, Any]]) -> None:
        b = self.b
        k = mods[0][1].in_features
        bias = any(m.bias is not None for _, m in mods)
        outs = [m.out_features for _, m in mods]
        parts = [b.layout.rename(n) for n, _ in mods]
        block = self._block(name)
        if role in _ROW_PARALLEL:
            k = self._split(k, name, "in_features")
        elif role not in _REPLICATED:
            outs = [self._split(o, n, "out_features") for (n, _), o in zip(mods, outs)]
        sharded = role not in _REPLICATED
        b.linear(role, block, b.layout.rename(name), parts, k, sum(outs), bias=bias, sharded=sharded)

    def _split(self, size: int, name: str, what: str) -> int:
        if size % self.b.tp:
            raise InputError(f"{what} {size} of {name} is not divisible by --tp {self.b.tp} "
                             "(the transformers path does not model KV-head replication)",
                             source=self.b.cfg.source, field="--tp")
        return size // self.b.tp

    def _other(self, name: str, mod: Any) -> None:
        params = dict(mod.named_parameters(recurse=False))
        if not params:
            return
        leaf = name.rsplit(".", 1)[-1]
        shapes = {k: tuple(p.shape) for k, p in params.items()}
        if "gate_up_proj" in shapes and "down_proj" in shapes and len(shapes["down_proj"]) == 3:
            self._fused_experts(name, shapes, any("bias" in k for k in shapes))
        elif leaf in _ROUTER_NAMES and "weight" in shapes and len(shapes["weight"]) == 2 and self.experts \
                and shapes["weight"][0] == self.experts:
            self._router(name, shapes["weight"][1], shapes["weight"][0])
        else:
            kind = type(mod).__name__
            self.skipped[kind] = self.skipped.get(kind, 0) + 1

    def _fused_experts(self, name: str, shapes: dict[str, tuple], bias: bool) -> None:
        e, hidden, inter = shapes["down_proj"]
        if shapes["gate_up_proj"] not in ((e, 2 * inter, hidden), (e, hidden, 2 * inter)):
            raise InputError(f"{name}: expert weights gate_up_proj {shapes['gate_up_proj']} and down_proj "
                             f"{shapes['down_proj']} do not describe a gated MLP; expected [E, 2I, H] and [E, H, I]",
                             source=self.b.cfg.source)
        full = self.b.layout.rename(name)
        parts = [f"{full}.0.gate_proj", f"{full}.0.up_proj", f"{full}.0.down_proj"]
        self._moe(name, parts, e, inter, bias)

    def _expert_list(self, name: str, experts: Any) -> None:
        import torch.nn as nn
        first = experts[0]
        linears = {n: m for n, m in first.named_modules() if isinstance(m, nn.Linear)}
        down = next((m for n, m in linears.items() if n.rsplit(".", 1)[-1] in _ROW_PARALLEL), None)
        if down is None:
            raise InputError(f"{name}: per-expert MLP without a down projection ({', '.join(linears)})",
                             source=self.b.cfg.source)
        full = self.b.layout.rename(name)
        parts = [f"{full}.0.{n}" for n in linears]
        self._moe(name, parts, len(experts), down.in_features, down.bias is not None)

    def _moe(self, name: str, parts: list[str], experts: int, inter: int, bias: bool) -> None:
        b = self.b
        act, params = b.moe_activation()
        b.moe(self._block(name) or 0, b.layout.rename(name), parts, experts=experts, top_k=top_k(b.cfg),
              intermediate=inter, keys=(self.expert_key, "moe_intermediate_size"), activation=act,
              params=params, bias=bias)

    def skipped_summary(self) -> str:
        return ", ".join(f"{n} x{c}" for n, c in sorted(self.skipped.items()))


def _order(model: Any, layout: Layout):
    """Sort key: modules in the order transformers defines them (a fused module takes its first part's place)."""
    index = {layout.rename(name): i for i, (name, _) in enumerate(model.named_modules())}

    def key(m: Module) -> int:
        part = m.parts[0]
        return index.get(part, index.get(part.rsplit(".0.", 1)[0], len(index)))
    return key
