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
    data.pop("auto_map", None)        # the model is transformers' own architecture, never the checkpoint's code
    if layers is not None:
        data["num_hidden_layers"] = layers
        if isinstance(data.get("layer_types"), list):
            data["layer_types"] = data["layer_types"][:layers]
    model_type = data.pop("model_type")
    data.pop("architectures", None)
    return AutoConfig.for_model(model_type, **data), data


def _std(shape: tuple[int, ...]) -> float:
    """The random weights' spread: a matrix's by its fan-in (the last dimension), a vector's 0.05."""
    return min(0.08, 1.5 / math.sqrt(shape[-1])) if len(shape) > 1 else 0.05


def _random(shape: tuple[int, ...], name: str, gen: torch.Generator) -> torch.Tensor:
    dev = gen.device
    if name.endswith("norm.weight"):
        return torch.ones(shape, device=dev)
    return torch.randn(shape, generator=gen, device=dev) * _std(shape)


def _fp8_quantized(name: str, shape: tuple[int, ...]) -> bool:
    """Which parameters the transformers fine-grained FP8 layout stores as E4M3 128x128 blocks: every
    2-D projection weight but the embeddings, the head and the router (Qwen3-MoE, DeepSeek-V3 alike)."""
    return len(shape) == 2 and name.endswith(".weight") and not name.endswith(
        ("embed_tokens.weight", "lm_head.weight", "mlp.gate.weight", "router.weight", "shared_expert_gate.weight"))


#: float values made at once when many experts are made together (bounds the peak of a bulk make)
BULK_VALUES = 1 << 27


def _chunks(count: int, each: int) -> list[range]:
    """[0, count) in runs of as many items of `each` values as fit BULK_VALUES (at least one)."""
    step = max(1, BULK_VALUES // max(each, 1))
    return [range(a, min(a + step, count)) for a in range(0, count, step)]


def tensor_plan(kind: str, model):
    """[(checkpoint names, make(gen) -> those tensors, their bytes)] in the dialect's layout, nothing
    computed yet: `write` runs each on the CPU, bench/synthetic.py on the GPU (gen's device) when the
    loader asks. Experts are made many at a time (one random draw and one quantizer call per run of
    experts, BULK_VALUES floats at most): a full-depth Qwen3-30B has 18432 expert tensors, and making
    them one by one cost most of a synthetic build's ~40 s in small launches."""
    from oracle_emulation.formats import codec_for

    from oracle.hf.naming import ModelNames
    names = ModelNames(model)       # the architecture's own checkpoint names (Mixtral: block_sparse_moe...w1)

    def fp8(shape, name, pname):
        def make(gen):
            q = codec_for("fp8_block").quantize(_random(shape, pname, gen), "fp8_block")
            return q["weight"], q["weight_scale"]
        return make

    def fp8_experts(count, pieces):
        """`count` experts of one MoE block, each its `pieces` ((template, [rows, K], param)
        in the loader's order: gate, up, down): one random draw in that order (on the CPU the same values
        as one draw per tensor), then one quantizer call per distinct shape (blocks stay per tensor)."""
        def make(gen):
            shapes = [shape for _, shape, _ in pieces] * count
            flat = torch.randn(sum(map(math.prod, shapes)), generator=gen, device=gen.device)
            made = [t.view(shape) * _std(shape) for t, shape in zip(flat.split([math.prod(x) for x in shapes]), shapes)]
            del flat
            out: list = [None] * (2 * len(made))
            for shape in dict.fromkeys(shapes):
                at = [i for i, x in enumerate(shapes) if x == shape]
                q = codec_for("fp8_block").quantize(torch.stack([made[i] for i in at]), "fp8_block")
                for i, w, sc in zip(at, q["weight"].unbind(0), q["weight_scale"].unbind(0)):
                    out[2 * i], out[2 * i + 1] = w, sc
            return out
        return make

    params = dict(model.named_parameters())
    plan = []
    for name, p in params.items():
        shape = tuple(p.shape)
        experts = name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj"))
        stored = names.checkpoint(name)
        if kind == "gpt-oss-mxfp4" and experts:
            def make(gen, shape=shape, name=name):
                blocks, scales = [], []
                for run in _chunks(shape[0], math.prod(shape[1:])):   # transformers keeps [E, K, N]
                    w = _random((len(run), *shape[1:]), name, gen).transpose(1, 2)
                    q = codec_for("mxfp4").quantize(w, "mxfp4")
                    blocks.append(q["weight"].unflatten(-1, (-1, 16)))
                    scales.append(q["weight_scale"])
                return torch.cat(blocks), torch.cat(scales)
            plan.append(((name + "_blocks", name + "_scales"), make, math.prod(shape) // 2 + math.prod(shape) // 32))
        elif kind == "qwen3-moe-fp8" and experts:
            if name.endswith("down_proj") and name[: -len("down_proj")] + "gate_up_proj" in params:
                continue                                       # made with its gate_up_proj, expert by expert
            pieces = []
            for param in (name, name[: -len("gate_up_proj")] + "down_proj") if name.endswith("gate_up_proj") else (name,):
                if param not in params:
                    continue
                _, n, k = params[param].shape
                templates = names.expert_templates(param) or []    # transformers' converter sources, in order
                pieces += [(t, (n // max(len(templates), 1), k), param) for t in templates]
            each = sum(math.prod(shape) for _, shape, _ in pieces)
            for run in _chunks(shape[0], each):
                stored_names = tuple(t for x in run for template, _, _ in pieces
                                     for t in (template.format(e=x), template.format(e=x) + "_scale_inv"))
                plan.append((stored_names, fp8_experts(len(run), pieces), len(run) * each))
        elif kind == "qwen3-moe-fp8" and _fp8_quantized(name, shape):
            plan.append(((stored, stored + "_scale_inv"), fp8(shape, name, name), math.prod(shape)))
        else:
            plan.append(((stored,), lambda gen, shape=shape, name=name: (_random(shape, name, gen).to(torch.bfloat16),),
                         2 * math.prod(shape)))
    return plan


def quantized_tensors(kind: str, model, gen: torch.Generator):
    """(name, tensor) in the dialect's layout, one module at a time (memory stays near one tensor)."""
    for names, make, _ in tensor_plan(kind, model):
        yield from zip(names, make(gen))


def quantization_config(kind: str, layers: int, model=None) -> dict:
    if kind == "gpt-oss-mxfp4":
        return {"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    routers = [f"model.layers.{i}.mlp.gate" for i in range(layers)]
    if model is not None:                    # in the checkpoint's words (Mixtral: block_sparse_moe.gate)
        from oracle.hf.naming import ModelNames
        names = ModelNames(model)
        routers = [names.checkpoint(r + ".weight")[: -len(".weight")] for r in routers]
    return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
            "modules_to_not_convert": ["lm_head"] + routers}


def write(out: Path, kind: str, config_file: str | None = None, layers: int | None = None, seed: int = 0,
          shard_mb: int = 1024) -> Path:
    from safetensors.torch import save_file

    cfg, model = meta_model(kind, config_file, layers)
    gen = torch.Generator().manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in quantized_tensors(kind, model, gen):
        if size > shard_mb * 2 ** 20 and shards[-1]:
            shards.append({})
            size = 0
        shards[-1][name] = t.clone(memory_format=torch.contiguous_format)   # bulk-made experts share storage
        size += t.numel() * t.element_size()
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out / fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in shard})
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1))
    write_config(out, kind, cfg, model)
    return out


def meta_model(kind: str, config_file: str | None = None, layers: int | None = None):
    """(transformers config, the model on the meta device) for a kind or a real config cut to `layers`."""
    from transformers import AutoModelForCausalLM

    cfg, _ = _config(kind, config_file, layers)
    with torch.device("meta"):
        return cfg, AutoModelForCausalLM.from_config(cfg)


def write_config(out: Path, kind: str, cfg, model) -> Path:
    """config.json with the dialect's quantization_config (what oracle.hf and transformers read)."""
    config = {**cfg.to_dict(), "architectures": [type(model).__name__], "torch_dtype": "bfloat16",
              "quantization_config": quantization_config(kind, cfg.num_hidden_layers, model)}
    if cfg.model_type == "qwen3_moe":      # transformers 5 writes num_local_experts; Qwen's files say num_experts
        config["num_experts"] = cfg.num_local_experts
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=1))
    return out / "config.json"


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
