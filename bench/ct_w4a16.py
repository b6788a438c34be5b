"""Write benchmark checkpoints with torch and safetensors alone (no compressed-tensors, no network).

A random BF16 checkpoint of a transformers config, and a random compressed-tensors `pack-quantized`
W4A16 checkpoint of the same geometry (the model built on the meta device gives the tensor names and
shapes): symmetric int4, one scale per group of 128 along K, each value + 8 stored eight to an int32
along K, low nibble first, beside `weight_scale` [N, K/128] in BF16 and `weight_shape` [2]; its
config.json carries the quantization_config compressed-tensors writes for its W4A16 preset. The
codes are random words, not a quantization of the BF16 weights: a load benchmark reads and repacks
bytes, whatever they encode, and random words take no time to make (the GPU round allows seconds).
tests/test_bench_ct_w4a16.py checks the W4A16 files against compressed-tensors' own decompression.

For machines without compressed-tensors (the GPU device): bench/bench_hf_load.py --writer plain.
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


def _shapes(config: Any) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of the checkpoint transformers saves for `config` (tied heads left out)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    shapes = {name: tuple(p.shape) for name, p in model.state_dict().items()}
    if getattr(config, "tie_word_embeddings", False):
        shapes.pop("lm_head.weight", None)
    return shapes


POOL = 1 << 20     # random values drawn once, then laid out cyclically from a random start per tensor


def _tiled(pool: torch.Tensor, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """A tensor of `shape` filled from `pool` cyclically from a random offset: random-looking values at the
    speed of a copy (drawing 0.5B normals one by one took most of a GPU round's seconds)."""
    numel = 1
    for d in shape:
        numel *= d
    start = int(torch.randint(0, pool.numel(), (1,), generator=gen))
    reps = (start + numel + pool.numel() - 1) // pool.numel()
    return pool.repeat(reps)[start:start + numel].reshape(shape)      # a contiguous view of its own buffer


def _plain(name: str, shape: tuple[int, ...], gen: torch.Generator, pool: torch.Tensor) -> torch.Tensor:
    if name.endswith("norm.weight"):
        return torch.ones(shape, dtype=torch.bfloat16)
    return _tiled(pool, shape, gen)


def _save(directory: Path, tensors: dict[str, torch.Tensor], config: dict) -> Path:
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory


def write_random_bf16(directory: Path, config: Any, seed: int = 0, std: float = 0.02) -> Path:
    """A transformers-format BF16 checkpoint of `config` (a PretrainedConfig) with random weights."""
    gen = torch.Generator().manual_seed(seed)
    pool = (torch.randn(POOL, generator=gen) * std).to(torch.bfloat16)
    tensors = {name: _plain(name, shape, gen, pool) for name, shape in _shapes(config).items()}
    return _save(directory, tensors, config.to_dict())


def write_random_w4a16(directory: Path, config: Any, seed: int = 0, std: float = 0.02,
                       group: int = GROUP) -> Path:
    """A compressed-tensors W4A16 (pack-quantized, symmetric, group `group`) checkpoint of `config`: every
    targeted linear weight as random int32 words and scales near std / 4, everything else random BF16."""
    gen = torch.Generator().manual_seed(seed)
    pool = (torch.randn(POOL, generator=gen) * std).to(torch.bfloat16)
    words = torch.randint(-2 ** 31, 2 ** 31 - 1, (POOL,), dtype=torch.int32, generator=gen)
    scales = ((torch.rand(POOL, generator=gen) + 0.5) * std / 4).to(torch.bfloat16)
    tensors: dict[str, torch.Tensor] = {}
    for name, shape in _shapes(config).items():
        if name.endswith(LINEAR_SUFFIXES) and len(shape) == 2 and shape[1] % group == 0:
            n, k = shape
            module = name.removesuffix(".weight")
            tensors[f"{module}.weight_packed"] = _tiled(words, (n, k // 8), gen)
            tensors[f"{module}.weight_scale"] = _tiled(scales, (n, k // group), gen)
            tensors[f"{module}.weight_shape"] = torch.tensor([n, k], dtype=torch.int64)
        else:
            tensors[name] = _plain(name, shape, gen, pool)
    qc = json.loads(json.dumps(QUANTIZATION_CONFIG))
    qc["config_groups"]["group_0"]["weights"]["group_size"] = group
    return _save(directory, tensors, {**config.to_dict(), "quantization_config": qc})
