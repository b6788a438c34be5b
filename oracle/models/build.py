"""config.json (+ sibling quantization file) -> Model: the layers one rank asks kernels for."""
from __future__ import annotations

from ..errors import InputError
from ..layer import EmbeddingLayer, LinearLayer, MoELayer
from .architectures import CLASS_NAMES, build_modules
from .model import Model, ModelLayer, Module, Quant
from .quant import Scheme, detect_scheme
from .source import ConfigView, ModelFiles, load_model_files

_DTYPES = {"bfloat16": ("bfloat16", "bf16"), "float16": ("float16", "fp16"), "float32": ("float32", "fp32")}


def load_model(model: str, *, tp: int = 1, ep: int = 1) -> Model:
    """Read a model folder, config.json or shipped example name, and derive its layers for one rank."""
    files = load_model_files(model)
    return model_from_files(files, tp=tp, ep=ep)


def model_from_files(files: ModelFiles, *, tp: int = 1, ep: int = 1) -> Model:
    top = files.config
    text, prefix = _text_config(top)
    model_type, arch_name = _model_type(top, text)
    scheme = detect_scheme(files, text)
    dtype, unquantized = _dtype(top, text)
    modules, notes, generic = build_modules(text, model_type, tp, ep, prefix)
    if text is not top and isinstance(top.raw("vision_config"), dict):
        notes.append("vision tower not listed: only the text decoder's layers are")
    layers = [_layer(m, scheme, dtype, unquantized) for m in modules]
    return Model(name=files.name, files=files.paths, architecture=arch_name, model_type=model_type,
                 dialect=scheme.dialect, dialect_detail=scheme.detail or scheme.dialect, tp=tp, ep=ep,
                 layers=layers, notes=notes, generic=generic, example=files.example)


def _text_config(top: ConfigView) -> tuple[ConfigView, str]:
    """Multimodal configs nest the language model under text_config; its modules get 'language_model.'."""
    text = top.sub("text_config")
    if text is not None and "hidden_size" in text:
        return text, "language_model."
    return top, ""


def _model_type(top: ConfigView, text: ConfigView) -> tuple[str, str]:
    archs = top.raw("architectures") or text.raw("architectures") or []
    arch_name = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    model_type = text.raw("model_type")
    if not isinstance(model_type, str) or not model_type:
        model_type = CLASS_NAMES.get(arch_name, "")
    if not model_type:
        raise text.error("model_type", "required key is missing (and architectures names no known class)")
    return model_type, arch_name or model_type


def _dtype(top: ConfigView, text: ConfigView) -> tuple[str, str]:
    for view in (text, top):
        for key in ("torch_dtype", "dtype"):
            value = view.raw(key)
            if value is None:
                continue
            if value not in _DTYPES:
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
        raise InputError(f"cannot describe {module.name}: {exc}") from None
    return ModelLayer(block=module.block, role=module.role, layer=spec, parts=module.parts,
                      quant_note=why if quant is None else "")
