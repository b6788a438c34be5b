"""Quantization dialects: what a checkpoint says each module's weight and activation formats are.

Detection order (first hit wins, and the report says which file decided):
  1. `quantization_config` in config.json (top level, else inside `text_config`);
     `quant_method: modelopt` without `quant_algo` takes its details from a sibling
     hf_quant_config.json;
  2. a sibling hf_quant_config.json (ModelOpt);
  3. a sibling quantize_config.json (GPTQ, or AWQ when it says so);
  4. none: every layer is unquantized.

Format mapping (weight format, activation format the checkpoint declares):
  mxfp4 (gpt-oss)                          -> mxfp4, None
  fp8 + weight_block_size [bn, bk]         -> fp8_block, fp8 (group_size bk, weight_block (bn, bk),
                                              dynamic_group activation scales; 'static' is an error)
  fp8 without a block size                 -> fp8_tensor, fp8 (activation_scheme static -> static_tensor,
                                              dynamic -> dynamic_tensor)
  compressed-tensors float 8-bit weights   -> strategy tensor/channel/block -> fp8_tensor/_channel/_block;
                                              activation fp8 when input_activations are 8-bit float, else None;
                                              scale kind from input_activations strategy x dynamic
                                              (tensor/static, tensor/dynamic, token/dynamic, group/dynamic)
  compressed-tensors nvfp4-pack-quantized  -> nvfp4; nvfp4 when input_activations are 4-bit float, else None
  compressed-tensors mxfp4-pack-quantized  -> mxfp4; mxfp4/mxfp8 per input_activations, else None
  compressed-tensors int 4-bit, GPTQ, AWQ  -> int4, None
  ModelOpt FP8 / NVFP4 / MXFP8             -> fp8_tensor/fp8 (static_tensor), nvfp4/nvfp4 (input scales: W4A4),
                                              mxfp8/mxfp8; FP8_PER_CHANNEL_PER_TOKEN -> dynamic_token; the
                                              other 2025-2026 quant_algo values in `_MODELOPT_ALGOS`
  expert_dtype fp4 beside quant_method fp8 -> routed experts mxfp4 (DeepSeek-V4)
Contradictory scale kinds or block shapes (static block FP8, a block_structure on a per-channel
strategy, activation groups unlike the weight block) are an InputError naming the key.
  ModelOpt IQ2_XS / IQ2_XXS / Q8_0 (ggml)  -> iq2_xs / iq2_xxs / q8_0, None
Anything else (int8 W8A8, 3-bit GPTQ, FP8 e5m2, ...) is an InputError naming the file
and key: the engine has no format for it, and guessing would mislead.

Lists are matched against the checkpoint's own names (`oracle.models.checkpoint_names`), each by
its library's rule (`oracle.models.matching`). Router gates follow `ROUTER_FOLLOWS_CHECKPOINT`
(quantized like any linear where the engine builds the router with the quantization method, else
never); embeddings and lm_head only when the checkpoint names them explicitly.
"""
from __future__ import annotations

from dataclasses import replace, dataclass
from typing import Iterable

from ..errors import InputError
from ..formats import CODEC_BLOCKS
from .checkpoint_names import CheckpointNames
from .matching import NameMatcher
from .model import EXPLICIT_ONLY_ROLES, ROUTER_ROLES, Module, Quant
from .source import ConfigView, ModelFiles
from .spellings import expert_dtype, fp8_element_format

Resolution = tuple[Quant | None, str]


@dataclass(frozen=True)
class NameList:
    """One name list of a quantization config, for the coverage check (`oracle.models.coverage`)."""

    source: str
    key: str
    kind: str                    # "target", "ignore" or "quantized_layers"
    matcher: NameMatcher

KNOWN_METHODS = ("compressed-tensors", "fp8", "mxfp4", "modelopt", "gptq", "awq")
_METHOD_ALIASES = {"modelopt_fp4": "modelopt", "modelopt_mixed": "modelopt", "compressed_tensors": "compressed-tensors"}


#: Architectures whose router gate an engine builds with the checkpoint's quantization method, so the
#: gate is quantized when the checkpoint's targets match it and no ignore entry excludes it. Source:
#: vLLM 0.32 `model_executor/models/qwen3_moe.py:170-175` builds `GateLinear` with `quant_config`
#: (`layers/fused_moe/router/gate_linear.py:21`); see docs/models.md. Every other router (and
#: Qwen's `shared_expert_gate`) is built without one and stays unquantized.
ROUTER_FOLLOWS_CHECKPOINT = {
    "qwen3_moe": "vLLM 0.32 models/qwen3_moe.py builds the router (GateLinear) with the checkpoint's quant_config",
}


class Scheme:
    """A dialect's reading of one checkpoint. Subclasses implement `_part`.

    `bind` gives it the checkpoint's names (`oracle.models.checkpoint_names`) and the model
    type; `resolve` then matches every list against the names the checkpoint uses.
    """

    dialect = "none"

    def __init__(self, view: ConfigView | None = None, detail: str = ""):
        self.view = view
        self.detail = detail
        self.names: CheckpointNames | None = None
        self.model_type = ""
        self.quantized_in_index: frozenset[str] = frozenset()
        #: (Quant, the key that said so) when the config gives routed experts their own dtype
        self.expert_quant: tuple[Quant, str] | None = None

    @property
    def source(self) -> str:
        return self.view.source if self.view is not None else ""

    def bind(self, names: CheckpointNames | None, model_type: str = "", *,
             quantized_in_index: set[str] | frozenset[str] = frozenset()) -> None:
        """`quantized_in_index`: checkpoint modules whose index entries include quantization companion
        tensors (scales, packed weights): with an index, a router stored without any is unquantized."""
        self.names = names
        self.model_type = model_type
        self.quantized_in_index = frozenset(quantized_in_index)

    def _aliases(self, part: str, expert: int | None) -> tuple[str, ...]:
        if self.names is None:
            return (part,)
        return self.names.aliases(part) if expert is None else self.names.expert_aliases(part, expert)

    def resolve(self, module: Module) -> Resolution:
        """(Quant, why) for a quantized module, (None, why) for an unquantized one.

        A MoE module is resolved for expert 0 and for every expert a list names; experts (or
        fused parts) in two different formats are an InputError naming both entries.
        """
        if module.role in ROUTER_ROLES:
            if not (module.role == "gate" and self.model_type in ROUTER_FOLLOWS_CHECKPOINT):
                return None, "router gate: engines build this architecture's router without a quantization method"
            stored = self._stored_unquantized(module)
            if stored is not None:
                return None, stored
        experts: tuple[int | None, ...] = (None,)
        if module.op == "moe" and self.names is not None:
            experts = self.names.experts_named(module)
        first: tuple[int | None, Resolution, str] | None = None
        for e in experts:
            results = [self._part(self._aliases(p, e), module) for p in module.parts]
            res, entry = self._combine(module, results)
            if first is None:
                first = (e, res, entry)
            elif res[0] != first[1][0]:
                raise InputError(f"{module.name}: experts {first[0]} and {e} of one fused MoE module have different "
                                 f"formats ({_describe_or_none(first[1][0])} from {first[2] or 'the default'}, "
                                 f"{_describe_or_none(res[0])} from {entry or 'the default'}); expected one format "
                                 "for every expert", source=self.source or None)
        assert first is not None
        if module.op == "moe" and first[1][0] is not None and self.expert_quant is not None:
            return self.expert_quant[0], ""     # quantized experts, in the dtype the config gives them
        return first[1]

    def _stored_unquantized(self, module: Module) -> str | None:
        """Why a router the lists would quantize is stored unquantized, when the safetensors index says so."""
        if self.names is None or not self.names.index:
            return None
        present = [a for p in module.parts for a in self.names.aliases(p) if a in self.names.index]
        if not present or any(a in self.quantized_in_index for a in present):
            return None
        quant, why = self._part(tuple(a for p in module.parts for a in self.names.aliases(p)), module)
        if quant is None:
            return None
        return (f"the checkpoint stores {present[0]} without quantization tensors although {why} targets it "
                "(vLLM 0.32 would build it quantized); served as stored")

    def _combine(self, module: Module, results: list[tuple[Quant | None, str]]) -> tuple[Resolution, str]:
        quants = {q for q, _ in results}
        if quants == {None}:
            return (None, results[0][1]), results[0][1]
        if len(quants) == 1:
            q, why = results[0]
            return (q, ""), why
        formats = {q for q in quants if q is not None}
        if len(formats) > 1:
            (qa, wa), (qb, wb) = [next(r for r in results if r[0] == q) for q in list(formats)[:2]]
            raise InputError(f"{module.name}: parts of one fused module have different formats "
                             f"({_describe(qa)} from {wa or 'the default'}, {_describe(qb)} from {wb or 'the default'}); "
                             "expected one format per fused module", source=self.source or None)
        shown = ", ".join(f"{n.rsplit('.', 1)[-1]}: {q.weight_format if q else 'unquantized'}"
                          for n, (q, _) in zip(module.parts, results))
        why = f"fused parts disagree ({shown}); served unquantized"
        return (None, why), why

    def _part(self, names: tuple[str, ...], module: Module) -> tuple[Quant | None, str]:
        """(Quant or None, the entry or rule that decided) for one part, given its checkpoint names."""
        return None, "checkpoint is not quantized"

    # ---- coverage (what the config names, for oracle.models.coverage) ----------------
    def name_lists(self) -> list[NameList]:
        return []

    def unused_groups(self) -> list[tuple[str, str]]:
        """(key, description) of declared groups that quantized no part (after `resolve` ran)."""
        return []


def _describe_or_none(q: Quant | None) -> str:
    return _describe(q) if q is not None else "unquantized"


def _explicit_only(module: Module) -> bool:
    return module.role in EXPLICIT_ONLY_ROLES


# ---------------------------------------------------------------- HF-style dialects
class _SkipListScheme(Scheme):
    """Dialects that quantize every decoder linear/MoE weight except a skip list."""

    skip_keys = ("modules_to_not_convert",)

    def __init__(self, view: ConfigView, quant: Quant, detail: str):
        entries: list[str] = []
        for key in self.skip_keys:
            entries += view.str_list(key)
        self.skip_key = next((k for k in self.skip_keys if k in view), self.skip_keys[0])
        self.skip = NameMatcher(entries, source=view.source, field=view.key(self.skip_key), rule="transformers")
        self.quant = quant
        super().__init__(view, detail + (f"; {len(entries)} {self.skip_key} entries" if entries else ""))

    def name_lists(self) -> list[NameList]:
        return [NameList(self.source, self.view.key(self.skip_key), "ignore", self.skip)]

    def _part(self, names: tuple[str, ...], module: Module) -> Resolution:
        hit = self.skip.match_any(names)
        if hit is not None:
            return None, f"{self.skip_key}: {hit}"
        if _explicit_only(module):
            return None, f"{self.dialect} checkpoints leave {module.role} unquantized"
        return self.quant, f"quant_method {self.dialect}"


class Mxfp4Scheme(_SkipListScheme):
    dialect = "mxfp4"

    def __init__(self, view: ConfigView):
        super().__init__(view, Quant("mxfp4", None, 32), "quant_method mxfp4 (weight-only MXFP4)")


class Fp8Scheme(_SkipListScheme):
    dialect = "fp8"
    skip_keys = ("modules_to_not_convert", "ignored_layers")

    def __init__(self, view: ConfigView):
        fmt = fp8_element_format(view)
        if fmt != "e4m3":
            raise view.error("fmt", f"unsupported FP8 element format {view.raw('fmt')!r} ({fmt}); no kernel "
                             "format for it: expected e4m3 (float8_e4m3fn)")
        scheme = view.str("activation_scheme", "dynamic")
        if scheme not in ("dynamic", "static"):
            raise view.error("activation_scheme", f"expected 'dynamic' or 'static', got {scheme!r}")
        block = view.list("weight_block_size", None)
        if block is None:
            # HF/vLLM fp8: static = the checkpoint's input_scale; dynamic = one scale per tensor per call.
            kind = "static_tensor" if scheme == "static" else "dynamic_tensor"
            quant, what = Quant("fp8_tensor", "fp8", activation_scale=kind), "per-tensor"
        else:
            if len(block) != 2 or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block):
                raise view.error("weight_block_size", f"expected two positive integers [N, K], got {block!r}")
            if scheme == "static":
                raise view.error("activation_scheme", f"'static' contradicts weight_block_size {block}: block FP8 "
                                 "quantizes activations dynamically per 1 x K-block group; expected 'dynamic'")
            quant = Quant("fp8_block", "fp8", block[1], activation_scale="dynamic_group",
                          weight_block=(block[0], block[1]))
            what = f"{block[0]}x{block[1]} blocks"
        acts = {"static_tensor": "static per-tensor", "dynamic_tensor": "dynamic per-tensor",
                "dynamic_group": f"dynamic 1x{block[1] if block else 0} group"}[quant.activation_scale or ""]
        super().__init__(view, quant, f"quant_method fp8 ({what}, {acts} activation scales)")


class GptqAwqScheme(_SkipListScheme):
    """GPTQ and AWQ: int4 weights, BF16/FP16 activations (W4A16)."""

    def __init__(self, view: ConfigView, method: str):
        self.dialect = method
        bits = view.int("bits", None) or view.int("w_bit", None)
        if bits is None:
            raise view.error("bits", "required key is missing; expected 4")
        if bits != 4:
            raise view.error("bits", f"{bits}-bit {method.upper()} is not supported; expected 4 (int4)")
        group = view.raw("group_size", view.raw("q_group_size", 128))
        if not isinstance(group, int) or isinstance(group, bool) or (group < 1 and group != -1):
            raise view.error("group_size", f"expected a positive integer or -1, got {group!r}")
        group_size = None if group == -1 else group
        extras = []
        if method == "gptq":
            extras.append(f"desc_act {view.bool('desc_act', False)}")
            extras.append(f"sym {view.bool('sym', True)}")
            self.lm_head = view.bool("lm_head", False)
        else:
            extras.append(f"zero_point {view.bool('zero_point', True)}")
            self.lm_head = False
        dynamic = view.sub("dynamic")  # a mapping of module-name patterns (None when absent)
        dynamic_keys = list(dynamic.data) if dynamic is not None else []
        self.negative = NameMatcher([k[2:] for k in dynamic_keys if k.startswith("-:")],
                                    source=view.source, field=view.key("dynamic"), rule="transformers")
        if any(not k.startswith("-:") for k in dynamic_keys):
            raise view.error("dynamic", "per-module bit/group overrides are not supported; "
                             "only '-:' (skip) entries are")
        gs = "per-channel" if group_size is None else f"group {group_size}"
        super().__init__(view, Quant("int4", None, group_size),
                         f"quant_method {method} (int4 W4A16, {gs}, {', '.join(extras)})")

    def name_lists(self) -> list[NameList]:
        return [*super().name_lists(), NameList(self.source, self.view.key("dynamic"), "ignore", self.negative)]

    def _part(self, names: tuple[str, ...], module: Module) -> Resolution:
        if self.negative:
            hit = self.negative.match_any(names)
            if hit is not None:
                return None, f"dynamic: -:{hit}"
        if module.role == "lm_head" and self.lm_head:
            return self.quant, "lm_head: true"
        return super()._part(names, module)


# ---------------------------------------------------------------- compressed-tensors
_CT_FORMATS = ("float-quantized", "naive-quantized", "pack-quantized", "nvfp4-pack-quantized",
               "mxfp4-pack-quantized", "mxfp8-quantized", "int-quantized")
_FP8_STRATEGIES = {"tensor": "fp8_tensor", "channel": "fp8_channel", "block": "fp8_block"}


@dataclass
class _CtGroup:
    name: str
    quant: Quant
    class_targets: frozenset[str]
    names: NameMatcher
    key: str = ""
    targets: tuple[str, ...] = ()


class CompressedTensorsScheme(Scheme):
    dialect = "compressed-tensors"

    def __init__(self, view: ConfigView):
        self.format = view.str("format", "float-quantized")
        groups_view = view.sub("config_groups", required=True)
        self.groups: list[_CtGroup] = []
        for gname in groups_view.data:
            g = groups_view.sub(gname, required=True)
            fmt = g.str("format", self.format)
            if fmt == "mixed-precision":      # groups of a mixed-precision config: the weights say which
                fmt = "float-quantized" if (g.sub("weights", required=True).raw("type") == "float") else "pack-quantized"
            if fmt not in _CT_FORMATS:
                raise g.error("format", f"unknown compressed-tensors format {fmt!r}; expected one of "
                              + ", ".join(_CT_FORMATS))
            quant = _ct_quant(g, fmt)
            if quant.activation_format is None and g.sub("input_activations") is None:
                # input_activations: null declares A16: the policy's activation order (which may
                # quantize activations of an undeclared checkpoint) must not apply
                quant = replace(quant, activation_format="bf16")
            targets = g.str_list("targets")
            if not targets:
                raise g.error("targets", "required key is missing; expected a list such as ['Linear']")
            classes = frozenset(t for t in targets if not t.startswith("re:") and "." not in t
                                and t[:1].isupper())
            names = NameMatcher([t for t in targets if t not in classes], source=g.source, field=g.key("targets"),
                                rule="compressed-tensors")
            self.groups.append(_CtGroup(gname, quant, classes, names, g.key("targets"), tuple(targets)))
        self.ignore = NameMatcher(view.str_list("ignore"), source=view.source, field=view.key("ignore"),
                                  rule="compressed-tensors")
        kinds = ", ".join(f"{g.name}: {_describe(g.quant)}" for g in self.groups)
        n_ignore = len(view.str_list("ignore"))
        self.used_groups: set[str] = set()
        super().__init__(view, f"compressed-tensors {self.format} ({kinds}); {n_ignore} ignore entries")

    def name_lists(self) -> list[NameList]:
        lists = [NameList(self.source, g.key, "target", g.names) for g in self.groups]
        return [*lists, NameList(self.source, self.view.key("ignore"), "ignore", self.ignore)]

    def class_targets(self) -> list[tuple[str, str]]:
        """(key, class name) of every class target ('Linear', 'Embedding', ...)."""
        return [(g.key, c) for g in self.groups for c in sorted(g.class_targets)]

    def unused_groups(self) -> list[tuple[str, str]]:
        return [(g.key.rsplit(".", 1)[0], f"config group {g.name!r} ({_describe(g.quant)}, targets "
                 f"{', '.join(g.targets[:2])}{', ...' if len(g.targets) > 2 else ''})")
                for g in self.groups if g.name not in self.used_groups]

    def _part(self, names: tuple[str, ...], module: Module) -> Resolution:
        hit = self.ignore.match_any(names)
        if hit is not None:
            return None, f"ignore: {hit}"
        for group in self.groups:
            target = group.names.match_any(names) if group.names else None
            if target is not None:
                self.used_groups.add(group.name)
                return group.quant, f"{group.name} target {target}"   # a target naming the module beats a class target
        wanted = "Embedding" if module.op == "embedding" else "Linear"
        by_class = next((g for g in self.groups if wanted in g.class_targets), None)
        if by_class is None:
            return None, "no config_groups target matches"
        if module.op == "moe" and not any(n.startswith(module.name + ".0.") for n in names):
            return None, ("class targets reach nn.Linear modules; fused expert parameters "
                          f"({names[0].rsplit('.', 1)[-1]}) are not Linear modules, so the writer left them unquantized")
        if module.role == "lm_head":
            return None, "class targets apply to decoder layers; lm_head is quantized only when a target names it"
        self.used_groups.add(by_class.name)
        return by_class.quant, f"{by_class.name} target Linear"


def _ct_quant(g: ConfigView, fmt: str) -> Quant:
    w = g.sub("weights", required=True)
    a = g.sub("input_activations")
    wtype = w.str("type", "int")
    bits = w.int("num_bits")
    strategy = w.str("strategy", "tensor")
    group = w.opt_int("group_size")
    act_bits = a.int("num_bits") if a is not None else None
    act_type = a.str("type", "int") if a is not None else None
    if fmt == "nvfp4-pack-quantized" or (wtype == "float" and bits == 4 and group == 16):
        _expect(w, "num_bits", bits, 4, "nvfp4")
        act = "nvfp4" if (act_type, act_bits) == ("float", 4) else None
        _check_act(a, act, ("float", 4), "NVFP4 W4A4")
        return Quant("nvfp4", act, group or 16)
    if fmt == "mxfp4-pack-quantized" or (wtype == "float" and bits == 4):
        _expect(w, "num_bits", bits, 4, "mxfp4")
        act = {("float", 4): "mxfp4", ("float", 8): "mxfp8"}.get((act_type, act_bits)) if a else None
        if a is not None and act is None:
            raise a.error("num_bits", f"MXFP4 weights with {act_type} {act_bits}-bit activations "
                          "are not supported; expected 4- or 8-bit float, or no input_activations")
        return Quant("mxfp4", act, group or 32)
    if fmt == "mxfp8-quantized" or (wtype == "float" and bits == 8 and strategy == "group" and group == 32):
        _expect(w, "num_bits", bits, 8, "mxfp8")
        act = "mxfp8" if (act_type, act_bits) == ("float", 8) else None
        _check_act(a, act, ("float", 8), "MXFP8 W8A8")
        return Quant("mxfp8", act, group or 32)
    if wtype == "float":
        _expect(w, "num_bits", bits, 8, "float weights")
        fmt_name = _FP8_STRATEGIES.get(strategy)
        if fmt_name is None:
            raise w.error("strategy", f"FP8 weights with strategy {strategy!r} are not supported; "
                          "expected tensor, channel or block")
        group_size, block = None, None
        blocks = w.raw("block_structure")
        if fmt_name == "fp8_block":
            blocks = w.list("block_structure")
            if len(blocks) != 2 or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in blocks):
                raise w.error("block_structure", f"expected [N, K] block sizes, got {blocks!r}")
            group_size, block = blocks[1], (blocks[0], blocks[1])
        elif blocks is not None:
            raise w.error("block_structure", f"strategy {strategy!r} contradicts block_structure {blocks!r}; "
                          "expected null, or strategy 'block'")
        act, scale = None, None
        if a is not None:
            if (act_type, act_bits) != ("float", 8):
                raise a.error("num_bits", f"FP8 weights with {act_type} {act_bits}-bit activations are "
                              "not supported; expected 8-bit float activations or none")
            act, scale = "fp8", _ct_activation_scale(a, block)
        return Quant(fmt_name, act, group_size, activation_scale=scale, weight_block=block)
    if wtype == "int":
        if bits not in (4, 8):
            raise w.error("num_bits", f"int{bits} weights ({fmt}) are not supported; "
                          "expected 4- or 8-bit int (W4A16, W4A8, W4AFP8, W8A8, W8A16) or a float format")
        if strategy not in ("group", "channel"):
            raise w.error("strategy", f"int{bits} strategy {strategy!r} is not supported; expected group or channel")
        if bits == 8 and w.raw("symmetric", True) is not True:
            raise w.error("symmetric", "asymmetric int8 weights are not supported; expected symmetric: true")
        act, scale = None, None
        if a is not None:
            act = {("int", 8): "int8", ("float", 8): "fp8"}.get((act_type, act_bits))
            if act is None:
                raise a.error("num_bits", f"int{bits} weights with {act_type} {act_bits}-bit activations are not "
                              "supported; expected int 8-bit (W4A8, W8A8), float 8-bit (W4AFP8) or none")
            a_strategy = a.str("strategy", "tensor")
            if a_strategy != "token" or a.raw("dynamic", True) is not True or a.raw("symmetric", True) is not True:
                raise a.error("strategy", f"{act} activations with strategy {a_strategy!r} are not supported; "
                              "expected dynamic symmetric per-token scales (strategy token, dynamic true)")
            scale = "dynamic_token" if act == "fp8" else None
        return Quant(f"int{bits}", act, group if strategy == "group" else None, activation_scale=scale)
    raise w.error("type", f"expected 'int' or 'float', got {wtype!r}")


_CT_SCALE_KINDS = {("tensor", False): "static_tensor", ("tensor", True): "dynamic_tensor",
                   ("token", True): "dynamic_token", ("group", True): "dynamic_group"}


def _ct_activation_scale(a: ConfigView, block: tuple[int, int] | None) -> str:
    """The FP8 activation-scale kind of compressed-tensors input_activations (strategy x dynamic)."""
    strategy = a.str("strategy", "tensor")
    dynamic = a.raw("dynamic", None)
    if dynamic is None:  # unstated: per-token/per-group scales exist only at run time; tensor keeps the library default
        dynamic = strategy in ("token", "group")
    if not isinstance(dynamic, bool):
        raise a.error("dynamic", f"expected true or false for FP8 activations, got {dynamic!r}")
    kind = _CT_SCALE_KINDS.get((strategy, dynamic))
    if kind is None:
        if (strategy, dynamic) in (("token", False), ("group", False)):
            raise a.error("dynamic", f"strategy {strategy!r} contradicts dynamic: false; per-{strategy} FP8 "
                          "activation scales are computed at run time (expected dynamic: true)")
        raise a.error("strategy", f"FP8 activations with strategy {strategy!r} are not supported; "
                      "expected tensor, token or group")
    if kind == "dynamic_group":
        group = a.opt_int("group_size")
        if group is None:
            raise a.error("group_size", "required for strategy 'group'; expected the K width of each group, e.g. 128")
        if block is not None and group != block[1]:
            raise a.error("group_size", f"activation groups of 1x{group} contradict the weights' "
                          f"block_structure {list(block)}; expected {block[1]}")
    return kind


def _expect(view: ConfigView, key: str, got: int, want: int, what: str) -> None:
    if got != want:
        raise view.error(key, f"{what} needs {want}-bit weights, got {got}")


def _check_act(a: ConfigView | None, act: str | None, want: tuple[str, int], what: str) -> None:
    if a is not None and act is None:
        raise a.error("num_bits", f"{what} expects {want[0]} {want[1]}-bit input_activations "
                      f"(or none for weight-only), got {a.raw('type')} {a.raw('num_bits')}-bit")


def _describe(q: Quant) -> str:
    act = "weight-only" if q.activation_format in (None, "bf16") else q.activation_format
    if q.activation_format == "fp8":
        act += f" {q.activation_scale or 'unknown-scale'}"
    block = f" {q.weight_block[0]}x{q.weight_block[1]}" if q.weight_block else ""
    return f"{q.weight_format}{block}/{act}"


# ---------------------------------------------------------------- ModelOpt
#: ModelOpt `quant_algo` values (modelopt/torch/export/model_config.py QUANTIZATION_*, written upper-case
#: into hf_quant_config.json; vLLM docs/features/quantization/modelopt.md) -> the format they declare.
_MODELOPT_ALGOS = {
    "FP8": Quant("fp8_tensor", "fp8", activation_scale="static_tensor"),     # ModelOpt stores input_scale
    "FP8_PER_CHANNEL_PER_TOKEN": Quant("fp8_channel", "fp8", activation_scale="dynamic_token"),
    "FP8_PC_PT": Quant("fp8_channel", "fp8", activation_scale="dynamic_token"),
    "FP8_PB_WO": Quant("fp8_block", None, 128, weight_block=(128, 128)),   # block FP8 weight-only
    "FP8_PB_REAL": Quant("fp8_block", "fp8", 128, activation_scale="dynamic_group", weight_block=(128, 128)),
    "NVFP4": Quant("nvfp4", "nvfp4", 16),
    "W4A16_NVFP4": Quant("nvfp4", None, 16),                                # weight-only NVFP4
    "W4A8_NVFP4_FP8": Quant("nvfp4", "fp8", 16, activation_scale="static_tensor"),
    "MXFP8": Quant("mxfp8", "mxfp8", 32),
    "MXFP4": Quant("mxfp4", "mxfp4", 32),
    "W4A8_MXFP4_FP8": Quant("mxfp4", "fp8", 32, activation_scale="static_tensor"),
}
#: quant_algo values ModelOpt writes for which no kernel format exists (an error that says so).
_MODELOPT_UNSUPPORTED = {
    "INT4_AWQ": "int4 AWQ with pre-quant scales", "W4A8_AWQ": "int4 AWQ weights with FP8 activations",
    "NVFP4_AWQ": "NVFP4 with AWQ pre-quant scales", "NVFP4_SVDQUANT": "NVFP4 with SVDQuant low-rank branches",
    "INT8_SQ": "int8 SmoothQuant W8A8", "INT8_WO": "int8 weight-only",
}
_CODECS = {"IQ2_XS": "iq2_xs", "IQ2_XXS": "iq2_xxs", "Q8_0": "q8_0"}
_NORM_HINTS = ("norm", "layernorm")


class ModelOptScheme(Scheme):
    dialect = "modelopt"

    def __init__(self, view: ConfigView):
        algo = view.str("quant_algo")
        self.algo = algo
        self.exclude = NameMatcher(view.str_list("exclude_modules") + view.str_list("ignore"),
                                   source=view.source, field=view.key("exclude_modules"), rule="modelopt")
        self.layers: dict[str, Quant] = {}
        self.layer_matcher: NameMatcher | None = None
        kv = view.raw("kv_cache_quant_algo")
        if algo.upper() == "MIXED_PRECISION":
            per_layer = view.sub("quantized_layers", required=True)
            for lname in per_layer.data:
                _reject_vectors(per_layer, lname)
                entry = per_layer.sub(lname, required=True)
                self.layers[lname] = _modelopt_quant(entry, entry.str("quant_algo"))
            self.layer_matcher = NameMatcher(self.layers, source=view.source, field=view.key("quantized_layers"),
                                             rule="modelopt-layers")
            self.quant = None
            algos = sorted({_describe(q) for q in self.layers.values()})
            what = f"MIXED_PRECISION, {len(self.layers)} quantized_layers ({', '.join(algos)})"
        else:
            self.quant = _modelopt_quant(view, algo)
            what = f"{algo} ({_describe(self.quant)})"
        kv_text = f", kv cache {kv}" if kv else ""
        super().__init__(view, f"ModelOpt {what}{kv_text}")

    def name_lists(self) -> list[NameList]:
        lists = [NameList(self.source, self.view.key("exclude_modules"), "ignore", self.exclude)]
        if self.layer_matcher is not None:
            lists.append(NameList(self.source, self.view.key("quantized_layers"), "quantized_layers",
                                  self.layer_matcher))
        return lists

    def _part(self, names: tuple[str, ...], module: Module) -> Resolution:
        hit = self.exclude.match_any(names)
        if hit is not None:
            return None, f"exclude_modules: {hit}"
        if self.layer_matcher is not None:
            entry = self.layer_matcher.match_any(names)
            if entry is None:
                return None, "not listed in quantized_layers"
            return self.layers[entry], f"quantized_layers: {entry}"
        if _explicit_only(module):
            return None, f"ModelOpt {self.algo} leaves {module.role} unquantized"
        return self.quant, f"quant_algo {self.algo}"


def _reject_vectors(per_layer: ConfigView, lname: str) -> None:
    last = lname.rsplit(".", 1)[-1].lower()
    if any(h in last for h in _NORM_HINTS) or last in ("bias", "e_score_correction_bias"):
        raise per_layer.error(lname, "quantized normalization weights and other packed vectors are not "
                              "supported; only linear and expert weights may be quantized")


def _modelopt_quant(view: ConfigView, algo: str) -> Quant:
    if algo in _CODECS:
        fmt = _CODECS[algo]
        block, payload = CODEC_BLOCKS[fmt]
        packing = view.str("packing")
        if packing != "ggml":
            raise view.error("packing", f"{algo} needs packing 'ggml', got {packing!r}")
        group = view.int("group_size")
        got_payload = view.int("block_payload_bytes")
        if (group, got_payload) != (block, payload):
            raise view.error("block_payload_bytes" if group == block else "group_size",
                             f"{algo} blocks are group_size {block} with block_payload_bytes {payload}, "
                             f"got {group}/{got_payload}")
        return Quant(fmt, None, block)
    quant = _MODELOPT_ALGOS.get(algo.upper())
    if quant is None:
        known = ", ".join([*_MODELOPT_ALGOS, *_CODECS, "MIXED_PRECISION"])
        what = _MODELOPT_UNSUPPORTED.get(algo.upper())
        if what:
            raise view.error("quant_algo", f"ModelOpt quant_algo {algo!r} ({what}) has no kernel format here; "
                             f"expected one of {known}")
        raise view.error("quant_algo", f"unsupported ModelOpt quant_algo {algo!r}; expected one of {known}")
    group = view.opt_int("group_size")
    if group is not None and quant.group_size is not None and group != quant.group_size:
        raise view.error("group_size", f"{algo} uses group_size {quant.group_size}, got {group}")
    return quant


# ---------------------------------------------------------------- detection
def detect_scheme(files: ModelFiles, text: ConfigView) -> Scheme:
    """The dialect of a checkpoint (see the module docstring for the order), with the experts' own dtype."""
    scheme = _detect(files, text)
    dtype, key = expert_dtype(text)
    # DeepSeek writes expert_dtype beside its own quant_method fp8 config; a ModelOpt or compressed-tensors
    # file names the experts' format itself and wins (nvidia/DeepSeek-V4-Flash-NVFP4 keeps the original's
    # expert_dtype "fp4" while its quantized_layers make the experts NVFP4).
    if dtype is not None and scheme.dialect == "fp8":
        fmt, group = dtype
        scheme.expert_quant = (Quant(fmt, None, group), f"{key}: {text.raw(key)}")
        scheme.detail += f"; experts {text.raw(key)} ({key}): {fmt} weights, group {group}"
    return scheme


def _detect(files: ModelFiles, text: ConfigView) -> Scheme:
    qc = files.config.sub("quantization_config")
    if qc is None and text is not files.config:
        qc = text.sub("quantization_config")
    if qc is not None:
        return _from_quantization_config(qc, files)
    if "hf_quant_config.json" in files.siblings:
        return _modelopt_from_file(files.siblings["hf_quant_config.json"])
    if "quantize_config.json" in files.siblings:
        view = files.siblings["quantize_config.json"]
        method = _method(view, default="gptq")
        if method not in ("gptq", "awq"):
            raise view.error("quant_method", f"expected 'gptq' or 'awq', got {method!r}")
        return GptqAwqScheme(view, method)
    return Scheme(None, "none (no quantization_config, hf_quant_config.json or quantize_config.json)")


def _method(view: ConfigView, default: str | None = None) -> str:
    method = view.str("quant_method") if default is None else view.str("quant_method", default)  # required
    return _METHOD_ALIASES.get(method.lower(), method.lower())


def _from_quantization_config(qc: ConfigView, files: ModelFiles) -> Scheme:
    method = _method(qc)
    if method == "mxfp4":
        return Mxfp4Scheme(qc)
    if method == "fp8":
        return Fp8Scheme(qc)
    if method == "compressed-tensors":
        return CompressedTensorsScheme(qc)
    if method in ("gptq", "awq"):
        return GptqAwqScheme(qc, method)
    if method == "modelopt":
        if "quant_algo" in qc:
            return ModelOptScheme(qc)
        nested = qc.sub("quantization")
        if nested is not None:
            return ModelOptScheme(nested)
        if "hf_quant_config.json" in files.siblings:
            return _modelopt_from_file(files.siblings["hf_quant_config.json"])
        raise qc.error("quant_algo", "required key is missing (and no hf_quant_config.json beside it)")
    raise qc.error("quant_method", f"unknown quant_method {method!r}; expected one of {', '.join(KNOWN_METHODS)}")


def _modelopt_from_file(view: ConfigView) -> Scheme:
    nested = view.sub("quantization")
    return ModelOptScheme(nested if nested is not None else view)


