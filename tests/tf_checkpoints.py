"""Tiny MoE checkpoints in transformers' FP8 and gpt-oss MXFP4 layouts (a test helper, not a test).

The models are random tiny Qwen3-MoE / GPT-OSS built with transformers. No library writes
these layouts on CPU, so the tensors are written here from the formats' definitions
(torch's float8_e4m3fn cast with 128x128 amax/448 block scales, stored as the multiplier
`weight_scale_inv`; OCP MX: E8M0 exponent floor(log2 amax) - 2 per 32 values, E2M1 codes two
per byte, low nibble first, gate/up rows interleaved). The references come from transformers'
own dequantization code: `_dequantize_fp8_weight` (finegrained_fp8) and
`convert_moe_packed_tensors` (mxfp4), loaded into the same model in BF16.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

FP8_TINY = dict(vocab_size=256, hidden_size=128, intermediate_size=256, moe_intermediate_size=128, num_experts=4,
                num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                max_position_embeddings=256, tie_word_embeddings=False, norm_topk_prob=True)
OSS_TINY = dict(vocab_size=256, hidden_size=128, intermediate_size=128, num_local_experts=4, num_experts_per_tok=2,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                max_position_embeddings=256, sliding_window=8, layer_types=["sliding_attention", "full_attention"],
                tie_word_embeddings=False)
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def _random(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.08)
            elif "norm" not in name:
                p.normal_(0, 0.05)
    return model.eval()


def _save(directory: Path, model, tensors: dict, quantization_config: dict) -> Path:
    from safetensors.torch import save_file
    directory.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(directory)
    cfg = json.loads((directory / "config.json").read_text())
    cfg["quantization_config"] = quantization_config
    if "num_local_experts" in cfg and cfg.get("model_type") == "qwen3_moe":
        cfg["num_experts"] = cfg["num_local_experts"]    # transformers 5 renames it; Qwen's files say num_experts
    (directory / "config.json").write_text(json.dumps(cfg, indent=1))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(directory / "model.safetensors"),
              metadata={"format": "pt"})
    return directory


# ---------------------------------------------------------------- transformers fine-grained FP8
def fp8_block(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] -> (e4m3 weight, fp32 [N/128, K/128] multiplier), from amax / 448 per 128x128 block."""
    n, k = w.shape
    blocks = w.float().reshape(n // 128, 128, k // 128, 128)
    scale = blocks.abs().amax(dim=(1, 3)) / 448.0
    q = (blocks / scale[:, None, :, None]).reshape(n, k).to(torch.float8_e4m3fn)
    return q, scale


def write_fp8_moe(directory: Path, seed: int = 0) -> Path:
    """A tiny Qwen3-MoE saved as Qwen's FP8 checkpoints are: per-expert tensors, 128x128 blocks."""
    from transformers import AutoModelForCausalLM, Qwen3MoeConfig
    torch.manual_seed(seed)
    model = _random(AutoModelForCausalLM.from_config(Qwen3MoeConfig(**FP8_TINY)).to(torch.bfloat16))
    out: dict[str, torch.Tensor] = {}
    i = FP8_TINY["moe_intermediate_size"]
    for name, t in model.state_dict().items():
        if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
            base = name.rsplit(".", 1)[0]
            for e in range(t.shape[0]):
                parts = {"gate_proj": t[e, :i], "up_proj": t[e, i:]} if name.endswith("gate_up_proj") \
                    else {"down_proj": t[e]}
                for proj, w in parts.items():
                    q, s = fp8_block(w)
                    out[f"{base}.{e}.{proj}.weight"], out[f"{base}.{e}.{proj}.weight_scale_inv"] = q, s
        elif name.endswith("_proj.weight") and ".self_attn." in name:
            q, s = fp8_block(t)
            out[name], out[name.replace(".weight", ".weight_scale_inv")] = q, s
        else:
            out[name] = t
    qc = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
          "modules_to_not_convert": ["lm_head"] + [f"model.layers.{n}.mlp.gate" for n in range(2)]}
    return _save(directory, model, out, qc)


def fp8_reference(directory: Path):
    """transformers' `_dequantize_fp8_weight` of every FP8 tensor, in the BF16 model."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.integrations.finegrained_fp8 import _dequantize_fp8_weight
    state = load_file(str(directory / "model.safetensors"))
    plain = {}
    for name, t in state.items():
        if name.endswith("weight_scale_inv"):
            continue
        if t.dtype == torch.float8_e4m3fn:
            t = _dequantize_fp8_weight(t, state[name + "_scale_inv"], [128, 128], torch.bfloat16)
        plain[name] = t
    cfg = AutoConfig.from_pretrained(str(directory))
    del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    sd = {}
    for name in model.state_dict():
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name.rsplit(".", 1)[0]
            sd[name] = torch.stack([torch.cat([plain[f"{base}.{e}.gate_proj.weight"], plain[f"{base}.{e}.up_proj.weight"]])
                                    for e in range(cfg.num_experts)])
        elif name.endswith("mlp.experts.down_proj"):
            base = name.rsplit(".", 1)[0]
            sd[name] = torch.stack([plain[f"{base}.{e}.down_proj.weight"] for e in range(cfg.num_experts)])
        else:
            sd[name] = plain[name]
    model.load_state_dict(sd)
    return model.eval()


# ---------------------------------------------------------------- gpt-oss MXFP4
def mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., N, K] -> (blocks uint8 [..., N, K/32, 16], scales uint8 E8M0 [..., N, K/32]) per OCP MX v1.0."""
    blocks = w.float().unflatten(-1, (-1, 32))
    amax = blocks.abs().amax(dim=-1).clamp(min=2.0 ** -126)
    exp = torch.floor(torch.log2(amax)) - 2                       # E2M1 emax = 2
    scaled = blocks / torch.exp2(exp)[..., None]
    idx = (scaled.abs()[..., None] - E2M1).abs().argmin(dim=-1)   # nearest E2M1 magnitude
    codes = (idx | ((scaled < 0).long() << 3)).to(torch.uint8)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return packed, (exp + 127).to(torch.uint8)


def write_gpt_oss(directory: Path, seed: int = 0) -> Path:
    """A tiny GPT-OSS saved as openai's checkpoints are: MXFP4 experts, BF16 everything else."""
    from transformers import AutoModelForCausalLM, GptOssConfig
    torch.manual_seed(seed)
    model = _random(AutoModelForCausalLM.from_config(GptOssConfig(**OSS_TINY)).to(torch.bfloat16))
    out = {}
    for name, t in model.state_dict().items():
        if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
            blocks, scales = mxfp4(t.transpose(1, 2))      # transformers keeps [E, K, N]; checkpoints [E, N, K]
            out[name + "_blocks"], out[name + "_scales"] = blocks, scales
        else:
            out[name] = t
    qc = {"quant_method": "mxfp4",
          "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                     "lm_head"]}
    return _save(directory, model, out, qc)


def gpt_oss_reference(directory: Path):
    """transformers' `convert_moe_packed_tensors` of every expert tensor, in the BF16 model."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    state = load_file(str(directory / "model.safetensors"))
    cfg = AutoConfig.from_pretrained(str(directory))
    del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    sd = {}
    for name in model.state_dict():
        if name + "_blocks" in state:
            sd[name] = convert_moe_packed_tensors(state[name + "_blocks"], state[name + "_scales"])
        else:
            sd[name] = state[name]
    model.load_state_dict(sd)
    return model.eval()
