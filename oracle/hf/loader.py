"""Load a quantized checkpoint directory into a transformers model whose quantized modules run oracle kernels.

    model = oracle.hf.load_quantized("path/to/checkpoint", device="cuda")
    model.generate(ids, max_new_tokens=16)
    print(model.oracle.summary())          # the decisions travel with the model

Steps: the front end (oracle.models) reads config.json and the dialect; the engine decides
every layer; transformers builds the model with its parameters on the meta device; each
quantized module's tensors go through the dialect's adapter (oracle.checkpoints) into the
chosen kernel, which replaces the module; every other parameter is read from the shards
(lazily, one tensor at a time). Any checkpoint tensor nobody claimed, any parameter left
without a tensor, any kernel missing, is an error naming tensor and file, raised before the
model is returned: nothing half-loaded escapes.
"""
from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import structlog
import torch
from torch import nn

from ..checkpoints import Adapter, CheckpointError, TensorSource, preflight
from ..errors import InputError, NoKernelError
from ..formats import torch_dtype
from ..memory import release_freed_memory
from .modules import FusedRunner, KernelExperts, KernelLinear, PartKernels
from .naming import ModelNames

# Like the decision log (oracle.trace): JSON events on the stdlib logger "oracle.hf", silent
# unless the application configures logging (`oracle --log-decisions run ...` does).
_log = structlog.wrap_logger(
    logging.getLogger("oracle.hf"),
    processors=[structlog.stdlib.filter_by_level, structlog.processors.add_log_level,
                structlog.processors.JSONRenderer(sort_keys=True)],
    wrapper_class=structlog.stdlib.BoundLogger).bind()
#: checkpoint tensors that are derived state, not weights (older exports saved them)
_DERIVED = ("rotary_emb.inv_freq",)


@dataclass
class LoadReport:
    """What the loader did: the engine's report (every decision), kernels per layer, timings."""

    report: Any                                  # oracle.explain.Report
    kernels: dict[str, Any] = field(default_factory=dict)   # layer name -> kernel instance
    load_seconds: float = 0.0
    #: host seconds per loading phase (select, build, convert, kernels, plain): where a slow load goes
    #: (device work is asynchronous, so a phase may also pay for the previous one's at its first sync)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    device: str = "cpu"
    notes: list[str] = field(default_factory=list)

    def summary_lines(self) -> list[str]:
        from ..explain import block_label
        lines = []
        for g in self.report.groups:
            d = g.decision
            what = f"{d.kernel} [{d.mode}] activations {d.activation_format}" if d.status == "selected" \
                else d.status
            label = block_label(g.blocks)
            lines.append(f"{(label + '  ') if label else ''}{g.role}: {g.first.layer.weight_format} -> {what}")
        return lines


def load_quantized(path: str | Path, *, device: str | None = None, dtype: Any = None, platform: Any = None,
                   config: Any = None, policy: Any = None, env: Any = None, progress: bool | None = None,
                   requantize_fused: bool = False, source: TensorSource | None = None) -> nn.Module:
    """See oracle.hf.load_quantized (the documented entry point)."""
    start = time.perf_counter()
    device = resolve_device(device)
    model, loaded = _load(Path(path), device=device, dtype=dtype, platform=platform, config=config, policy=policy,
                          env=env, progress=progress, requantize_fused=requantize_fused, check=False,
                          source=source)
    model.to(device)          # buffers (rotary tables); parameters are already there
    model.eval()
    loaded.load_seconds = time.perf_counter() - start
    model.oracle = loaded
    _refuse_saving(model)
    _log.info("checkpoint_loaded", path=str(path), dialect=loaded.report.model.dialect, device=str(device),
              kernels=len(loaded.kernels), seconds=round(loaded.load_seconds, 3))
    return model


def check_checkpoint(path: str | Path, *, platform: Any = None, config: Any = None, policy: Any = None,
                     env: Any = None, requantize_fused: bool = False) -> LoadReport:
    """Every check `load_quantized` (and `oracle run`) makes, without building kernels or the model's weights.

    The same steps run: the front end and the engine's decisions (NoKernelError when some quantized
    layer has no kernel), every quantized layer's tensors read and converted by its dialect's adapter
    (names, dtypes, shapes, fused parts, experts), every other parameter's tensor found under the
    model's names with its dtype and shape checked from the safetensors header (not read), and no
    tensor left unclaimed. Memory stays at one layer's tensors. `oracle explain --checkpoint` runs it.
    """
    start = time.perf_counter()
    _, loaded = _load(Path(path), device="meta", dtype=None, platform=platform, config=config, policy=policy,
                      env=env, progress=False, requantize_fused=requantize_fused, check=True, source=None)
    loaded.load_seconds = time.perf_counter() - start
    return loaded


def _load(root: Path, *, device: str, dtype: Any, platform: Any, config: Any, policy: Any, env: Any,
          progress: bool | None, requantize_fused: bool, check: bool,
          source: TensorSource | None) -> tuple[nn.Module, LoadReport]:
    from ..explain import build_report
    from ..models import load_model
    from ..platform import Platform

    if not root.is_dir():
        raise InputError("expected a checkpoint directory (config.json + safetensors)", source=str(root))
    preflight.refuse_remote_code(root)       # before transformers reads anything: no checkpoint code runs
    preflight.check_sidecars(root)
    clock = _PhaseClock()
    desc = load_model(str(root))
    platform = platform or Platform.detect()
    report = build_report(desc, platform, config, policy=policy, env=env)
    if report.no_kernel:
        raise NoKernelError("no kernel can serve some quantized layers of this checkpoint on "
                            f"{platform.describe()}:\n" + "\n".join(g.decision.explain(g.first.layer) for g in report.no_kernel))
    src = source if source is not None else TensorSource.from_dir(root)
    try:
        preflight.before_build(desc, src, root)   # block sizes and bytes, before any allocation
        clock.lap("select")
        model = _build(root, desc, dtype)
        names = ModelNames(model)
        adapter = Adapter(desc.dialect, **_adapter_options(root))
        loaded = LoadReport(report=report, device=str(device), phase_seconds=clock.seconds)
        clock.lap("build")
        todo = [(_spelled(desc, row), d) for row, d in zip(desc.layers, report.decisions) if d.status == "selected"]
        plain_rows = [row for row, _ in todo if _left_unquantized(src, desc.dialect, row)]
        todo = [(row, d) for row, d in todo if row not in plain_rows]
        loaded.notes += [f"{row.name}: {WRITER_SKIPS} (a 16-bit weight): loaded unquantized"
                         for row in plain_rows]
        with _progress(len(todo), progress, root.name) as bar:
            for row, decision in todo:
                kernel = _install(model, names, adapter, src, row, decision, device, requantize_fused, check, clock)
                if kernel is not None:
                    loaded.kernels[decision_name(row)] = kernel
                release_freed_memory()
                bar.update(1)
        served = {names.module(p) for row, _ in todo for p in (row.parts if row.layer.op == "linear"
                                                                else (row.name,))} if check else set()
        _load_plain(model, names, src, device, check, served)
        release_freed_memory()
        clock.lap("plain")
        _skip_kv_scales(src)
        _refuse_unclaimed(src)
    finally:
        src.close()
    return model, loaded


WRITER_SKIPS = ("transformers' FP8 writer leaves weights that are not whole blocks in BF16 (and saves an "
                "uninitialized weight_scale_inv beside them, ignored here)")


def _spelled(desc: Any, row: Any) -> Any:
    """The row in the checkpoint's own names (oracle.models.checkpoint_names: the one home for which
    checkpoint names stand for a derived module); its derived name stays in `derived`."""
    import dataclasses

    names = getattr(desc, "checkpoint_names", None)
    parts = tuple(names.spelling(p) for p in row.parts) if names is not None else tuple(row.parts)
    if parts == tuple(row.parts):
        return row
    if row.layer.op == "moe" and all(".0." in p for p in parts):
        name = parts[0].rsplit(".0.", 1)[0]
    else:
        name = names.spelling(row.name)
    spelled = dataclasses.replace(row, layer=row.layer.model_copy(update={"name": name}), parts=parts)
    object.__setattr__(spelled, "derived", row.name)
    return spelled


def decision_name(row: Any) -> str:
    """The derived (report) name of a possibly respelled row: what model.oracle.kernels is keyed by."""
    return getattr(row, "derived", row.name)


def _left_unquantized(src: TensorSource, dialect: str, row: Any) -> bool:
    """A layer the config quantizes but its writer did not: transformers' fine-grained FP8 skips weights
    whose shape is not a multiple of the block (every part then has a 16-bit weight and no scale)."""
    if dialect != "fp8" or row.layer.op != "linear":
        return False
    for part in row.parts:
        weight = f"{part}.weight"
        if weight not in src or src.dtype(weight) not in ("BF16", "F16", "F32"):
            return False
    for part in row.parts:     # transformers 5.23 saves an uninitialized weight_scale_inv beside such weights
        if f"{part}.weight_scale_inv" in src:
            src.claimed.add(f"{part}.weight_scale_inv")
    return True


def resolve_device(text: str | None, field: str = "device") -> str:
    """cpu, cuda or cuda:N as torch names it (default: cuda when torch sees one, else cpu); a CUDA request on
    a torch without CUDA, or past the device count, is an InputError naming the field, not an assertion."""
    if text is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(str(text).strip())
    except (RuntimeError, ValueError, TypeError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise InputError(f"expected cpu, cuda or cuda:N, got {text!r}", field=field)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not count:
            build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}, no GPU visible"
            raise InputError(f"{text!r} asked for, but this torch {torch.__version__} ({build}) has no CUDA device; "
                             "use cpu or a CUDA build of torch", field=field)
        if device.index is not None and device.index >= count:
            raise InputError(f"{text!r}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}",
                             field=field)
    return str(device)


@contextlib.contextmanager
def _progress(total: int, wanted: bool | None, label: str) -> Iterator[Any]:
    """A tqdm bar over the quantized layers (stderr), or a no-op."""
    import sys

    show = wanted if wanted is not None else (total >= 16 and sys.stderr.isatty())
    if not show:
        yield _NoBar()
        return
    from tqdm.auto import tqdm
    with tqdm(total=total, desc=f"loading {label}", unit="layer", file=sys.stderr, leave=False, disable=False) as bar:
        yield bar


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass


def _refuse_saving(model: nn.Module) -> None:
    """save_pretrained / push_to_hub would write the kernels' packed tensors under the model's names: a
    checkpoint nothing reloads. Refused with one line naming what to do instead."""
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise InputError("a model loaded by oracle.hf holds kernel-packed tensors, not a checkpoint; "
                         "save_pretrained is refused: copy the original checkpoint directory instead",
                         field="save_pretrained")
    model.save_pretrained = refuse        # type: ignore[method-assign]
    model.push_to_hub = refuse            # type: ignore[method-assign]


# ---------------------------------------------------------------- building
@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Parameters are created on the meta device (no memory); buffers stay real (rotary tables)."""
    original = nn.Module.register_parameter

    def register(module: nn.Module, name: str, param: Any) -> None:
        original(module, name, param)
        if param is not None and param.device.type != "meta":
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=False)

    nn.Module.register_parameter = register
    try:
        yield
    finally:
        nn.Module.register_parameter = original


def _build(root: Path, desc: Any, dtype: Any) -> nn.Module:
    import transformers

    cfg = preflight.transformers_call(transformers.AutoConfig.from_pretrained, root / "config.json")
    for holder in (cfg, getattr(cfg, "text_config", None)):
        if holder is not None and hasattr(holder, "quantization_config"):
            delattr(holder, "quantization_config")      # the kernels are ours, not transformers' quantizer
    with _parameters_on_meta():
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=_dtype(dtype, desc))
    if (root / "generation_config.json").is_file():
        model.generation_config = preflight.transformers_call(transformers.GenerationConfig.from_pretrained,
                                                              root / "generation_config.json")
    return model


def _dtype(dtype: Any, desc: Any) -> torch.dtype:
    """`dtype` as a torch dtype (a name or a torch dtype); None: the checkpoint's (config torch_dtype)."""
    if dtype is None:
        return torch_dtype(desc.layers[0].layer.dtype) if desc.layers else torch.bfloat16
    return dtype_named(dtype)


def dtype_named(dtype: Any) -> torch.dtype:
    """A torch dtype, or its name ("bfloat16", "bf16", "float16", "fp16", "float32", "fp32"), as a torch dtype;
    anything else is an InputError on the `dtype` argument."""
    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    else:
        name = str(dtype)
    try:
        return torch_dtype({"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(name, name))
    except ValueError:
        raise InputError(f"expected bfloat16, float16 or float32, got {dtype!r}", field="dtype") from None


def _adapter_options(root: Path) -> dict[str, Any]:
    """GPTQ's checkpoint_format (gptq: zeros stored minus one; gptq_v2: as is), wherever the config says it."""
    import json
    qc = json.loads((root / "config.json").read_text()).get("quantization_config") or {}
    side = root / "quantize_config.json"
    if "checkpoint_format" not in qc and side.is_file():
        qc = json.loads(side.read_text())
    return {"checkpoint_format": qc.get("checkpoint_format", "gptq")}


# ---------------------------------------------------------------- quantized layers
#: weight formats whose fused parts each carry one scale for the whole part
PER_PART_SCALES = {"fp8_tensor": ("weight_scale", "weight_scale_inv"), "nvfp4": ("weight_global_scale",
                                                                                  "weight_scale_2")}


def _split_parts(src: TensorSource, row: Any, requantize: bool) -> bool:
    """Whether the parts of a fused linear layer keep their own per-tensor scales (one kernel each).

    Default (requantize False): parts whose per-tensor weight scales differ run as separate kernels, each
    with the scales its writer chose, as the writer's own model runs them (transformers and
    compressed-tensors keep q, k, v as three modules). Fusing them needs one scale: vLLM requantizes
    every part to the largest, which costs up to half an E4M3 step per weight (3.8-4.3% relative error
    per module measured, as much as FP8 itself). `requantize=True` fuses anyway (one GEMM, vLLM's choice).
    """
    layer = row.layer
    if requantize or layer.op != "linear" or len(row.parts) < 2 or layer.weight_format not in PER_PART_SCALES:
        return False
    values = []
    for part in row.parts:
        name = next((f"{part}.{s}" for s in PER_PART_SCALES[layer.weight_format] if f"{part}.{s}" in src), None)
        if name is None:
            return False
        values.append(src.peek(name).float().reshape(-1))
    return any(not torch.equal(values[0], v) for v in values[1:])


class _PhaseClock:
    """Host seconds per loading phase: `lap(name)` adds the time since the previous lap to `name`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self.last
        self.last = now


def _install(model: nn.Module, names: ModelNames, adapter: Adapter, src: TensorSource, row: Any, decision: Any,
             device: str, requantize: bool = False, check: bool = False, clock: _PhaseClock | None = None) -> Any:
    """Convert one quantized layer's tensors and put its kernel in the model (`check`: convert only)."""
    clock = clock or _PhaseClock()
    layer = row.layer
    if _split_parts(src, row, requantize):
        kernels = []
        for name in row.parts:
            module = _submodule(model, names.module(name), src, name)
            part = layer.model_copy(update={"out_features": module.out_features, "name": name})
            args = adapter.linear(src, part, [(name, module.out_features)])
            clock.lap("convert")
            if check:
                continue
            kernel = decision.instantiate(part)
            kernel.process_weights(**{k: v.to(device) for k, v in args.items()})
            clock.lap("kernels")
            runner = FusedRunner(kernel, part.in_features, part.out_features)
            _replace(model, names.module(name), KernelLinear(runner, 0, part.out_features, decision, name))
            kernels.append(kernel)
        _log.info("layer_loaded", layer=layer.name, kernel=decision.kernel, mode=decision.mode, parts=len(kernels))
        return None if check else PartKernels(kernels)
    if layer.op == "linear":
        modules = [_submodule(model, names.module(name), src, name) for name in row.parts]
        args = adapter.linear(src, layer, [(name, m.out_features) for name, m in zip(row.parts, modules)])
    elif layer.op == "moe":
        args = adapter.moe(src, layer, row.parts)
    else:
        raise CheckpointError(f"quantized {layer.op} layers are not loaded by oracle.hf yet", tensor=layer.name)
    clock.lap("convert")
    if check:
        if layer.op == "moe":
            _submodule(model, names.module(layer.name), src, layer.name)
        return None
    kernel = decision.instantiate(layer)
    kernel.process_weights(**{k: v.to(device) for k, v in args.items()})
    del args
    clock.lap("kernels")
    if layer.op == "linear":
        runner = FusedRunner(kernel, layer.in_features, layer.out_features)
        start = 0
        for name, module in zip(row.parts, modules):
            _replace(model, names.module(name), KernelLinear(runner, start, start + module.out_features, decision,
                                                             layer.name))
            start += module.out_features
    else:
        target = names.module(layer.name)
        _submodule(model, target, src, layer.name)
        _replace(model, target, KernelExperts(kernel, decision))
    _log.info("layer_loaded", layer=layer.name, kernel=decision.kernel, mode=decision.mode)
    return kernel


def _submodule(model: nn.Module, name: str, src: TensorSource, checkpoint_name: str = "") -> nn.Module:
    try:
        return model.get_submodule(name)
    except AttributeError:
        also = f" (checkpoint name {checkpoint_name})" if checkpoint_name and checkpoint_name != name else ""
        raise CheckpointError(f"the transformers model of this config has no such module{also} (architecture and "
                              "checkpoint disagree)", tensor=name, file=str(src.root)) from None


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


# ---------------------------------------------------------------- everything else
def _load_plain(model: nn.Module, names: ModelNames, src: TensorSource, device: str, check: bool = False,
                served: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Every parameter and persistent buffer the kernels did not replace, read tensor by tensor under the
    model's names (transformers' renamings; per-expert tensors gathered as its converters do). `check`:
    dtypes and shapes from the safetensors headers, nothing read, nothing set; `served` modules (the
    kernels' in check mode, where they are not installed) are skipped."""
    plain, gathered = names.tensors(n for n in src.names() if n not in src.claimed)
    by_model = {model_name: ckpt for ckpt, model_name in plain.items()}
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    fp32 = _kept_in_fp32(model)
    for name, param in list(model.named_parameters(remove_duplicate=False)):
        if name.rpartition(".")[0] in served:
            continue
        if check and (name in by_model or name in gathered):
            for ckpt in [by_model[name]] if name in by_model else [n for e in gathered[name].names() for n in e]:
                _plain_header(src, ckpt, tuple(param.shape) if name in by_model else None)
            continue
        if name in by_model:
            tensor = _plain_tensor(src, by_model[name], tuple(param.shape))
        elif name in gathered:
            tensor = _gather(src, gathered[name], tuple(param.shape))
        elif tied and name.endswith("lm_head.weight"):
            continue
        else:
            raise CheckpointError(f"missing tensor for parameter of shape {list(param.shape)}",
                                  tensor=name, file=str(src.root))
        _set_param(model, name, tensor.to(device=device, dtype=torch.float32 if fp32(name) else param.dtype))
    for name, buf in list(model.named_buffers()):
        if name in by_model and check:
            _plain_header(src, by_model[name], tuple(buf.shape))
        elif name in by_model:           # router buffers (e_score_correction_bias) and other saved state
            tensor = _plain_tensor(src, by_model[name], tuple(buf.shape))
            parent, _, leaf = name.rpartition(".")
            dtype = torch.float32 if fp32(name) else buf.dtype
            (model.get_submodule(parent) if parent else model)._buffers[leaf] = tensor.to(device=device, dtype=dtype)
    if check:
        return
    if tied:
        model.tie_weights()
    left = [n for n, p in model.named_parameters() if p.device.type == "meta"]
    if left:
        raise CheckpointError(f"{len(left)} parameters have no checkpoint tensor: {', '.join(left[:8])}",
                              file=str(src.root))


def _plain_tensor(src: TensorSource, name: str, shape: tuple | None = None) -> torch.Tensor:
    t = src.get(name)
    if not t.is_floating_point() or t.element_size() < 2:
        raise CheckpointError(f"a {t.dtype} tensor for a module the quantization config leaves unquantized: "
                              "the config's quantization does not match the tensors", tensor=name,
                              file=src.file(name))
    if shape is not None and tuple(t.shape) != shape:
        raise CheckpointError(f"expected shape {list(shape)}, got {list(t.shape)}", tensor=name, file=src.file(name))
    return t


def _kept_in_fp32(model: nn.Module) -> Any:
    """transformers' own rule: tensors named in the model's `_keep_in_fp32_modules_strict` (router correction
    biases) stay float32 whatever the model dtype, `_keep_in_fp32_modules` too under float16."""
    import re

    keep = set(getattr(model, "_keep_in_fp32_modules_strict", None) or [])
    if next((p.dtype for p in model.parameters()), None) == torch.float16:
        keep |= set(getattr(model, "_keep_in_fp32_modules", None) or [])
    if not keep:
        return lambda name: False
    pattern = re.compile(r"(^|\.)(" + "|".join(re.escape(k) for k in sorted(keep)) + r")($|\.)")
    return lambda name: pattern.search(name) is not None


_FLOAT_HEADERS = ("BF16", "F16", "F32", "F64")


def _plain_header(src: TensorSource, name: str, shape: tuple | None) -> None:
    """What _plain_tensor checks, from the header alone; the tensor counts as claimed."""
    head = src.header(name)
    if head.get("dtype") not in _FLOAT_HEADERS:
        raise CheckpointError(f"a {head.get('dtype')} tensor for a module the quantization config leaves "
                              "unquantized: the config's quantization does not match the tensors", tensor=name,
                              file=src.file(name))
    if shape is not None and tuple(head.get("shape", ())) != shape:
        raise CheckpointError(f"expected shape {list(shape)}, got {list(head.get('shape', ()))}", tensor=name,
                              file=src.file(name))
    src.claimed.add(name)


def _gather(src: TensorSource, g: Any, shape: tuple) -> torch.Tensor:
    """A fused expert parameter from per-expert tensors: each source stacked over experts, then the
    sources concatenated (transformers' MergeModulelist(dim=0) + Concatenate(dim))."""
    per_expert = g.names()
    first = per_expert[0][0]
    if len(per_expert) != shape[0] or len({len(p) for p in per_expert}) != 1:
        raise CheckpointError(f"per-expert tensors for {g.target} cover {len(per_expert)} experts with "
                              f"{sorted({len(p) for p in per_expert})} parts each; the model expects {shape[0]} "
                              "experts, every one with the same parts", tensor=first, file=src.file(first))
    stacks = [torch.stack([_plain_tensor(src, names[i]) for names in per_expert]) for i in range(len(per_expert[0]))]
    out = stacks[0] if len(stacks) == 1 else torch.cat(stacks, dim=g.concat_dim or 1)
    if tuple(out.shape) != shape:
        raise CheckpointError(f"per-expert tensors stack to {list(out.shape)}, the model expects {list(shape)}",
                              tensor=first, file=src.file(first))
    return out


#: KV-cache quantization scales (FP8 KV cache schemes): attention is transformers' own here, which keeps
#: its cache in the model dtype, so these scales have nothing to scale.
_KV_SCALES = (".k_scale", ".v_scale", ".kv_scale", ".q_scale", ".prob_scale", ".k_proj.output_scale",
              ".v_proj.output_scale")


def _skip_kv_scales(src: TensorSource) -> None:
    """Consume KV-cache scales with one warning line saying why (the cache stays in the model dtype)."""
    found = [n for n in src.names() if n not in src.claimed and n.endswith(_KV_SCALES)]
    if not found:
        return
    src.claimed.update(found)
    logging.getLogger("oracle.hf").warning(
        "oracle.hf: %d KV-cache scale tensors (e.g. %s) skipped: attention runs in transformers with its "
        "cache in the model dtype, so the FP8 KV-cache scheme is not applied", len(found), found[0])


def _set_param(model: nn.Module, name: str, tensor: torch.Tensor) -> None:
    parent, _, leaf = name.rpartition(".")
    module = model.get_submodule(parent) if parent else model
    module._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)


def _refuse_unclaimed(src: TensorSource) -> None:
    unknown = [n for n in src.unclaimed() if not n.endswith(_DERIVED)]
    if unknown:
        shown = ", ".join(f"{n} ({Path(src.file(n)).name})" for n in unknown[:12])
        more = f" and {len(unknown) - 12} more" if len(unknown) > 12 else ""
        raise CheckpointError(f"{len(unknown)} checkpoint tensors match no module of the model and no adapter "
                              f"layout (refused rather than left unused): {shown}{more}", file=str(src.root))
