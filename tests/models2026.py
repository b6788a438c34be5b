"""2026 checkpoints for the name-layer tests: the configs in tests/fixtures/models2026 plus the
quantization files their writers publish, rebuilt here where the original is too large to ship.

Provenance of each file: tests/fixtures/models2026/SOURCES.md.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "models2026"


def config(name: str) -> dict:
    return json.loads((FIXTURES / name / "config.json").read_text(encoding="utf-8"))


def write(folder: Path, cfg: dict, **files: object) -> Path:
    """config.json plus sibling files (name with '__' for '.', e.g. hf_quant_config__json)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    for name, data in files.items():
        (folder / name.replace("__", ".")).write_text(json.dumps(data), encoding="utf-8")
    return folder


def minimax_m3_quantization() -> dict:
    """MiniMax-M3-NVFP4's hf_quant_config.json rebuilt from the published file's pattern (3 MB upstream).

    The published file lists, per layer, every projection by its own name: MXFP8 for the dense MLP
    of layers 0-2 (mlp.gate_proj/up_proj/down_proj), attention q/k/v/o (plus index_q_proj and
    index_k_proj on the sparse layers 3-59) and the shared experts; NVFP4 (group 16) for every
    routed expert's w1/w2/w3; routers and the vision side in exclude_modules.
    """
    base = "language_model.model.layers"
    mx = {"quant_algo": "MXFP8"}
    nv = {"quant_algo": "NVFP4", "group_size": 16}
    layers: dict[str, dict] = {}
    for i in range(60):
        p = f"{base}.{i}"
        if i < 3:
            for proj in ("down_proj", "gate_proj", "up_proj"):
                layers[f"{p}.mlp.{proj}"] = dict(mx)
        else:
            for proj in ("down_proj", "gate_proj", "up_proj"):
                layers[f"{p}.block_sparse_moe.shared_experts.{proj}"] = dict(mx)
            for proj in ("index_k_proj", "index_q_proj"):
                layers[f"{p}.self_attn.{proj}"] = dict(mx)
        for proj in ("k_proj", "o_proj", "q_proj", "v_proj"):
            layers[f"{p}.self_attn.{proj}"] = dict(mx)
    for i in range(3, 60):
        for e in range(128):
            for w in ("w1", "w2", "w3"):
                layers[f"{base}.{i}.block_sparse_moe.experts.{e}.{w}"] = dict(nv)
    exclude = ["lm_head", "model.embed_tokens", "vision_tower", "multi_modal_projector", "patch_merge_mlp"]
    exclude += [f"{base}.{i}.block_sparse_moe.gate" for i in sorted(map(str, range(3, 60)))]
    return {"producer": {"name": "modelopt", "version": "minimax-m3-mxfp8-nvfp4-mixed"}, "quant_method": "modelopt",
            "quantization": {"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": None,
                             "exclude_modules": exclude, "quantized_layers": layers}}


def deepseek_v4_flash_ct() -> dict:
    """DeepSeek-V4-Flash quantized by compressed-tensors with the checkpoint's original names: FP8
    128x128 blocks for attention (wq_a and wkv stored as one fused_wqa_wkv tensor), NVFP4 for the
    routed and shared experts (per-expert gate_proj/up_proj/down_proj under `ffn`)."""
    cfg = config("deepseek-v4-flash")
    cfg.pop("expert_dtype")
    fp8 = {"weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128],
                       "symmetric": True, "dynamic": False},
           "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128,
                                 "dynamic": True},
           "targets": [r"re:.*attn.*(fused_wqa_wkv|wq_b|wo_a|wo_b)$"], "format": "float-quantized"}
    nvfp4 = {"weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                         "symmetric": True, "dynamic": False},
             "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                                   "dynamic": "local"},
             "targets": [r"re:.*ffn.*(gate|up|down)_proj$"], "format": "nvfp4-pack-quantized"}
    cfg["quantization_config"] = {"quant_method": "compressed-tensors", "format": "mixed-precision",
                                  "config_groups": {"group_0": fp8, "group_1": nvfp4}, "ignore": ["head"]}
    return cfg


def deepseek_v4_flash_index() -> dict:
    """A safetensors index in DeepSeek-V4's own names (2 layers' worth of the real naming, trimmed)."""
    weights = {"embed.weight": "a.safetensors", "head.weight": "a.safetensors"}
    for i in range(43):
        a, f = f"layers.{i}.attn", f"layers.{i}.ffn"
        for t in ("fused_wqa_wkv", "wq_b", "wo_a", "wo_b"):
            weights[f"{a}.{t}.weight"] = "a.safetensors"
            weights[f"{a}.{t}.weight_scale"] = "a.safetensors"
        if i >= 3:
            weights[f"{f}.gate.weight"] = "a.safetensors"
        for e in range(256):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                weights[f"{f}.experts.{e}.{proj}.weight_packed"] = "a.safetensors"
        for proj in ("gate_proj", "up_proj", "down_proj"):
            weights[f"{f}.shared_experts.{proj}.weight_packed"] = "a.safetensors"
    return {"metadata": {}, "weight_map": weights}


def with_mixed_expert(quant: dict, layer: int, expert: int, algo: str) -> dict:
    """`quant` with every tensor of one expert in another format."""
    out = copy.deepcopy(quant)
    for w in ("w1", "w2", "w3"):
        out["quantization"]["quantized_layers"][
            f"language_model.model.layers.{layer}.block_sparse_moe.experts.{expert}.{w}"] = {"quant_algo": algo}
    return out
