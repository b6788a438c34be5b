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
from .modules import FusedRunner, KernelExperts, KernelLinear

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
    device: str = "cpu"

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


def load_quantized(path: str | Path, *, device: str | None = None, platform: Any = None, config: Any = None,
                   policy: Any = None, env: Any = None, source: TensorSource | None = None) -> nn.Module:
    """The transformers model of checkpoint `path`, quantized modules served by oracle kernels.

    `platform` defaults to this machine's GPU (Platform.detect()); `device` to cuda when there is one.
    `source` replaces the directory's safetensors (same names and layouts; bench/synthetic.py makes
    random tensors on the GPU on demand, so a full-depth model needs no checkpoint on disk)."""
    from ..explain import build_report
    from ..models import load_model
    from ..platform import Platform

    start = time.perf_counter()
    root = Path(path)
    if not root.is_dir():
        raise InputError("expected a checkpoint directory (config.json + safetensors)", source=str(root))
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    preflight.refuse_remote_code(root)       # before transformers reads anything: no checkpoint code runs
    preflight.check_sidecars(root)
    desc = load_model(str(root))
    platform = platform or Platform.detect()
    report = build_report(desc, platform, config, policy=policy, env=env)
    if report.no_kernel:
        raise NoKernelError("no kernel can serve some quantized layers of this checkpoint on "
                            f"{platform.describe()}:\n" + "\n".join(g.decision.explain(g.first.layer) for g in report.no_kernel))
    src = source if source is not None else TensorSource.from_dir(root)
    try:
        preflight.before_build(desc, src, root)   # block sizes and bytes, before any allocation
        model = _build(root, desc)
        adapter = Adapter(desc.dialect, **_adapter_options(root))
        loaded = LoadReport(report=report, device=str(device))
        for row, decision in zip(desc.layers, report.decisions):
            if decision.status == "selected":
                loaded.kernels[row.name] = _install(model, adapter, src, row, decision, device)
        _load_plain(model, src, desc, device)
        _refuse_unclaimed(src)
    finally:
        src.close()
    model.to(device)          # buffers (rotary tables); parameters are already there
    model.eval()
    loaded.load_seconds = time.perf_counter() - start
    model.oracle = loaded
    _log.info("checkpoint_loaded", path=str(root), dialect=desc.dialect, device=str(device),
              kernels=len(loaded.kernels), seconds=round(loaded.load_seconds, 3))
    return model


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


def _build(root: Path, desc: Any) -> nn.Module:
    import transformers

    cfg = preflight.transformers_call(transformers.AutoConfig.from_pretrained, root / "config.json")
    for holder in (cfg, getattr(cfg, "text_config", None)):
        if holder is not None and hasattr(holder, "quantization_config"):
            delattr(holder, "quantization_config")      # the kernels are ours, not transformers' quantizer
    dtype = torch_dtype(desc.layers[0].layer.dtype) if desc.layers else torch.bfloat16
    with _parameters_on_meta():
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    if (root / "generation_config.json").is_file():
        model.generation_config = preflight.transformers_call(transformers.GenerationConfig.from_pretrained,
                                                              root / "generation_config.json")
    return model


def _adapter_options(root: Path) -> dict[str, Any]:
    """GPTQ's checkpoint_format (gptq: zeros stored minus one; gptq_v2: as is), wherever the config says it."""
    import json
    qc = json.loads((root / "config.json").read_text()).get("quantization_config") or {}
    side = root / "quantize_config.json"
    if "checkpoint_format" not in qc and side.is_file():
        qc = json.loads(side.read_text())
    return {"checkpoint_format": qc.get("checkpoint_format", "gptq")}


# ---------------------------------------------------------------- quantized layers
def _install(model: nn.Module, adapter: Adapter, src: TensorSource, row: Any, decision: Any, device: str) -> Any:
    layer = row.layer
    if layer.op == "linear":
        modules = [_submodule(model, name, src) for name in row.parts]
        args = adapter.linear(src, layer, [(name, m.out_features) for name, m in zip(row.parts, modules)])
    elif layer.op == "moe":
        args = adapter.moe(src, layer, row.parts)
    else:
        raise CheckpointError(f"quantized {layer.op} layers are not loaded by oracle.hf yet", tensor=layer.name)
    kernel = decision.instantiate(layer)
    kernel.process_weights(**{k: v.to(device) for k, v in args.items()})
    if layer.op == "linear":
        runner = FusedRunner(kernel, layer.in_features, layer.out_features)
        start = 0
        for name, module in zip(row.parts, modules):
            _replace(model, name, KernelLinear(runner, start, start + module.out_features, decision, layer.name))
            start += module.out_features
    else:
        _submodule(model, layer.name, src)
        _replace(model, layer.name, KernelExperts(kernel, decision))
    _log.info("layer_loaded", layer=layer.name, kernel=decision.kernel, mode=decision.mode,
              tensors=sorted(args))
    return kernel


def _submodule(model: nn.Module, name: str, src: TensorSource) -> nn.Module:
    try:
        return model.get_submodule(name)
    except AttributeError:
        raise CheckpointError("the transformers model of this config has no such module (architecture and "
                              "checkpoint disagree)", tensor=name, file=str(src.root)) from None


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


# ---------------------------------------------------------------- everything else
def _load_plain(model: nn.Module, src: TensorSource, desc: Any, device: str) -> None:
    """Unquantized parameters, read tensor by tensor; per-expert tensors stacked into fused ones."""
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    for name, param in list(model.named_parameters(remove_duplicate=False)):
        if name in src:
            tensor = _plain_tensor(src, name, tuple(param.shape))
        else:
            tensor = _stacked_experts(src, name, tuple(param.shape))
            if tensor is None:
                if tied and name.endswith("lm_head.weight"):
                    continue
                raise CheckpointError(f"missing tensor for parameter of shape {list(param.shape)}",
                                      tensor=name, file=str(src.root))
        _set_param(model, name, tensor.to(device=device, dtype=param.dtype))
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


def _stacked_experts(src: TensorSource, name: str, shape: tuple) -> torch.Tensor | None:
    """Fused expert parameters (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]) from
    per-expert checkpoint tensors (experts.<e>.gate_proj.weight, ...), as transformers itself converts them."""
    prefix, _, leaf = name.rpartition(".")
    pieces = {"gate_up_proj": ("gate_proj", "up_proj"), "down_proj": ("down_proj",)}.get(leaf)
    if pieces is None or not prefix.endswith("experts") or f"{prefix}.0.{pieces[0]}.weight" not in src:
        return None
    experts = [torch.cat([_plain_tensor(src, f"{prefix}.{e}.{p}.weight") for p in pieces]) for e in range(shape[0])]
    out = torch.stack(experts)
    if tuple(out.shape) != shape:
        raise CheckpointError(f"per-expert tensors stack to {list(out.shape)}, the model expects {list(shape)}",
                              tensor=f"{prefix}.0.{pieces[0]}.weight", file=src.file(f"{prefix}.0.{pieces[0]}.weight"))
    return out


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
