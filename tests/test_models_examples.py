"""Every shipped config -> layers, checked against numbers computed by hand from the config.

Each expected number is written out with the arithmetic from the config's keys, so
a reader can check it against examples/NAME/config.json without running the code.
"""
from __future__ import annotations

import filecmp
from collections import Counter
from pathlib import Path

import pytest

from oracle.layer import EmbeddingLayer, LinearLayer, MoELayer
from oracle.models import example_names, load_model

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "models"


def by_role(model, role, block=None):
    rows = [m for m in model.layers if m.role == role and (block is None or m.block == block)]
    assert rows, f"no {role} layer in block {block}"
    return rows


def one(model, role, block=None):
    rows = by_role(model, role, block)
    return rows[0].layer


def roles(model) -> Counter:
    return Counter(m.role for m in model.layers)


def test_every_shared_config_is_shipped_byte_for_byte():
    names = sorted(p.name for p in SHARED.iterdir() if p.is_dir()) if SHARED.is_dir() else []
    shipped = example_names()
    assert shipped == sorted(shipped) and len(shipped) == 12
    sources = (REPO / "examples" / "SOURCES.md").read_text(encoding="utf-8")
    for name in shipped:       # every shipped example has its provenance written down
        assert f"### {name}/" in sources, name
    if names:  # in a checkout beside ../shared, the copies must be exact
        assert set(names) <= set(shipped)
        for name in names:
            for f in (SHARED / name).iterdir():
                assert filecmp.cmp(f, REPO / "examples" / name / f.name, shallow=False), f
        # examples/SOURCES.md is the shared one, unchanged, with the added models after it
        assert sources.startswith((SHARED / "SOURCES.md").read_text(encoding="utf-8"))


# ---------------------------------------------------------------- gpt-oss-20b
def test_gpt_oss_20b():
    m = load_model("gpt-oss-20b")
    assert (m.model_type, m.dialect) == ("gpt_oss", "mxfp4")
    # 24 layers x (qkv, o, router, experts) + embed_tokens + lm_head
    assert len(m.layers) == 24 * 4 + 2 == 98
    qkv = one(m, "qkv_proj", 0)
    # q: 64 heads x 64 = 4096; k, v: 8 heads x 64 = 512 each -> 5120
    assert (qkv.in_features, qkv.out_features, qkv.has_bias, qkv.weight_format) == (2880, 5120, True, "bf16")
    o = one(m, "o_proj", 5)
    assert (o.in_features, o.out_features, o.has_bias) == (4096, 2880, True)
    gate = one(m, "gate", 3)
    assert (gate.in_features, gate.out_features, gate.has_bias, gate.weight_format) == (2880, 32, True, "bf16")
    experts = one(m, "experts", 23)
    assert isinstance(experts, MoELayer)
    assert (experts.num_experts, experts.top_k, experts.hidden_size, experts.intermediate_size) == (32, 4, 2880, 2880)
    assert (experts.weight_format, experts.activation_format, experts.has_bias) == ("mxfp4", None, True)
    assert experts.activation == "swigluoai"
    assert experts.activation_params == {"limit": 7.0, "alpha": 1.702, "beta": 1.0}
    embed = one(m, "embed_tokens")
    assert isinstance(embed, EmbeddingLayer) and (embed.num_embeddings, embed.embedding_dim) == (201088, 2880)
    head = one(m, "lm_head")
    assert (head.in_features, head.out_features, head.weight_format) == (2880, 201088, "bf16")
    # modules_to_not_convert keeps attention, router, embedding and lm_head in bf16
    assert {r.role for r in m.layers if r.quantized} == {"experts"}
    assert "modules_to_not_convert: model.layers.*.self_attn" in by_role(m, "qkv_proj")[0].quant_note
    assert m.layers[1].name == "model.layers.0.self_attn.qkv_proj"
    assert by_role(m, "qkv_proj")[0].parts == tuple(f"model.layers.0.self_attn.{p}_proj" for p in "qkv")


def test_gpt_oss_20b_tensor_and_expert_parallel():
    m = load_model("gpt-oss-20b", tp=4)
    qkv = one(m, "qkv_proj", 0)
    # q: 64/4 = 16 heads x 64 = 1024; k, v: 8/4 = 2 heads x 64 = 128 each -> 1280
    assert (qkv.in_features, qkv.out_features, qkv.tp_size) == (2880, 1280, 4)
    o = one(m, "o_proj", 0)
    assert (o.in_features, o.out_features) == (1024, 2880)          # row-parallel: K split
    experts = one(m, "experts", 0)
    assert (experts.intermediate_size, experts.tp_size, experts.ep_size) == (2880, 4, 1)  # full size, engine divides
    assert experts.rule_fields()["intermediate_size_per_rank"] == 720
    assert one(m, "embed_tokens").num_embeddings == 201088 // 4 == 50272
    assert one(m, "lm_head").out_features == 50272
    assert one(m, "gate", 0).tp_size == 1                            # router replicated

    m16 = load_model("gpt-oss-20b", tp=16)
    # 8 KV heads < 16 ranks: one KV head per rank; q: 64/16 = 4 heads -> (4 + 1 + 1) x 64 = 384
    assert one(m16, "qkv_proj", 0).out_features == 384
    assert any("KV head" in n for n in m16.notes)

    ep = load_model("gpt-oss-20b", tp=4, ep=4)
    experts = one(ep, "experts", 0)
    assert (experts.tp_size, experts.ep_size, experts.rule_fields()["experts_per_rank"]) == (1, 4, 8)
    assert one(ep, "qkv_proj", 0).out_features == 1280            # attention keeps --tp


# ---------------------------------------------------------------- deepseek-r1
def test_deepseek_r1():
    m = load_model("deepseek-r1")
    assert (m.model_type, m.dialect) == ("deepseek_v3", "fp8")
    # 61 layers x 5 MLA projections; layers 0-2 dense (gate_up, down); 3-60 MoE (gate, experts, shared x2)
    assert len(m.layers) == 1 + 61 * 5 + 3 * 2 + 58 * 4 + 1 == 545
    assert roles(m)["gate_up_proj"] == 3 and roles(m)["experts"] == 58
    assert [r.block for r in by_role(m, "experts")] == list(range(3, 61))
    q_a, q_b = one(m, "q_a_proj", 0), one(m, "q_b_proj", 0)
    assert (q_a.in_features, q_a.out_features, q_a.tp_size) == (7168, 1536, 1)
    assert (q_b.in_features, q_b.out_features) == (1536, 128 * (128 + 64)) == (1536, 24576)
    kv_a, kv_b = one(m, "kv_a_proj_with_mqa", 0), one(m, "kv_b_proj", 0)
    assert (kv_a.in_features, kv_a.out_features) == (7168, 512 + 64) == (7168, 576)
    assert (kv_b.in_features, kv_b.out_features) == (512, 128 * (128 + 128)) == (512, 32768)
    o = one(m, "o_proj", 0)
    assert (o.in_features, o.out_features) == (128 * 128, 7168)
    gate_up, down = one(m, "gate_up_proj", 2), one(m, "down_proj", 2)
    assert (gate_up.in_features, gate_up.out_features) == (7168, 2 * 18432)
    assert (down.in_features, down.out_features) == (18432, 7168)
    experts = one(m, "experts", 3)
    assert (experts.num_experts, experts.top_k, experts.hidden_size, experts.intermediate_size) == (256, 8, 7168, 2048)
    assert (experts.weight_format, experts.activation_format, experts.group_size) == ("fp8_block", "fp8", 128)
    shared_up, shared_down = one(m, "shared_experts.gate_up_proj", 3), one(m, "shared_experts.down_proj", 3)
    assert (shared_up.in_features, shared_up.out_features) == (7168, 2 * 1 * 2048)
    assert (shared_down.in_features, shared_down.out_features) == (2048, 7168)
    assert one(m, "gate", 3).weight_format == "bf16"
    assert (one(m, "lm_head").weight_format, one(m, "embed_tokens").weight_format) == ("bf16", "bf16")
    assert q_a.weight_format == "fp8_block" and q_a.activation_format == "fp8"
    assert any("num_nextn_predict_layers" in n for n in m.notes)


def test_deepseek_r1_tp8():
    m = load_model("deepseek-r1", tp=8)
    # 128 heads / 8 = 16 per rank
    assert one(m, "q_b_proj", 0).out_features == 16 * 192 == 3072
    assert one(m, "kv_b_proj", 0).out_features == 16 * 256 == 4096
    assert one(m, "o_proj", 0).in_features == 16 * 128 == 2048
    assert one(m, "q_a_proj", 0).out_features == 1536              # replicated
    assert one(m, "kv_a_proj_with_mqa", 0).out_features == 576     # replicated
    assert one(m, "gate_up_proj", 0).out_features == 2 * 18432 // 8 == 4608
    assert one(m, "down_proj", 0).in_features == 18432 // 8 == 2304
    assert one(m, "shared_experts.gate_up_proj", 3).out_features == 2 * 2048 // 8 == 512
    assert one(m, "shared_experts.down_proj", 3).in_features == 256
    assert one(m, "experts", 3).rule_fields()["intermediate_size_per_rank"] == 256


# ---------------------------------------------------------------- kimi-k2.5
def test_kimi_k25_int4_experts_only():
    m = load_model("kimi-k2.5")
    assert (m.model_type, m.dialect) == ("kimi_k2", "compressed-tensors")
    # first_k_dense_replace 1: layer 0 dense, layers 1-60 MoE
    assert len(m.layers) == 1 + 61 * 5 + 1 * 2 + 60 * 4 + 1 == 549
    experts = one(m, "experts", 1)
    assert (experts.num_experts, experts.top_k, experts.intermediate_size) == (384, 8, 2048)
    # compressed-tensors weight-only schemes declare 16-bit activations
    assert (experts.weight_format, experts.activation_format, experts.group_size) == ("int4", "bf16", 32)
    assert one(m, "q_b_proj", 0).out_features == 64 * 192 == 12288
    assert one(m, "kv_b_proj", 0).out_features == 64 * 256 == 16384
    assert {r.role for r in m.layers if r.quantized} == {"experts"}
    # the ignore patterns, matched against the unfused names, explain each bf16 layer
    assert by_role(m, "q_a_proj")[0].quant_note == "ignore: re:.*self_attn.*"
    assert by_role(m, "shared_experts.gate_up_proj")[0].quant_note == "ignore: re:.*shared_experts.*"
    assert by_role(m, "gate_up_proj")[0].quant_note == r"ignore: re:.*mlp\.(gate|up|gate_up|down)_proj.*"
    assert m.layers[0].name == "language_model.model.embed_tokens"
    assert any("vision" in n for n in m.notes)


# ---------------------------------------------------------------- llama-4-scout fp8-dynamic
def test_llama4_scout_fp8_dynamic():
    m = load_model("llama-4-scout-17b-16e-instruct-fp8-dynamic")
    assert (m.model_type, m.dialect) == ("llama4_text", "compressed-tensors")
    # interleave_moe_layer_step 1: all 48 layers MoE: qkv, o, router, experts, shared gate_up, shared down
    assert len(m.layers) == 1 + 48 * 6 + 1 == 290
    qkv = one(m, "qkv_proj", 0)
    assert (qkv.in_features, qkv.out_features, qkv.weight_format) == (5120, (40 + 2 * 8) * 128, "bf16")
    experts = one(m, "experts", 47)
    assert (experts.num_experts, experts.top_k, experts.hidden_size, experts.intermediate_size) == (16, 1, 5120, 8192)
    assert (experts.weight_format, experts.activation_format) == ("fp8_channel", "fp8")
    assert experts.apply_router_weight_on_input is True
    up, down = one(m, "shared_experts.gate_up_proj", 0), one(m, "shared_experts.down_proj", 0)
    assert (up.in_features, up.out_features, up.weight_format, up.activation_format) == (5120, 16384, "fp8_channel", "fp8")
    assert (down.in_features, down.out_features) == (8192, 5120)
    assert one(m, "gate", 0).out_features == 16
    assert one(m, "lm_head").weight_format == "bf16"
    assert m.layers[-1].name == "language_model.lm_head"


# ---------------------------------------------------------------- mixtral / qwen3 family
def test_mixtral_unquantized():
    m = load_model("mixtral-8x7b-v0.1")
    assert (m.model_type, m.dialect) == ("mixtral", "none")
    assert len(m.layers) == 1 + 32 * 4 + 1 == 130
    # no head_dim key: 4096 / 32 heads = 128; q 4096 + k, v 8 x 128 each
    assert one(m, "qkv_proj", 0).out_features == 4096 + 2 * 1024
    experts = one(m, "experts", 0)
    assert (experts.num_experts, experts.top_k, experts.intermediate_size, experts.weight_format) == (8, 2, 14336, "bf16")
    assert by_role(m, "experts")[0].parts[0] == "model.layers.0.block_sparse_moe.experts.0.w1"
    assert not m.quantized_layers


def test_qwen3_235b_nvfp4_modelopt():
    m = load_model("nvidia-qwen3-235b-a22b-nvfp4")
    assert (m.model_type, m.dialect) == ("qwen3_moe", "modelopt")
    assert len(m.files) == 2 and m.files[1].endswith("hf_quant_config.json")
    assert len(m.layers) == 1 + 94 * 4 + 1 == 378
    qkv = one(m, "qkv_proj", 0)
    assert (qkv.in_features, qkv.out_features) == (4096, (64 + 2 * 4) * 128)
    assert (qkv.weight_format, qkv.activation_format, qkv.group_size) == ("nvfp4", "nvfp4", 16)
    experts = one(m, "experts", 93)
    assert (experts.num_experts, experts.top_k, experts.intermediate_size) == (128, 8, 1536)
    assert (experts.weight_format, experts.activation_format) == ("nvfp4", "nvfp4")
    assert one(m, "gate", 0).weight_format == "bf16"
    assert by_role(m, "lm_head")[0].quant_note == "exclude_modules: lm_head"
    m8 = load_model("nvidia-qwen3-235b-a22b-nvfp4", tp=8)
    # 4 KV heads < 8 ranks -> one per rank; q 64/8 = 8 heads: (8 + 1 + 1) x 128
    assert one(m8, "qkv_proj", 0).out_features == 1280
    assert one(m8, "o_proj", 0).in_features == 8 * 128


def test_qwen3_30b_fp8_block():
    m = load_model("qwen3-30b-a3b-fp8")
    assert len(m.layers) == 1 + 48 * 4 + 1 == 194
    qkv = one(m, "qkv_proj", 0)
    assert (qkv.in_features, qkv.out_features, qkv.weight_format, qkv.group_size) == (2048, 5120, "fp8_block", 128)
    assert (one(m, "o_proj", 0).in_features, one(m, "o_proj", 0).out_features) == (32 * 128, 2048)
    experts = one(m, "experts", 0)
    assert (experts.num_experts, experts.top_k, experts.intermediate_size, experts.weight_format) == (128, 8, 768, "fp8_block")
    assert by_role(m, "lm_head")[0].quant_note == "modules_to_not_convert: lm_head"


def test_qwen3_8b_dense():
    m = load_model("qwen3-8b")
    assert len(m.layers) == 1 + 36 * 4 + 1 == 146
    assert (one(m, "qkv_proj", 0).out_features, one(m, "o_proj", 0).in_features) == (4096 + 2 * 1024, 4096)
    gate_up, down = one(m, "gate_up_proj", 35), one(m, "down_proj", 35)
    assert (gate_up.in_features, gate_up.out_features) == (4096, 2 * 12288)
    assert (down.in_features, down.out_features) == (12288, 4096)
    assert all(isinstance(r.layer, LinearLayer) for r in m.layers[1:])
    m2 = load_model("qwen3-8b", tp=2)
    assert (one(m2, "gate_up_proj", 0).out_features, one(m2, "down_proj", 0).in_features) == (12288, 6144)


@pytest.mark.parametrize("name", example_names())
def test_every_example_loads_with_tp_and_names_are_unique(name):
    for tp in (1, 2, 4):
        m = load_model(name, tp=tp)
        names = [r.name for r in m.layers]
        assert len(names) == len(set(names))
        assert m.layers[0].role == "embed_tokens" and m.layers[-1].role == "lm_head"
