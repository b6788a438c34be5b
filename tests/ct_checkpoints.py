"""Tiny checkpoints written by compressed-tensors' own code (a test helper, not a test).

A random tiny Qwen3 is built with transformers; compressed-tensors applies a preset
scheme (`apply_quantization_config`), its `calculate_qparams` / `generate_gparam` turn
observed min/max ranges into scales (the observer's job: min/max per tensor, row, group
or 128x128 block), and `ModelCompressor.compress_model` packs the tensors; the state dict
and the config it writes (`update_config`) form the checkpoint. The reference model is
the same library's `decompress_model` of that checkpoint, run in BF16.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

TINY = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, max_position_embeddings=256, tie_word_embeddings=False)
ACT_RANGE = 8.0      # the activation range assumed when a scheme has static input scales


def tiny_qwen3(seed: int = 0):
    from transformers import AutoModelForCausalLM, Qwen3Config
    torch.manual_seed(seed)
    cfg = Qwen3Config(**TINY)
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    with torch.no_grad():      # transformers initialises with std 0.02: widen so logits differ between tokens
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.08)
    return model.eval()


def _ranges(w: torch.Tensor, args) -> tuple[torch.Tensor, torch.Tensor]:
    """min/max of the weight per the scheme's strategy (what an observer measures)."""
    strategy = str(args.strategy.value if hasattr(args.strategy, "value") else args.strategy)
    w = w.float()
    if strategy == "tensor":
        return w.amin().reshape(1), w.amax().reshape(1)
    if strategy == "channel":
        return w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True)
    if strategy in ("group", "tensor_group"):
        g = w.unflatten(-1, (-1, args.group_size))
        return g.amin(dim=-1), g.amax(dim=-1)
    if strategy == "block":
        bn, bk = args.block_structure
        n, k = w.shape
        pad = torch.zeros(math.ceil(n / bn) * bn, math.ceil(k / bk) * bk)
        pad[:n, :k] = w
        b = pad.unflatten(1, (-1, bk)).unflatten(0, (-1, bn))
        return b.amin(dim=(1, 3)), b.amax(dim=(1, 3))
    raise ValueError(strategy)


def _fusion_key(name: str) -> str:
    """q/k/v and gate/up share one NVFP4 global scale, as llm-compressor exports them (vLLM fuses them)."""
    parent, _, leaf = name.rpartition(".")
    return f"{parent}.{ {'q_proj': 'qkv', 'k_proj': 'qkv', 'v_proj': 'qkv', 'gate_proj': 'gate_up', 'up_proj': 'gate_up'}.get(leaf, leaf)}"


def _fused_ranges(model, fusion_key=_fusion_key) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    out: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear):
            key = fusion_key(name)
            lo, hi = m.weight.float().amin(), m.weight.float().amax()
            if key in out:
                lo, hi = torch.minimum(lo, out[key][0]), torch.maximum(hi, out[key][1])
            out[key] = (lo, hi)
    return out


def calibrate(model, scheme: str, ignore: list[str] | None = None, fusion_key=_fusion_key):
    """apply_quantization_config + qparams from min/max (the observer's job) -> a compressor, then compress.

    `fusion_key` names the modules that share one global scale (NVFP4), as llm-compressor fuses them."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config, preset_name_to_scheme
    from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam

    qc = QuantizationConfig(config_groups={"group_0": preset_name_to_scheme(scheme, ["Linear"])},
                            ignore=ignore if ignore is not None else ["lm_head", "re:.*mlp.gate$"])
    apply_quantization_config(model, qc, show_progress=False)
    fused = _fused_ranges(model, fusion_key)
    with torch.no_grad():
        for name, m in model.named_modules():
            s = getattr(m, "quantization_scheme", None)
            if s is None:
                continue
            gscale = None
            if hasattr(m, "weight_global_scale"):
                gscale = generate_gparam(*fused[fusion_key(name)])
                m.weight_global_scale.data.copy_(gscale.reshape(m.weight_global_scale.shape))
            lo, hi = _ranges(m.weight, s.weights)
            scale, zp = calculate_qparams(lo, hi, s.weights, global_scale=gscale)
            m.weight_scale.data = scale.to(m.weight_scale.dtype).reshape(m.weight_scale.shape)
            if hasattr(m, "weight_zero_point"):
                m.weight_zero_point.data = zp.to(m.weight_zero_point.dtype).reshape(m.weight_zero_point.shape)
            if hasattr(m, "input_global_scale"):
                m.input_global_scale.data.copy_(generate_gparam(torch.tensor(-ACT_RANGE), torch.tensor(ACT_RANGE))
                                                .reshape(m.input_global_scale.shape))
            if hasattr(m, "input_scale") and s.input_activations is not None and not s.input_activations.dynamic:
                a, _ = calculate_qparams(torch.tensor([-ACT_RANGE]), torch.tensor([ACT_RANGE]), s.input_activations)
                m.input_scale.data = a.to(m.input_scale.dtype).reshape(m.input_scale.shape)
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    return compressor


def put(root: torch.nn.Module, dotted: str, module: torch.nn.Module) -> None:
    *path, leaf = dotted.split(".")
    for part in path:
        if not hasattr(root, part):
            root.add_module(part, torch.nn.Module())
        root = getattr(root, part)
    root.add_module(leaf, module)


def _expert_view(model) -> torch.nn.Module:
    """Per-expert nn.Linear modules (`...experts.<e>.gate_proj` ...) over transformers 5's fused experts:
    the names and modules compressed-tensors targets in real MoE checkpoints."""
    view = torch.nn.Module()
    for name, p in model.named_parameters():
        if not name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
            continue
        base = name.rsplit(".", 1)[0]
        for e in range(p.shape[0]):
            parts = {"down_proj": p[e]} if name.endswith("down_proj") else dict(zip(("gate_proj", "up_proj"), p[e].chunk(2)))
            for proj, w in parts.items():
                lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype)
                lin.weight.data = w.detach().clone()
                put(view, f"{base}.{e}.{proj}", lin)
    return view


def write_checkpoint(directory: Path, scheme: str, seed: int = 0, moe: bool = False) -> Path:
    """Quantize a tiny Qwen3 (or, with `moe`, Qwen3-MoE) with compressed-tensors preset `scheme`; save it."""
    from safetensors.torch import save_file

    model = tiny_qwen3_moe(seed) if moe else tiny_qwen3(seed)
    state = {}
    if moe:
        experts = _expert_view(model)
        calibrate(experts, scheme)
        state.update(experts.state_dict())
    compressor = calibrate(model, scheme)
    state.update({k: v for k, v in model.state_dict().items() if not k.endswith(("experts.gate_up_proj",
                                                                                 "experts.down_proj"))})
    directory.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(directory)
    save_file({k: v.contiguous() for k, v in state.items()}, str(directory / "model.safetensors"),
              metadata={"format": "pt"})
    compressor.update_config(str(directory))     # (transformers 5 writes the expert count as num_local_experts)
    return directory


def tiny_qwen3_moe(seed: int = 0):
    from tf_checkpoints import FP8_TINY
    from transformers import AutoModelForCausalLM, Qwen3MoeConfig
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(Qwen3MoeConfig(**FP8_TINY)).to(torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.08)
    return model.eval()


def decompress_into(model, qc, state: dict, activations: bool) -> None:
    """Load compressed tensors into the modules compressed-tensors prepared, then decompress each."""
    from compressed_tensors.compressors.base import decompress_module
    from compressed_tensors.config import CompressionFormat
    from compressed_tensors.quantization import apply_quantization_config

    apply_quantization_config(model, qc, show_progress=False)
    for name, m in model.named_modules():
        quantized = getattr(m, "quantization_scheme", None) is not None
        for pname in list(m._parameters):
            if quantized and f"{name}.{pname}" not in state and m._parameters[pname] is not None:
                del m._parameters[pname]       # e.g. the float weight, replaced by weight_packed
        for key, t in state.items():
            mod, _, leaf = key.rpartition(".")
            if mod == name:
                m._parameters[leaf] = torch.nn.Parameter(t, requires_grad=False)
    for _, m in model.named_modules():
        if getattr(m, "quantization_scheme", None) is not None:
            decompress_module(m, CompressionFormat(qc.format), leave_decompressed=activations)


def reference_model(directory: Path, *, activations: bool = False):
    """compressed-tensors' own decompression of the checkpoint into a BF16 transformers model.

    Every quantized module's saved tensors go through the library's compressor for the
    checkpoint's format (`decompress_module`, the code its loaders run); the weights land in
    a plain BF16 model (per-expert weights stacked into transformers' fused experts). With
    `activations`, the library's quantization forward wrappers are kept, so activations are
    quantized-dequantized as the scheme declares (W8A8, W4A4).
    """
    from compressed_tensors.quantization import QuantizationConfig, QuantizationStatus
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    qc = QuantizationConfig.model_validate(json.loads((directory / "config.json").read_text())["quantization_config"])
    qc.quantization_status = QuantizationStatus.COMPRESSED
    cfg = AutoConfig.from_pretrained(str(directory))
    del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    state = load_file(str(directory / "model.safetensors"))
    if any(".experts.0." in k for k in state):
        experts = _expert_view(model)
        decompress_into(experts, qc, {k: v for k, v in state.items() if ".experts." in k}, activations=False)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
                    base = name.rsplit(".", 1)[0]
                    parts = ("down_proj",) if name.endswith("down_proj") else ("gate_proj", "up_proj")
                    for e in range(p.shape[0]):
                        p[e].copy_(torch.cat([experts.get_submodule(f"{base}.{e}.{q}").weight for q in parts]))
        state = {k: v for k, v in state.items() if ".experts." not in k}
    decompress_into(model, qc, state, activations)
    return model.to(torch.bfloat16).eval()


def tinygemm_step(kernel) -> torch.Tensor | None:
    """Each weight's quantization step ([N, K], its group's scale) when `kernel` is torch's tinygemm (CPU or
    CUDA) serving int4 with zero points, else None. tinygemm keeps (8 - z) * scale as one BF16 number
    (2**-9 relative) and rounds the dequantized weight once more: within 1/16 of this step of the library's."""
    name = getattr(getattr(kernel, "spec", None), "name", "")
    sz = getattr(kernel, "sz", None)
    if name not in ("torch.linear.int4_cpu", "torch.linear.int4_tinygemm") or sz is None or not bool(sz[..., 1].any()):
        return None
    return sz[..., 0].float().t().repeat_interleave(kernel.group, dim=1)

