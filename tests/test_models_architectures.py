"""Architectures not among the shipped examples, and the generic fallback, on small hand-made configs."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from oracle.errors import InputError
from oracle.models import load_model


def write(tmp_path: Path, config: dict) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path / "config.json")


def layer(model, role, block=0):
    return next(r.layer for r in model.layers if r.role == role and r.block == block)


def roles(model) -> Counter:
    return Counter(r.role for r in model.layers)


BASE = {"hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
        "num_hidden_layers": 4, "vocab_size": 1024, "intermediate_size": 1024}


def test_qwen2_has_qkv_bias_only(tmp_path):
    m = load_model(write(tmp_path, {**BASE, "model_type": "qwen2"}))
    assert layer(m, "qkv_proj").has_bias and not layer(m, "o_proj").has_bias
    assert layer(m, "qkv_proj").out_features == (8 + 2 * 2) * 64


def test_llama_attention_and_mlp_bias(tmp_path):
    m = load_model(write(tmp_path, {**BASE, "model_type": "llama", "attention_bias": True, "mlp_bias": True}))
    assert layer(m, "qkv_proj").has_bias and layer(m, "o_proj").has_bias and layer(m, "down_proj").has_bias


def test_qwen2_moe_shared_expert_and_sparse_step(tmp_path):
    cfg = {**BASE, "model_type": "qwen2_moe", "num_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 128, "shared_expert_intermediate_size": 256, "decoder_sparse_step": 2,
           "mlp_only_layers": [3]}
    m = load_model(write(tmp_path, cfg))
    # MoE where (i + 1) % 2 == 0 and i not in [3]: only layer 1; layers 0, 2, 3 are dense
    assert [r.block for r in m.layers if r.role == "experts"] == [1]
    assert [r.block for r in m.layers if r.role == "gate_up_proj"] == [0, 2, 3]
    assert layer(m, "shared_experts.gate_up_proj", 1).out_features == 2 * 256
    assert layer(m, "shared_expert_gate", 1).out_features == 1


def test_deepseek_v2_without_q_lora(tmp_path):
    cfg = {**BASE, "model_type": "deepseek_v2", "q_lora_rank": None, "kv_lora_rank": 128, "qk_nope_head_dim": 32,
           "qk_rope_head_dim": 16, "v_head_dim": 32, "n_routed_experts": 16, "n_shared_experts": 2,
           "moe_intermediate_size": 64, "num_experts_per_tok": 4, "first_k_dense_replace": 1, "moe_layer_freq": 2}
    m = load_model(write(tmp_path, cfg))
    assert layer(m, "q_proj").out_features == 8 * (32 + 16)
    assert "q_a_proj" not in roles(m)
    assert layer(m, "kv_a_proj_with_mqa").out_features == 128 + 16
    assert layer(m, "kv_b_proj").out_features == 8 * (32 + 32)
    # MoE where i >= 1 and i % 2 == 0: layer 2 only
    assert [r.block for r in m.layers if r.role == "experts"] == [2]
    assert layer(m, "shared_experts.gate_up_proj", 2).out_features == 2 * 2 * 64


def test_glm4_moe(tmp_path):
    cfg = {**BASE, "model_type": "glm4_moe", "attention_bias": True, "n_routed_experts": 16, "n_shared_experts": 1,
           "moe_intermediate_size": 128, "num_experts_per_tok": 4, "first_k_dense_replace": 1,
           "num_nextn_predict_layers": 1}
    m = load_model(write(tmp_path, cfg))
    assert layer(m, "qkv_proj").has_bias and not layer(m, "o_proj").has_bias
    assert [r.block for r in m.layers if r.role == "experts"] == [1, 2, 3]
    assert layer(m, "experts", 1).intermediate_size == 128
    assert layer(m, "shared_experts.down_proj", 1).in_features == 128
    assert any("multi-token" in n for n in m.notes)


def test_minimax_text01_lightning_layers(tmp_path):
    cfg = {**BASE, "model_type": "minimax", "num_local_experts": 4, "num_experts_per_tok": 2,
           "attn_type_list": [0, 1, 0, 1], "shared_intermediate_size": 0}
    m = load_model(write(tmp_path, cfg))
    assert layer(m, "linear_attn.qkv_proj", 0).out_features == 3 * 8 * 64
    assert layer(m, "linear_attn.output_gate", 0).out_features == 8 * 64
    assert layer(m, "linear_attn.out_proj", 2).in_features == 8 * 64
    assert [r.block for r in m.layers if r.role == "qkv_proj"] == [1, 3]
    assert roles(m)["experts"] == 4
    assert next(r for r in m.layers if r.role == "experts").parts[-1].endswith("block_sparse_moe.experts.0.w2")


def test_minimax_m2(tmp_path):
    cfg = {**BASE, "model_type": "minimax_m2", "num_local_experts": 8, "num_experts_per_tok": 2}
    m = load_model(write(tmp_path, cfg))
    assert roles(m)["experts"] == 4 and layer(m, "experts").intermediate_size == 1024


def test_llama4_interleaved_moe(tmp_path):
    text = {**BASE, "model_type": "llama4_text", "num_local_experts": 4, "num_experts_per_tok": 1,
            "interleave_moe_layer_step": 2, "intermediate_size_mlp": 2048}
    m = load_model(write(tmp_path, {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"],
                                    "text_config": text, "vision_config": {"hidden_size": 8}}))
    # range(step - 1, layers, step): layers 1 and 3 are MoE; 0 and 2 dense with intermediate_size_mlp
    assert [r.block for r in m.layers if r.role == "experts"] == [1, 3]
    assert layer(m, "gate_up_proj", 0).out_features == 2 * 2048
    assert layer(m, "experts", 1).apply_router_weight_on_input
    assert m.layers[0].name == "language_model.model.embed_tokens"


def test_generic_fallback_is_reported(tmp_path):
    m = load_model(write(tmp_path, {**BASE, "model_type": "brand_new_lm"}))
    assert m.generic and any("generic fallback" in n for n in m.notes)
    assert roles(m) == Counter({"qkv_proj": 4, "o_proj": 4, "gate_up_proj": 4, "down_proj": 4,
                                "embed_tokens": 1, "lm_head": 1})
    moe = load_model(write(tmp_path, {**BASE, "model_type": "brand_new_moe", "num_local_experts": 8,
                                      "num_experts_per_tok": 2}))
    assert moe.generic and roles(moe)["experts"] == 4


def test_model_type_from_architectures_when_missing(tmp_path):
    m = load_model(write(tmp_path, {**BASE, "architectures": ["Qwen3ForCausalLM"]}))
    assert m.model_type == "qwen3" and not m.generic


def test_tp_that_does_not_divide_is_a_clear_error(tmp_path):
    path = write(tmp_path, {**BASE, "model_type": "llama"})
    with pytest.raises(InputError) as err:
        load_model(path, tp=3)
    assert "num_attention_heads" in str(err.value) and "--tp 3" in str(err.value) and path in str(err.value)
    with pytest.raises(InputError, match="not divisible by --ep 3"):
        load_model(write(tmp_path, {**BASE, "model_type": "mixtral", "num_local_experts": 8,
                                    "num_experts_per_tok": 2}), ep=3)


def test_kv_heads_that_cannot_spread(tmp_path):
    with pytest.raises(InputError, match="KV heads cannot be spread"):
        load_model(write(tmp_path, {**BASE, "model_type": "llama", "num_attention_heads": 12,
                                    "num_key_value_heads": 4}), tp=6)
