"""Write benchmark checkpoints with torch and safetensors alone (no compressed-tensors, no network).

A random BF16 checkpoint of a transformers config, and random compressed-tensors checkpoints of the
same geometry (the model built on the meta device gives the tensor names and shapes), each as
compressed-tensors writes its preset, with the quantization_config it writes:
  W4A16        `pack-quantized`: symmetric int4, one BF16 scale per group of 128 along K, each value + 8
               stored eight to an int32 along K, low nibble first (`weight_packed` [N, K/8],
               `weight_scale` [N, K/128], `weight_shape` [2])
  W8A16        `pack-quantized` int8: each value + 128 stored four to an int32 along K, groups of 128
  W8A8         `int-quantized`: int8 `weight` [N, K], one BF16 scale per output channel [N, 1],
               activations int8 per token (dynamic)
  FP8_DYNAMIC  `float-quantized`: float8_e4m3fn `weight` [N, K], BF16 scales [N, 1], activations FP8
               per token (dynamic)
The codes are random words, not a quantization of the BF16 weights: a load benchmark reads and repacks
bytes, whatever they encode, and random words take no time to make (the GPU round allows seconds).
tests/test_bench_ct_w4a16.py checks every scheme against compressed-tensors' own decompression.

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


def _group(bits: int, group: int | None, fmt: str, activations: dict | None, typ: str = "int") -> dict:
    weights = {"dynamic": False, "group_size": group, "num_bits": bits, "strategy": "group" if group else "channel",
               "symmetric": True, "type": typ}
    return {"format": fmt, "input_activations": activations, "output_activations": None, "targets": ["Linear"],
            "weights": weights}


def _token(typ: str) -> dict:
    return {"dynamic": True, "group_size": None, "num_bits": 8, "strategy": "token", "symmetric": True, "type": typ}


#: scheme -> (quantization_config's group_0, bits a weight); W4A16 is QUANTIZATION_CONFIG's
SCHEMES = {
    "W4A16": (QUANTIZATION_CONFIG["config_groups"]["group_0"], 4),
    "W8A16": (_group(8, GROUP, "pack-quantized", None), 8),
    "W8A8": (_group(8, None, "int-quantized", _token("int")), 8),
    "FP8_DYNAMIC": (_group(8, None, "float-quantized", _token("float"), "float"), 8),
}


def write_random(directory: Path, config: Any, scheme: str, seed: int = 0, std: float = 0.02) -> Path:
    """A compressed-tensors `scheme` checkpoint (SCHEMES) of `config` with random codes: every targeted
    linear weight quantized as the preset lays it out, everything else random BF16."""
    if scheme == "W4A16":
        return write_random_w4a16(directory, config, seed, std)
    if scheme not in SCHEMES:
        raise ValueError(f"bench/ct_w4a16.py writes {sorted(SCHEMES)}, not {scheme!r}")
    group_cfg, _ = SCHEMES[scheme]
    gen = torch.Generator().manual_seed(seed)
    pool = (torch.randn(POOL, generator=gen) * std).to(torch.bfloat16)
    if scheme == "FP8_DYNAMIC":       # finite E4M3 values (a random byte can be NaN)
        codes = (torch.randn(POOL, generator=gen) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        scales = ((torch.rand(POOL, generator=gen) + 0.5) * std / 64).to(torch.bfloat16)
    elif scheme == "W8A8":
        codes = torch.randint(-127, 128, (POOL,), dtype=torch.int8, generator=gen)
        scales = ((torch.rand(POOL, generator=gen) + 0.5) * std / 64).to(torch.bfloat16)
    else:                             # W8A16: four (value + 128) bytes to an int32 word
        codes = torch.randint(-2 ** 31, 2 ** 31 - 1, (POOL,), dtype=torch.int32, generator=gen)
        scales = ((torch.rand(POOL, generator=gen) + 0.5) * std / 64).to(torch.bfloat16)
    tensors: dict[str, torch.Tensor] = {}
    for name, shape in _shapes(config).items():
        module = name.removesuffix(".weight")
        if not (name.endswith(LINEAR_SUFFIXES) and len(shape) == 2 and shape[1] % GROUP == 0):
            tensors[name] = _plain(name, shape, gen, pool)
        elif scheme == "W8A16":
            n, k = shape
            tensors[f"{module}.weight_packed"] = _tiled(codes, (n, k // 4), gen)
            tensors[f"{module}.weight_scale"] = _tiled(scales, (n, k // GROUP), gen)
            tensors[f"{module}.weight_shape"] = torch.tensor([n, k], dtype=torch.int64)
        else:
            tensors[name] = _tiled(codes, shape, gen)
            tensors[f"{module}.weight_scale"] = _tiled(scales, (shape[0], 1), gen)
    qc = json.loads(json.dumps(QUANTIZATION_CONFIG))
    qc["config_groups"]["group_0"] = json.loads(json.dumps(group_cfg))
    qc["format"] = group_cfg["format"]
    return _save(directory, tensors, {**config.to_dict(), "quantization_config": qc})
