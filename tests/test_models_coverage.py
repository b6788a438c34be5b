"""Coverage of quantization names, config spellings, SiTU, DeepSeek-V4 and bad input (issue 12).

Expected numbers are worked out by hand from the config keys, written next to each assert.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from oracle.errors import InputError
from oracle.models import load_model

REPO = Path(__file__).resolve().parents[1]
DSV4 = REPO / "examples" / "nvidia-deepseek-v4-flash-nvfp4"


def write(folder: Path, config, **siblings) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    for name, data in siblings.items():
        (folder / name.replace("__", ".")).write_text(json.dumps(data))
    return folder


def explain(*argv):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "ORACLE_"))}
    return subprocess.run([sys.executable, "-m", "oracle.cli", "explain", "--device", "sm120",
                           "--with-package", "b12x=1.5.1", "--with-package", "triton=3.6.0", *argv],
                          cwd=REPO, capture_output=True, text=True, timeout=120, env=env)


def small_moe(**extra) -> dict:
    """A qwen3_moe text config: 2 layers, hidden 64, 8 experts of 32, 4 q / 2 kv heads of 16."""
    return {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64,
            "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8,
            "num_experts_per_tok": 2, "vocab_size": 128, "hidden_act": "silu", **extra}


def ct(targets, ignore=(), num_bits=8) -> dict:
    weights = {"num_bits": num_bits, "type": "float", "strategy": "channel", "symmetric": True}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": list(ignore),
            "config_groups": {"group_0": {"targets": list(targets), "weights": weights,
                                          "input_activations": {"num_bits": 8, "type": "float",
                                                                "strategy": "token", "dynamic": True}}}}


# ---------------------------------------------------------------- DeepSeek-V4 (real config)
def test_deepseek_v4_flash_nvfp4_layers_by_hand():
    m = load_model(str(DSV4))
    assert (m.model_type, m.dialect, m.derivation) == ("deepseek_v4", "modelopt", "architecture table")
    c = Counter(r.role for r in m.layers)
    # 43 layers x (wq_a, wq_b, wkv, wo_a, wo_b, experts, shared gate_up, shared down) = 344,
    # + routers on layers 3..42 (num_hash_layers 3 route by hash) = 40, + embed + head = 386
    assert c["gate"] == 40 and c["experts"] == 43 and len(m.layers) == 43 * 8 + 40 + 2 == 386
    by = {(r.block, r.role): r.layer for r in m.layers}
    # wq_b: q_lora_rank 1024 -> 64 heads x head_dim 512 = 32768
    assert (by[5, "wq_b"].in_features, by[5, "wq_b"].out_features) == (1024, 32768)
    # wo_a: one of 8 groups reads 64 x 512 / 8 = 4096 and writes 8 x o_lora_rank 1024 = 8192
    assert (by[5, "wo_a"].in_features, by[5, "wo_a"].out_features) == (4096, 8192)
    e = by[5, "experts"]
    assert (e.num_experts, e.top_k, e.hidden_size, e.intermediate_size) == (256, 6, 4096, 2048)
    assert (e.weight_format, e.activation_format, e.activation, e.activation_params) == (
        "nvfp4", "nvfp4", "silu", {"limit": 10.0})
    # shared expert: 1 x 2048 -> gate_up 4096 wide, excluded by *.ffn.shared_experts.* -> bf16
    assert (by[5, "shared_experts.gate_up_proj"].out_features, by[5, "shared_experts.gate_up_proj"].weight_format) \
        == (4096, "bf16")
    assert by[0, "wq_a"].weight_format == "bf16" and (0, "gate") not in by and (3, "gate") in by
    assert m.coverage.status == "complete" and [u.entry for u in m.coverage.outside] == ["mtp.*"]


def test_deepseek_v4_per_rank_shapes_by_hand():
    m = load_model(str(DSV4), tp=8)
    by = {(r.block, r.role): r.layer for r in m.layers}
    assert by[7, "wq_b"].out_features == 32768 // 8 == 4096
    assert by[7, "wq_a"].out_features == 1024 and by[7, "wq_a"].tp_size == 1      # replicated
    assert by[7, "wkv"].out_features == 512 and by[7, "wkv"].tp_size == 1
    assert (by[7, "wo_a"].in_features, by[7, "wo_a"].out_features) == (4096, 8192 // 8)   # 1 group per rank
    assert (by[7, "wo_b"].in_features, by[7, "wo_b"].out_features) == (1024, 4096)
    assert by[7, "experts"].tp_size == 8 and by[7, "experts"].intermediate_size == 2048
    assert by[7, "shared_experts.down_proj"].in_features == 2048 // 8 == 256
    assert by[None, "embed_tokens"].num_embeddings == 129280 // 8 == 16160
    ep = {(r.block, r.role): r.layer for r in load_model(str(DSV4), ep=8).layers}
    assert (ep[7, "experts"].ep_size, ep[7, "experts"].tp_size) == (8, 1)


# ---------------------------------------------------------------- coverage
def test_checkpoint_names_under_other_module_names_are_understood(tmp_path):
    """DeepSeek-V4's quantized_layers (layers.N.ffn.experts) read against deepseek_v3 names
    (model.layers.N.mlp.experts): the name layer spells the derived names the checkpoint's way."""
    config = json.loads((DSV4 / "config.json").read_text())
    mla = {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "kv_lora_rank": 512,
           "qk_nope_head_dim": 128, "v_head_dim": 128, "intermediate_size": 4096, "num_key_value_heads": 64}
    quant = json.loads((DSV4 / "hf_quant_config.json").read_text())
    folder = write(tmp_path / "m", {**config, **mla}, hf_quant_config__json=quant)
    m = load_model(str(folder))
    assert m.coverage.status == "complete", m.coverage.error
    experts = [r for r in m.layers if r.role == "experts"]
    assert len(experts) == 43 and all(r.layer.weight_format == "nvfp4" for r in experts)
    assert {r.role for r in m.layers if r.quantized} == {"experts"}
    names = m.checkpoint_names
    assert names.spelling("model.layers.3.mlp.experts.0.gate_proj") == "layers.3.ffn.experts.0.gate_proj"
    assert names.spelling("model.layers.3.self_attn.q_a_proj") == "model.layers.3.attn.q_a_proj"  # '*.attn.*'
    assert any("checkpoint names differ from the derived ones" in n for n in m.notes)


def test_names_no_table_knows_are_an_error_exit_1(tmp_path):
    quant = json.loads((DSV4 / "hf_quant_config.json").read_text())
    quant["quantization"]["quantized_layers"] = {f"decoder.blocks.{i}.moe_experts": {"quant_algo": "NVFP4"}
                                                 for i in range(43)}
    folder = write(tmp_path / "m", json.loads((DSV4 / "config.json").read_text()), hf_quant_config__json=quant)
    cov = load_model(str(folder)).coverage
    assert cov.status == "none" and cov.quantized_layers == 0
    assert "no derived layer is quantized" in cov.error and "decoder.blocks.0.moe_experts" in cov.error
    assert "(and 40 more)" in cov.error          # bounded: three examples per class
    done = explain("--model", str(folder))
    assert done.returncode == 1, done.stderr
    assert f"ERROR: {folder / 'hf_quant_config.json'}: the checkpoint declares quantization" in done.stdout
    assert "nearest derived names: layers.0.ffn.experts" in done.stdout


def test_partial_coverage_warns_in_text_json_and_markdown(tmp_path):
    q = ct(["re:.*mlp\\.experts.*", "re:.*self_attn\\.qkv_typo$"], ignore=["lm_head", "re:.*mlp\\.gate$"])
    folder = write(tmp_path / "m", small_moe(quantization_config=q))
    cov = load_model(str(folder)).coverage
    assert cov.status == "partial" and cov.quantized_layers == 2          # the two expert layers
    assert [u.entry for u in cov.unmatched] == ["re:.*self_attn\\.qkv_typo$"]
    text = explain("--model", str(folder))
    assert text.returncode == 0 and "WARNING: partial quantization coverage: 1 entry" in text.stdout
    assert "qkv_typo" in text.stdout
    js = explain("--model", str(folder), "--format", "json")
    summary = json.loads(js.stdout)["summary"]
    assert summary["coverage"]["status"] == "partial" and summary["coverage"]["warnings"]
    assert summary["coverage"]["unmatched"][0]["key"] == "quantization_config.config_groups.group_0.targets"
    md = explain("--model", str(folder), "--format", "markdown")
    assert "WARNING: partial quantization coverage" in md.stdout


def test_unused_config_group_and_unknown_class_target_are_listed(tmp_path):
    q = ct(["Linear"], ignore=["re:.*"])
    q["config_groups"]["group_1"] = {**copy.deepcopy(q["config_groups"]["group_0"]), "targets": ["Qwen3MoeMLP"]}
    m = load_model(str(write(tmp_path / "m", small_moe(quantization_config=q))))
    kinds = Counter(u.kind for u in m.coverage.unmatched)
    assert m.coverage.status == "none"
    assert kinds == {"config_group": 2, "class_target": 1}


def test_ignore_entries_of_norms_and_past_the_decoder_are_expected(tmp_path):
    q = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
         "modules_to_not_convert": ["lm_head", "model.layers.0.input_layernorm", "model.layers.2.mlp",
                                    "model.layers.0.self_atn"]}
    cov = load_model(str(write(tmp_path / "m", small_moe(quantization_config=q)))).coverage
    assert sorted(u.entry for u in cov.outside) == ["model.layers.0.input_layernorm", "model.layers.2.mlp"]
    assert [u.entry for u in cov.unmatched] == ["model.layers.0.self_atn"]
    assert len(cov.unmatched[0].nearest) == 3
    assert all(n.startswith("model.layers.0.self_attn.") for n in cov.unmatched[0].nearest)


def test_shipped_examples_are_fully_covered():
    from oracle.models import example_names
    for name in example_names():
        cov = load_model(name).coverage
        assert cov.status in ("complete", "unquantized"), (name, cov.warnings, cov.error)


# ---------------------------------------------------------------- spellings, SiTU
def test_num_local_experts_spelling_is_read_as_experts(tmp_path):
    cfg = small_moe()
    cfg["num_local_experts"] = cfg.pop("num_experts")
    m = load_model(str(write(tmp_path / "m", cfg)))
    assert [r.layer.num_experts for r in m.layers if r.role == "experts"] == [8, 8]


def test_contradictory_spellings_are_an_error(tmp_path):
    with pytest.raises(InputError, match=r"num_local_experts: contradictory values .*num_experts=8"):
        load_model(str(write(tmp_path / "m", small_moe(num_local_experts=16))))


def test_moe_key_not_understood_is_an_error_not_a_dense_guess(tmp_path):
    dense = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
             "num_attention_heads": 4, "vocab_size": 128}
    with pytest.raises(InputError, match="n_experts_total: this expert/MoE key is not understood"):
        load_model(str(write(tmp_path / "a", {**dense, "n_experts_total": 16})))
    with pytest.raises(InputError, match="num_experts: 8 routed experts in a config of the dense"):
        load_model(str(write(tmp_path / "b", {**dense, "num_experts": 8})))


def test_situ_activation_with_its_parameters(tmp_path):
    cfg = small_moe(hidden_act="situ", activation_situ_beta=4.0, activation_situ_linear_beta=25.0)
    experts = [r.layer for r in load_model(str(write(tmp_path / "m", cfg))).layers if r.role == "experts"]
    assert {(e.activation, tuple(sorted(e.activation_params.items()))) for e in experts} == {
        ("situ", (("beta", 4.0), ("linear_beta", 25.0)))}
    with pytest.raises(InputError, match="activation_situ_beta: a SiTU parameter with hidden_act 'silu'"):
        load_model(str(write(tmp_path / "n", small_moe(activation_situ_beta=4.0))))


def test_text_config_without_model_type_is_resolved_from_architectures(tmp_path):
    text = small_moe()
    del text["model_type"], text["architectures"]
    top = {"architectures": ["Qwen3MoeForConditionalGeneration"], "model_type": "qwen3_vl_moe",
           "text_config": text, "vision_config": {"depth": 2}}
    m = load_model(str(write(tmp_path / "m", top)))
    assert m.model_type == "qwen3_moe" and m.layers[1].name.startswith("language_model.model.layers.0")


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("config, message", [
    ("[1, 2]", "expected a JSON object at the top level, got list"),
    (json.dumps({"model_type": "qwen3_moe", "hidden_size": 64}), "vocab_size: required key is missing"),
    (json.dumps(small_moe(moe_intermediate_size=33, num_experts=8)), None),
])
def test_bad_configs_exit_1_naming_file_and_key(tmp_path, config, message):
    folder = write(tmp_path / "m", config)
    done = explain("--model", str(folder), "--tp", "2")
    assert done.returncode == 1 and str(folder / "config.json") in done.stderr and "Traceback" not in done.stderr
    assert (message or "moe_intermediate_size 33 is not divisible by --tp 2") in done.stderr


def test_regex_target_that_does_not_compile(tmp_path):
    with pytest.raises(InputError, match=r"group_0\.targets.*invalid regular expression 're:\(unclosed'"):
        load_model(str(write(tmp_path / "m", small_moe(quantization_config=ct(["re:(unclosed"])))))


def test_index_naming_missing_shards(tmp_path):
    folder = write(tmp_path / "m", small_moe())
    index = {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                                            "lm_head.weight": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert "model.safetensors.index.json" in load_model(str(folder)).files[-1]   # no shards at all: fine
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"")
    with pytest.raises(InputError, match=r"weight_map\.lm_head\.weight: shard 'model-00002-of-00002.safetensors' "
                                         r"does not exist"):
        load_model(str(folder))


# ---------------------------------------------------------------- MiniMax-M2.5, Qwen3.5 (real configs)
def test_minimax_m25_nvfp4_layers_by_hand():
    m = load_model("nvidia-minimax-m2.5-nvfp4")
    assert (m.model_type, m.dialect) == ("minimax_m2", "modelopt")
    # 62 layers x (qkv, o, router, experts) + embed + lm_head
    assert len(m.layers) == 62 * 4 + 2 == 250
    by = {(r.block, r.role): r.layer for r in m.layers}
    qkv = by[10, "qkv_proj"]
    # q 48 x 128 = 6144, k and v 8 x 128 = 1024 each
    assert (qkv.in_features, qkv.out_features, qkv.weight_format) == (3072, 6144 + 2 * 1024, "bf16")
    e = by[10, "experts"]
    assert (e.num_experts, e.top_k, e.intermediate_size, e.weight_format, e.activation_format) == (
        256, 8, 1536, "nvfp4", "nvfp4")
    assert by[10, "gate"].weight_format == "bf16" and by[None, "lm_head"].weight_format == "bf16"
    assert m.coverage.status == "complete" and not m.coverage.outside
    assert any("3 multi-token-prediction layer(s) (num_mtp_modules)" in n for n in m.notes)
    t8 = {(r.block, r.role): r.layer for r in load_model("nvidia-minimax-m2.5-nvfp4", tp=8).layers}
    # q 6144 / 8 = 768; 8 KV heads / 8 = 1 each: 128 + 128
    assert (t8[3, "qkv_proj"].out_features, t8[3, "o_proj"].in_features) == (768 + 256, 768)
    assert t8[None, "embed_tokens"].num_embeddings == 200064 // 8 == 25008


def test_qwen35_122b_nvfp4_layers_by_hand():
    m = load_model("nvidia-qwen3.5-122b-a10b-nvfp4")
    assert (m.model_type, m.architecture) == ("qwen3_5_moe_text", "Qwen3_5MoeForConditionalGeneration")
    c = Counter(r.role for r in m.layers)
    # 36 DeltaNet layers x 3 GEMMs + 12 attention layers x 2 + 48 x (router, experts, shared gate_up, shared down,
    # shared gate) + embed + head = 108 + 24 + 240 + 2 = 374
    assert (c["linear_attn.in_proj_qkvz"], c["qkv_proj"], c["experts"], len(m.layers)) == (36, 12, 48, 374)
    by = {(r.block, r.role): r for r in m.layers}
    # the checkpoint's transformers-5 names, as its ignore list spells them
    assert by[0, "experts"].name == "model.language_model.layers.0.mlp.experts"
    qkvz = by[0, "linear_attn.in_proj_qkvz"].layer
    # q, k: 16 key heads x 128 each = 4096; v, z: 64 value heads x 128 each = 16384 -> 20480
    assert (qkvz.in_features, qkvz.out_features, qkvz.weight_format) == (3072, 2 * 2048 + 2 * 8192, "bf16")
    assert by[0, "linear_attn.in_proj_ba"].layer.out_features == 2 * 64
    assert by[0, "linear_attn.out_proj"].layer.in_features == 64 * 128
    # layer 3 is full attention: q with its output gate 2 x 32 x 256, k and v 2 x 256 each
    assert by[3, "qkv_proj"].layer.out_features == 2 * 32 * 256 + 2 * 2 * 256 == 17408
    e = by[3, "experts"].layer
    assert (e.num_experts, e.top_k, e.intermediate_size, e.weight_format) == (256, 8, 1024, "nvfp4")
    assert by[3, "shared_experts.gate_up_proj"].layer.weight_format == "bf16"
    assert m.coverage.status == "complete"
    assert sorted(u.entry for u in m.coverage.outside) == ["model.visual*", "mtp*", "mtp.layers.0*"]
    t4 = {(r.block, r.role): r.layer for r in load_model("nvidia-qwen3.5-122b-a10b-nvfp4", tp=4).layers}
    assert t4[0, "linear_attn.in_proj_qkvz"].out_features == 20480 // 4
    assert t4[0, "linear_attn.out_proj"].in_features == 8192 // 4
    # 2 KV heads under --tp 4: one replicated KV head per rank -> q 2 x 8 x 256 + k, v 256 each
    assert t4[3, "qkv_proj"].out_features == 2 * 8 * 256 + 2 * 256


def test_nested_layout_follows_the_checkpoints_names(tmp_path):
    """The same text model under the transformers-4 layout when its ignore list says so."""
    config = json.loads((REPO / "examples" / "nvidia-qwen3.5-122b-a10b-nvfp4" / "config.json").read_text())
    q = config["quantization_config"]
    q["ignore"] = [e.replace("model.language_model.", "language_model.model.") for e in q["ignore"]]
    m = load_model(str(write(tmp_path / "m", config)))
    assert m.layers[1].name.startswith("language_model.model.layers.0.") and m.coverage.status == "complete"


def test_glm5_fp8_layers_by_hand():
    m = load_model("zai-glm-5-fp8")
    assert (m.model_type, m.dialect) == ("glm_moe_dsa", "fp8")
    c = Counter(r.role for r in m.layers)
    # 78 layers x (5 MLA + 3 indexer GEMMs) = 624; layers 0-2 dense (gate_up, down) = 6;
    # layers 3-77 MoE x (router, experts, shared gate_up, shared down) = 300; + embed + head = 932
    assert (c["experts"], c["gate_up_proj"], len(m.layers)) == (75, 3, 624 + 6 + 300 + 2)
    by = {(r.block, r.role): r for r in m.layers}
    q_b, kv_b, o = (by[5, role].layer for role in ("q_b_proj", "kv_b_proj", "o_proj"))
    # q_b: 2048 -> 64 x (192 + 64) = 16384; kv_b: 512 -> 64 x (192 + 256) = 28672; o: 64 x 256 -> 6144
    assert (q_b.in_features, q_b.out_features, kv_b.out_features, o.in_features) == (2048, 16384, 28672, 16384)
    assert (q_b.weight_format, q_b.group_size) == ("fp8_block", 128)
    # the checkpoint's own name for the indexer's weights projection is excluded; wq_b (2048 -> 32 x 128) is FP8
    assert by[5, "indexer.weights_proj"].name == "model.layers.5.self_attn.indexers_proj"
    assert by[5, "indexer.weights_proj"].layer.weight_format == "bf16"
    assert (by[5, "indexer.wq_b"].layer.out_features, by[5, "indexer.wq_b"].layer.weight_format) == (4096, "fp8_block")
    e = by[5, "experts"].layer
    assert (e.num_experts, e.top_k, e.intermediate_size, e.weight_format) == (256, 8, 2048, "fp8_block")
    assert by[0, "gate_up_proj"].layer.out_features == 2 * 12288 and (0, "experts") not in by
    assert m.coverage.status == "complete"
    assert "model.layers.78.eh_proj" in {u.entry for u in m.coverage.outside}     # the MTP layer
    t8 = {(r.block, r.role): r.layer for r in load_model("zai-glm-5-fp8", tp=8).layers}
    assert (t8[5, "q_b_proj"].out_features, t8[5, "kv_b_proj"].out_features, t8[5, "o_proj"].in_features) == (
        16384 // 8, 28672 // 8, 16384 // 8)
    assert t8[5, "indexer.wq_b"].out_features == 4096 and t8[5, "q_a_proj"].tp_size == 1    # replicated


def test_top_k_without_an_expert_count_is_not_read_as_dense(tmp_path):
    cfg = {"model_type": "no_such_arch", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 128, "moe_topk": 2}
    with pytest.raises(InputError, match="moe_topk: experts per token given without an expert count"):
        load_model(str(write(tmp_path / "m", cfg)))


def test_swigluoai_named_in_the_config_with_its_parameters(tmp_path):
    cfg = small_moe(hidden_act="swigluoai", swiglu_alpha=1.5, swiglu_limit=9.0)
    e = next(r.layer for r in load_model(str(write(tmp_path / "m", cfg))).layers if r.role == "experts")
    assert (e.activation, e.activation_params) == ("swigluoai", {"limit": 9.0, "alpha": 1.5, "beta": 1.0})
