"""Configs written by transformers itself, and the meta-device path for model types outside the tables.

transformers is a test dependency (scripts/dev-setup); the engine imports it only on the
meta-device path, which these tests exercise in a subprocess-free way.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torch")

from oracle.models import load_model  # noqa: E402
from oracle.models.architectures import ARCHITECTURES  # noqa: E402


def write(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_qwen3_moe_config_written_by_transformers(tmp_path):
    from transformers import Qwen3MoeConfig
    cfg = Qwen3MoeConfig(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
                         num_experts_per_tok=2, vocab_size=128, mlp_only_layers=[1]).to_dict()
    m = load_model(str(write(tmp_path / "m", cfg)), tp=2)
    assert m.derivation == "architecture table"
    experts = {r.block: r.layer for r in m.layers if r.role == "experts"}
    assert sorted(experts) == [0, 2]                                   # layer 1 is in mlp_only_layers
    assert (experts[0].num_experts, experts[0].top_k, experts[0].intermediate_size) == (8, 2, 32)
    qkv = next(r.layer for r in m.layers if r.role == "qkv_proj")
    assert qkv.out_features == (4 * 16 + 2 * 2 * 16) // 2 == 64        # (q 64 + k 32 + v 32) / tp 2


def test_meta_path_on_an_architecture_outside_the_tables(tmp_path):
    """ernie4_5_moe is not in the tables: transformers' own class gives names and shapes."""
    from transformers import Ernie4_5_MoeConfig
    assert "ernie4_5_moe" not in ARCHITECTURES
    cfg = Ernie4_5_MoeConfig(hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
                             num_attention_heads=4, num_key_value_heads=2, moe_num_experts=8, moe_k=2,
                             moe_num_shared_experts=1, moe_layer_start_index=1, vocab_size=128,
                             tie_word_embeddings=False).to_dict()
    q = {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
         "config_groups": {"g": {"targets": ["re:.*mlp\\.experts.*"],
                                 "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                                 "input_activations": {"num_bits": 8, "type": "float", "strategy": "token"}}}}
    m = load_model(str(write(tmp_path / "m", {**cfg, "quantization_config": q})), tp=2)
    assert m.derivation == "transformers meta-device model" and not m.generic
    assert any("Ernie4_5_MoeForCausalLM built on the meta device" in n for n in m.notes)
    by = {(r.block, r.role): r for r in m.layers}
    assert (0, "experts") not in by and (0, "gate_up_proj") in by       # moe_layer_start_index 1: layer 0 dense
    dense = by[0, "gate_up_proj"].layer
    assert (dense.in_features, dense.out_features) == (64, 2 * 96 // 2)  # gate+up 2 x 96, split over tp 2
    e = by[1, "experts"].layer
    assert (e.num_experts, e.top_k, e.hidden_size, e.intermediate_size, e.tp_size) == (8, 2, 64, 32, 2)
    assert (e.weight_format, e.activation_format) == ("fp8_channel", "fp8")
    assert by[1, "gate"].layer.weight_format == "bf16" and by[1, "gate"].layer.out_features == 8
    o = by[1, "o_proj"].layer
    assert (o.in_features, o.out_features) == (64 // 2, 64)             # row-parallel: K split
    assert m.coverage.status == "complete" and m.coverage.quantized_layers == 2


def test_meta_path_index_names_are_checked(tmp_path):
    from transformers import Ernie4_5_MoeConfig
    cfg = Ernie4_5_MoeConfig(hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=1,
                             num_attention_heads=4, num_key_value_heads=2, moe_num_experts=4, moe_k=2,
                             moe_layer_start_index=0, vocab_size=128).to_dict()
    folder = write(tmp_path / "m", cfg)
    index = {"weight_map": {"model.layers.0.self_attn.q_proj.weight": "a.safetensors",
                            "model.layers.0.attention.wqkv.weight": "a.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    m = load_model(str(folder))
    assert "+ model.safetensors.index.json" in m.coverage.names_from
    assert any("derived module names are not in model.safetensors.index.json" in n for n in m.notes)


def test_unknown_model_type_without_transformers_support_is_an_error(tmp_path):
    cfg = {"model_type": "no_such_arch", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 128, "moe_num_expertz": 4}
    from oracle.errors import InputError
    with pytest.raises(InputError, match="moe_num_expertz: this expert/MoE key is not understood"):
        load_model(str(write(tmp_path / "m", cfg)))


def test_import_oracle_models_does_not_import_transformers():
    code = ("import sys, oracle.models; oracle.models.load_model('qwen3-8b'); "
            "assert 'transformers' not in sys.modules and 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_mixed_precision_targets_on_the_checkpoints_own_names(tmp_path):
    """The issue's case: a model type outside the tables, compressed-tensors mixed-precision, regex targets
    on attention and FFN projection names -> FP8 attention, NVFP4 experts (not 'unquantized')."""
    from transformers import Ernie4_5_MoeConfig
    cfg = Ernie4_5_MoeConfig(hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, moe_num_experts=8, moe_k=2,
                             moe_layer_start_index=0, vocab_size=128).to_dict()
    fp8 = {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
           "input_activations": {"num_bits": 8, "type": "float", "strategy": "token"}}
    fp4 = {"weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
           "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}
    q = {"quant_method": "compressed-tensors", "format": "mixed-precision", "ignore": ["lm_head"],
         "config_groups": {"attn": {**fp8, "targets": ["re:.*self_attn\\.(q|k|v|o)_proj$"]},
                           "ffn": {**fp4, "targets": ["re:.*mlp\\.experts\\.\\d+\\.(gate|up|down)_proj$"]}}}
    m = load_model(str(write(tmp_path / "m", {**cfg, "quantization_config": q})))
    by = {(r.block, r.role): r.layer for r in m.layers}
    assert (by[0, "qkv_proj"].weight_format, by[0, "o_proj"].weight_format) == ("fp8_channel", "fp8_channel")
    assert (by[1, "experts"].weight_format, by[1, "experts"].activation_format) == ("nvfp4", "nvfp4")
    assert m.coverage.status == "complete" and m.coverage.quantized_layers == 2 * 3


@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5_moe_text"])
def test_table_agrees_with_transformers_own_modules(tmp_path, model_type, monkeypatch):
    """The qwen3_next table derives the same parts and per-rank shapes as transformers' class (meta path)."""
    from transformers import AutoConfig

    import oracle.models.build as build
    cfg = AutoConfig.for_model(model_type, hidden_size=64, num_hidden_layers=4, vocab_size=128, num_experts=8,
                               num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
                               linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=12).to_dict()
    folder = write(tmp_path / "m", cfg)
    table = load_model(str(folder), tp=2)
    monkeypatch.setattr(build, "ARCHITECTURES", {k: v for k, v in ARCHITECTURES.items() if k != model_type})
    meta = load_model(str(folder), tp=2)
    assert (table.derivation, meta.derivation) == ("architecture table", "transformers meta-device model")

    def signature(model):
        return sorted((m.parts, m.layer.model_dump_json(exclude={"name"})) for m in model.layers)
    assert len(table.layers) == 33 and signature(table) == signature(meta)


def test_unmatched_entry_names_the_checkpoint_module_from_the_index(tmp_path):
    """A target written against the checkpoint's own names (index) but absent from the derived names."""
    from transformers import Ernie4_5_MoeConfig
    cfg = Ernie4_5_MoeConfig(hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=1,
                             num_attention_heads=4, num_key_value_heads=2, moe_num_experts=4, moe_k=2,
                             moe_layer_start_index=0, vocab_size=128).to_dict()
    q = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
         "modules_to_not_convert": ["model.layers.0.attention.wqkv"]}
    folder = write(tmp_path / "m", {**cfg, "quantization_config": q})
    index = {"weight_map": {"model.layers.0.attention.wqkv.weight": "a.safetensors",
                            "model.layers.0.self_attn.o_proj.weight": "a.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    cov = load_model(str(folder)).coverage
    assert cov.status == "partial"
    [u] = cov.unmatched
    assert u.in_checkpoint == "model.layers.0.attention.wqkv"
    assert "[names checkpoint module model.layers.0.attention.wqkv]" in cov.warnings[0]
