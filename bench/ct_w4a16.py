"""Write benchmark checkpoints with torch and safetensors alone (no compressed-tensors, no network).

A random BF16 checkpoint of a transformers config (the model built on the meta device for its
tensor names and shapes, random values written shard by shard), and its compressed-tensors
`pack-quantized` W4A16 twin: symmetric int4, one scale per group of 128 along K, the value + 8
stored eight to an int32 along K, low nibble first, beside `weight_scale` [N, K/128] in the
weight's dtype and `weight_shape` [2]; config.json carries the quantization_config
compressed-tensors writes for its W4A16 preset. tests/test_bench_ct_w4a16.py checks the result
against compressed-tensors' own decompression.

For machines without compressed-tensors (the GPU device): bench/bench_hf_load.py uses it there.
The scale rule (amax / 7.5, codes clamped to -8..7) is compressed-tensors' symmetric one; only the
file format matters for a load benchmark.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

GROUP = 128
#: modules compressed-tensors' W4A16 preset targets in a decoder (its `Linear` target minus lm_head)
LINEAR_SUFFIXES = tuple(f"{p}.weight" for p in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                "down_proj"))
QUANTIZATION_CONFIG = {
    "config_groups": {"group_0": {
        "format": "pack-quantized", "input_activations": None, "output_activations": None, "targets": ["Linear"],
        "weights": {"dynamic": False, "group_size": GROUP, "num_bits": 4, "strategy": "group", "symmetric": True,
                    "type": "int"}}},
    "format": "pack-quantized", "global_compression_ratio": None, "ignore": ["lm_head"], "kv_cache_scheme": None,
    "quant_method": "compressed-tensors", "quantization_status": "compressed", "sparsity_config": {},
    "version": "0.20.1"}


def write_random_bf16(directory: Path, config: Any, seed: int = 0, std: float = 0.02) -> Path:
    """A transformers-format BF16 checkpoint of `config` (a PretrainedConfig) with random weights."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    directory.mkdir(parents=True, exist_ok=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    shapes = {name: tuple(p.shape) for name, p in model.state_dict().items()}
    if getattr(config, "tie_word_embeddings", False):
        shapes.pop("lm_head.weight", None)
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in shapes.items():
        if name.endswith("norm.weight"):
            tensors[name] = torch.ones(shape, dtype=torch.bfloat16)
        else:
            tensors[name] = (torch.randn(shape, generator=gen) * std).to(torch.bfloat16)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(directory)
    return directory


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """Codes 0..15 [N, K] -> int32 [N, K/8], element 8j+i in bits 4i..4i+3 of word j."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int64)
    words = (codes.to(torch.int64).unflatten(-1, (-1, 8)) << shifts).sum(dim=-1)
    return torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)


def quantize_weight(w: torch.Tensor, group: int = GROUP) -> dict[str, torch.Tensor]:
    """One [N, K] weight -> weight_packed, weight_scale, weight_shape (compressed-tensors' names)."""
    n, k = w.shape
    groups = w.float().unflatten(-1, (k // group, group))
    scale = (groups.abs().amax(dim=-1, keepdim=True) / 7.5).to(w.dtype).float()
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = torch.round(groups / scale).clamp(-8, 7).flatten(-2) + 8
    return {"weight_packed": pack_int4(codes), "weight_scale": scale.squeeze(-1).to(w.dtype),
            "weight_shape": torch.tensor([n, k], dtype=torch.int64)}


def quantize_dir(plain: Path, directory: Path, group: int = GROUP) -> Path:
    """The W4A16 twin of a BF16 checkpoint directory: every targeted linear weight packed, the rest copied."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    out: dict[str, torch.Tensor] = {}
    for shard in sorted(plain.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            for name in f.keys():
                t = f.get_tensor(name)
                if name.endswith(LINEAR_SUFFIXES) and t.dim() == 2 and t.shape[1] % group == 0:
                    module = name.removesuffix(".weight")
                    out.update({f"{module}.{key}": v for key, v in quantize_weight(t, group).items()})
                else:
                    out[name] = t
    save_file(out, str(directory / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((plain / "config.json").read_text())
    qc = json.loads(json.dumps(QUANTIZATION_CONFIG))
    qc["config_groups"]["group_0"]["weights"]["group_size"] = group
    config["quantization_config"] = qc
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory
