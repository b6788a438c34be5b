"""config.json (+ sibling quantization file) -> Model: the layers one rank asks kernels for."""
from __future__ import annotations

from ..errors import InputError
from ..layer import EmbeddingLayer, LinearLayer, MoELayer, field_errors
import re
from dataclasses import replace

from .architectures import ARCHITECTURES, CLASS_NAMES, NESTED_LAYOUTS, TEXT_ONLY, Layout, build_modules
from ..checkpoints.layouts import LAYOUTS
from .checkpoint_names import CheckpointNames
from .coverage import check_coverage
from .model import Model, ModelLayer, Module, Quant
from .quant import Scheme, detect_scheme
from .source import ConfigView, ModelFiles, load_model_files

#: Tensor suffixes that only a quantized module carries (every layout row's non-`weight` tensor).
QUANT_COMPANIONS = frozenset(row.suffix for row in LAYOUTS if row.suffix != "weight")
_DTYPES = {"bfloat16": ("bfloat16", "bf16"), "float16": ("float16", "fp16"), "float32": ("float32", "fp32")}


def load_model(model: str, *, tp: int = 1, ep: int = 1, accept_partial: bool = False) -> Model:
    """Read a model folder, config.json or shipped example name, and derive its layers for one rank.

    `accept_partial`: a config group or quantized_layers entry that matches no derived module is
    a warning instead of an error (`oracle explain --accept-partial-coverage`).
    """
    files = load_model_files(model)
    return model_from_files(files, tp=tp, ep=ep, accept_partial=accept_partial)


def model_from_files(files: ModelFiles, *, tp: int = 1, ep: int = 1, accept_partial: bool = False) -> Model:
    top = files.config
    text = _text_config(top)
    model_type, arch_name = _model_type(top, text)
    scheme = detect_scheme(files, text)
    dtype, unquantized = _dtype(top, text)
    derivation = "architecture table"
    if model_type not in ARCHITECTURES and _transformers_knows(model_type):
        from .meta import meta_modules   # imports transformers and torch: only on this path
        modules, notes = meta_modules(top, text, model_type, tp, ep, TEXT_ONLY)
        generic, derivation = False, "transformers meta-device model"
    else:
        modules, notes, generic = build_modules(text, model_type, tp, ep, TEXT_ONLY)
        if generic:
            derivation = "generic fallback"
    checkpoint = files.tensor_modules()
    if text is not top:
        layout = _nested_layout(top, modules, scheme, checkpoint)
        modules = [_relayout(m, layout) for m in modules]
        notes.append(f"multimodal checkpoint: decoder layers named {layout.base}.layers.N, head {layout.head} "
                     "(the layout the checkpoint's own names use)")
        if isinstance(top.raw("vision_config"), dict):
            notes.append("vision tower not listed: only the text decoder's layers are")
    lists = scheme.name_lists()
    names = CheckpointNames.build(modules, index=checkpoint,
                                  targets=[x.matcher for x in lists if x.kind in ("target", "quantized_layers")],
                                  lists=[x.matcher for x in lists if x.kind not in ("target", "quantized_layers")])
    scheme.bind(names, model_type, quantized_in_index=files.quantized_tensor_modules(QUANT_COMPANIONS))
    try:
        layers = [_layer(m, scheme, dtype, unquantized) for m in modules]
    except InputError as exc:
        if exc.source:       # already names its file (a quantization list)
            raise
        raise InputError(str(exc), source=top.source) from None  # the config these shapes came from
    names_from = derivation + (" + model.safetensors.index.json" if checkpoint else "")
    notes += _name_notes(names)
    if checkpoint:
        notes += _index_notes(modules, names, checkpoint)
    blocks = {m.block for m in modules if m.block is not None}
    coverage = check_coverage(scheme, names, sum(1 for m in layers if m.quantized), names_from=names_from,
                              checkpoint=checkpoint, blocks=max(blocks) + 1 if blocks else None,
                              accept_partial=accept_partial)
    return Model(name=files.name, files=files.paths, architecture=arch_name, model_type=model_type,
                 dialect=scheme.dialect, dialect_detail=scheme.detail or scheme.dialect, tp=tp, ep=ep,
                 layers=layers, notes=notes, generic=generic, example=files.example, derivation=derivation,
                 coverage=coverage, checkpoint_names=names)


def shipped_architectures() -> list[tuple[str, list[Module]]]:
    """(model_type, modules) of one shipped example per architecture, for docs/models.md's alias table.

    Regenerate it with `python -c "from oracle.models.build import shipped_architectures as s;
    from oracle.models.checkpoint_names import render_markdown as r; print(r(s()))"`.
    """
    from .source import example_names
    out: dict[str, list[Module]] = {}
    for name in example_names():
        model = load_model(name)
        out.setdefault(model.model_type, model.checkpoint_names.modules)
    return sorted(out.items())


def _relayout(m: Module, layout: Layout) -> Module:
    """A module derived with text-only names, renamed into `layout`."""
    return replace(m, name=layout.rename(m.name), parts=tuple(layout.rename(p) for p in m.parts))


def _nested_layout(top: ConfigView, modules: list[Module], scheme: Scheme, checkpoint: list[str]) -> Layout:
    """The multimodal layout whose names the checkpoint uses: its index first, then its quantization lists.

    Without either to go by, the transformers version that wrote the config decides (5 and later
    nest the language model under model.language_model).
    """
    major = re.match(r"\d+", str(top.raw("transformers_version") or ""))
    default = NESTED_LAYOUTS[1] if major and int(major.group()) >= 5 else NESTED_LAYOUTS[0]
    known = set(checkpoint)
    lists = scheme.name_lists()

    first = min((m.block for m in modules if m.block is not None), default=None)
    # decoder layers only: a bare 'lm_head' entry is how checkpoints of either layout name the head
    sample = [m for m in modules if m.block is not None and m.block - first < 4]   # enough to tell them apart

    def score(layout: Layout) -> tuple[int, int, bool]:
        names = [layout.rename(n) for m in sample for n in (m.name, *m.parts)]
        in_index = sum(1 for n in names if n in known)
        matched = sum(len(lst.matcher.matched_entries(names)) for lst in lists)
        return in_index, matched, layout == default
    return max(NESTED_LAYOUTS, key=score)


def _transformers_knows(model_type: str) -> bool:
    """Whether transformers (when installed) has a config class for `model_type`; never imports torch."""
    from importlib.util import find_spec
    if find_spec("transformers") is None or find_spec("torch") is None:
        return False
    from .meta import knows_model_type
    return knows_model_type(model_type)


def _name_notes(names: CheckpointNames) -> list[str]:
    """What the checkpoint calls differently from the derived names (a few shapes, then a count)."""
    renamed = names.renamed
    if not renamed:
        return []
    shown = "; ".join(f"{d} -> {c}" for d, c in list(renamed.items())[:4])
    more = f" (and {len(renamed) - 4} more)" if len(renamed) > 4 else ""
    return [f"checkpoint names differ from the derived ones (# = any index): {shown}{more}; quantization lists "
            "were matched against the checkpoint's names"]


def _index_notes(modules: list[Module], names: CheckpointNames, checkpoint: list[str]) -> list[str]:
    """Derived parts whose checkpoint names are not in the index: the report's names differ from the weights'."""
    known = set(checkpoint)
    parents = {n.rsplit(".", 1)[0] for n in known}
    missing = [p for m in modules for p in m.parts
               if not any(a in known or a in parents for a in names.aliases(p))]
    if not missing:
        return ["module names checked against model.safetensors.index.json: every derived part is in the checkpoint"]
    return [f"{len(missing)} derived module names are not in model.safetensors.index.json "
            f"(e.g. {', '.join(missing[:3])}): no checkpoint name the name tables know stands for them, "
            "so list entries naming them may not apply"]


def _text_config(top: ConfigView) -> ConfigView:
    """Multimodal configs nest the language model under text_config (named as `_nested_layout` finds)."""
    text = top.sub("text_config")
    if text is not None and "hidden_size" in text:
        return text
    return top


def _model_type(top: ConfigView, text: ConfigView) -> tuple[str, str]:
    """model_type of the text model; a nested text_config without one is resolved from `architectures`."""
    classes = [a for view in (text, top) if text is not top or view is top
               for a in view.list("architectures", []) if isinstance(a, str)]
    arch_name = next(iter(classes), "")
    model_type = text.raw("model_type")
    top_type = top.raw("model_type") if text is not top else None
    for view, value in ((text, model_type), (top, top_type)):
        if value is not None and not isinstance(value, str):   # 3 must not fall back to another reading
            raise view.error("model_type", f"expected a string such as 'qwen3_moe', got {value!r}")
    if isinstance(model_type, str) and model_type:
        return model_type, arch_name or model_type
    candidates = [CLASS_NAMES.get(c, "") for c in classes] + [_snake(c) for c in classes]
    if isinstance(top_type, str) and top_type:
        candidates += [f"{top_type}_text", top_type]
    found = next((c for c in candidates if c in ARCHITECTURES), "")
    if not found and isinstance(top_type, str) and _transformers_knows(top_type):
        from .meta import text_model_type
        found = text_model_type(top_type) if text is not top else top_type
    if not found:
        raise text.error("model_type", "required key is missing, and neither architectures "
                         f"({', '.join(classes) or 'none'}) nor the top-level model_type names a known model")
    return found, arch_name or found


def _snake(class_name: str) -> str:
    """'Qwen3MoeForConditionalGeneration' -> 'qwen3_moe', transformers' naming of model types."""
    stem = re.sub(r"(For\w+|Model)$", "", class_name)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", stem).lower()


def _dtype(top: ConfigView, text: ConfigView) -> tuple[str, str]:
    for view in (text, top):
        for key in ("torch_dtype", "dtype"):
            value = view.raw(key)
            if value is None:
                continue
            if not isinstance(value, str) or value not in _DTYPES:
                raise view.error(key, f"expected one of {', '.join(_DTYPES)}, got {value!r}")
            return _DTYPES[value]
    return _DTYPES["bfloat16"]


def _layer(module: Module, scheme: Scheme, dtype: str, unquantized: str) -> ModelLayer:
    quant, why = scheme.resolve(module)
    if quant is None and scheme.dialect != "none" and not why:
        why = "not quantized by the checkpoint"
    fmt = quant or Quant(unquantized)
    shape = module.shape
    try:
        if module.op == "linear":
            spec = LinearLayer(name=module.name, weight_format=fmt.weight_format,
                               activation_format=fmt.activation_format, dtype=dtype,
                               group_size=fmt.group_size, activation_scale=fmt.activation_scale,
                               weight_block=fmt.weight_block, **shape)
        elif module.op == "moe":
            spec = MoELayer(name=module.name, weight_format=fmt.weight_format,
                            activation_format=fmt.activation_format, dtype=dtype,
                            group_size=fmt.group_size, activation_scale=fmt.activation_scale,
                            weight_block=fmt.weight_block, **shape)
        else:
            shape = {k: v for k, v in shape.items()}
            spec = EmbeddingLayer(name=module.name, weight_format=fmt.weight_format, dtype=dtype, **shape)
    except ValueError as exc:  # pydantic: a shape the config implies but a layer cannot have
        raise InputError(f"cannot describe {module.name}: {field_errors(exc)}") from None
    return ModelLayer(block=module.block, role=module.role, layer=spec, parts=module.parts,
                      quant_note=why if quant is None else "")
