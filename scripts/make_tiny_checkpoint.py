#!/usr/bin/env python3
"""Write a random quantized checkpoint for trying `oracle run` (and oracle.hf) without downloads.

    python scripts/make_tiny_checkpoint.py /tmp/tiny-oss                     # gpt-oss MXFP4, hidden 128
    python scripts/make_tiny_checkpoint.py /tmp/tiny-fp8 --kind qwen3-moe-fp8
    python scripts/make_tiny_checkpoint.py /tmp/q30 --kind qwen3-moe-fp8 \\
        --config examples/qwen3-30b-a3b-fp8/config.json --layers 2            # real geometry, 2 layers
    oracle run --model /tmp/tiny-oss --prompt-ids 1,2,3

The weights are random; the quantized tensors come from the emulation plugin's public
quantizers (`oracle_emulation.formats.codec_for(fmt).quantize`), written in each dialect's
own layout and names (transformers fine-grained FP8: `weight` + `weight_scale_inv` per
128x128 block, per-expert tensors; gpt-oss: `*_blocks` [E, N, K/32, 16] + `*_scales` E8M0,
gate/up rows interleaved). Needs torch, transformers and safetensors (the hf extra).
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

TINY = {
    "gpt-oss-mxfp4": dict(model_type="gpt_oss", architectures=["GptOssForCausalLM"], vocab_size=256, hidden_size=128,
                          intermediate_size=128, num_local_experts=4, num_experts_per_tok=2, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
                          sliding_window=8, layer_types=["sliding_attention", "full_attention"],
                          tie_word_embeddings=False, torch_dtype="bfloat16"),
    "qwen3-moe-fp8": dict(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], vocab_size=256,
                          hidden_size=128, intermediate_size=256, moe_intermediate_size=128, num_experts=4,
                          num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=64, max_position_embeddings=256, tie_word_embeddings=False, norm_topk_prob=True,
                          torch_dtype="bfloat16"),
}


def _config(kind: str, config_file: str | None, layers: int | None):
    from transformers import AutoConfig
    data = dict(TINY[kind]) if config_file is None else json.loads(Path(config_file).read_text())
    data.pop("quantization_config", None)
    if layers is not None:
        data["num_hidden_layers"] = layers
        if isinstance(data.get("layer_types"), list):
            data["layer_types"] = data["layer_types"][:layers]
    model_type = data.pop("model_type")
    data.pop("architectures", None)
    return AutoConfig.for_model(model_type, **data), data


def _random(shape: tuple[int, ...], name: str, gen: torch.Generator) -> torch.Tensor:
    if name.endswith("norm.weight"):
        return torch.ones(shape)
    fan_in = shape[-1] if len(shape) > 1 else 64
    std = min(0.08, 1.5 / math.sqrt(fan_in))
    return torch.randn(shape, generator=gen) * (std if len(shape) > 1 else 0.05)


def quantized_tensors(kind: str, model, gen: torch.Generator):
    """(name, tensor) in the dialect's layout, one module at a time (memory stays near one tensor)."""
    from oracle_emulation.formats import codec_for

    for name, p in model.named_parameters():
        shape = tuple(p.shape)
        base = name.rsplit(".", 1)[0]
        if kind == "gpt-oss-mxfp4" and name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
            w = _random(shape, name, gen).transpose(1, 2)            # transformers keeps [E, K, N]
            q = codec_for("mxfp4").quantize(w, "mxfp4")
            yield name + "_blocks", q["weight"].unflatten(-1, (-1, 16))
            yield name + "_scales", q["weight_scale"]
        elif kind == "qwen3-moe-fp8" and name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
            for e in range(shape[0]):
                w = _random(shape[1:], name, gen)
                parts = {"down_proj": w} if name.endswith("down_proj") else \
                    dict(zip(("gate_proj", "up_proj"), w.chunk(2)))
                for proj, part in parts.items():
                    q = codec_for("fp8_block").quantize(part, "fp8_block")
                    yield f"{base}.{e}.{proj}.weight", q["weight"]
                    yield f"{base}.{e}.{proj}.weight_scale_inv", q["weight_scale"]
        elif kind == "qwen3-moe-fp8" and ".self_attn." in name and name.endswith("_proj.weight"):
            q = codec_for("fp8_block").quantize(_random(shape, name, gen), "fp8_block")
            yield name, q["weight"]
            yield name.replace(".weight", ".weight_scale_inv"), q["weight_scale"]
        else:
            yield name, _random(shape, name, gen).to(torch.bfloat16)


def quantization_config(kind: str, layers: int) -> dict:
    if kind == "gpt-oss-mxfp4":
        return {"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
            "modules_to_not_convert": ["lm_head"] + [f"model.layers.{i}.mlp.gate" for i in range(layers)]}


def write(out: Path, kind: str, config_file: str | None = None, layers: int | None = None, seed: int = 0,
          shard_mb: int = 1024) -> Path:
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    cfg, data = _config(kind, config_file, layers)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    gen = torch.Generator().manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in quantized_tensors(kind, model, gen):
        if size > shard_mb * 2 ** 20 and shards[-1]:
            shards.append({})
            size = 0
        shards[-1][name] = t.contiguous()
        size += t.numel() * t.element_size()
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out / fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in shard})
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1))
    config = {**cfg.to_dict(), "architectures": [type(model).__name__], "torch_dtype": "bfloat16",
              "quantization_config": quantization_config(kind, cfg.num_hidden_layers)}
    if cfg.model_type == "qwen3_moe":      # transformers 5 writes num_local_experts; Qwen's files say num_experts
        config["num_experts"] = cfg.num_local_experts
    (out / "config.json").write_text(json.dumps(config, indent=1))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--kind", choices=sorted(TINY), default="gpt-oss-mxfp4")
    p.add_argument("--config", help="a config.json whose geometry to use (default: a tiny one)")
    p.add_argument("--layers", type=int, help="keep this many decoder layers")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    path = write(args.out, args.kind, args.config, args.layers, args.seed)
    print(f"wrote {path} ({args.kind}); try: oracle run --model {path} --prompt-ids 1,2,3")


if __name__ == "__main__":
    main()
