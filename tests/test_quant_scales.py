"""FP8 activation-scale kind and 2-D weight block: every dialect fills them, contradictions are errors."""
from __future__ import annotations

import json

import pytest

from oracle.errors import InputError
from oracle.layer import LinearLayer, MoELayer
from oracle.models import load_model

QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
            "intermediate_size": 12288, "num_hidden_layers": 2, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "torch_dtype": "bfloat16"}


def _model(tmp_path, quant: dict, sibling: dict | None = None):
    (tmp_path / "config.json").write_text(json.dumps({**QWEN3_8B, "quantization_config": quant}))
    if sibling is not None:
        (tmp_path / "hf_quant_config.json").write_text(json.dumps(sibling))
    return load_model(str(tmp_path))


def _scales(model) -> set:
    return {(r.layer.weight_format, r.layer.activation_scale, r.layer.weight_block)
            for r in model.layers if r.quantized}


def _ct(weights: dict, acts: dict | None) -> dict:
    group = {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "symmetric": True, **weights},
             "input_activations": None if acts is None else {"num_bits": 8, "type": "float", **acts}}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": group},
            "ignore": ["lm_head"]}


@pytest.mark.parametrize("quant, expected", [
    ({"quant_method": "fp8", "activation_scheme": "static"}, ("fp8_tensor", "static_tensor", None)),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, ("fp8_tensor", "dynamic_tensor", None)),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, ("fp8_block", "dynamic_group", (128, 128))),
    (_ct({"strategy": "tensor"}, {"strategy": "tensor", "dynamic": False}), ("fp8_tensor", "static_tensor", None)),
    (_ct({"strategy": "tensor"}, {"strategy": "tensor", "dynamic": True}), ("fp8_tensor", "dynamic_tensor", None)),
    (_ct({"strategy": "channel"}, {"strategy": "token", "dynamic": True}), ("fp8_channel", "dynamic_token", None)),
    (_ct({"strategy": "block", "block_structure": [128, 128]}, {"strategy": "group", "group_size": 128,
                                                                 "dynamic": True}),
     ("fp8_block", "dynamic_group", (128, 128))),
    (_ct({"strategy": "channel"}, None), ("fp8_channel", None, None)),                   # weight-only: no kind
])
def test_every_dialect_fills_scale_kind_and_block(tmp_path, quant, expected):
    assert _scales(_model(tmp_path, quant)) == {expected}


def test_modelopt_fp8_is_static_and_per_token_is_dynamic(tmp_path):
    m = _model(tmp_path, {"quant_method": "modelopt", "quant_algo": "FP8"})
    assert _scales(m) == {("fp8_tensor", "static_tensor", None)}
    m = _model(tmp_path, {"quant_method": "modelopt", "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN"})
    assert _scales(m) == {("fp8_channel", "dynamic_token", None)}
    assert "dynamic_token" in m.dialect_detail


@pytest.mark.parametrize("quant, key, words", [
    ({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]},
     "quantization_config.activation_scheme", "contradicts weight_block_size"),
    (_ct({"strategy": "channel", "block_structure": [128, 128]}, {"strategy": "token", "dynamic": True}),
     "weights.block_structure", "contradicts block_structure"),
    (_ct({"strategy": "block", "block_structure": [128, 128]}, {"strategy": "group", "group_size": 64,
                                                                 "dynamic": True}),
     "input_activations.group_size", "contradict the weights' block_structure"),
    (_ct({"strategy": "channel"}, {"strategy": "token", "dynamic": False}),
     "input_activations.dynamic", "contradicts dynamic: false"),
    (_ct({"strategy": "channel"}, {"strategy": "token", "dynamic": "sometimes"}),
     "input_activations.dynamic", "expected true or false"),
])
def test_contradictory_scale_kinds_or_blocks_name_the_key(tmp_path, quant, key, words):
    with pytest.raises(InputError, match=key.replace(".", r"\.")) as info:
        _model(tmp_path, quant)
    assert words in str(info.value) and "config.json" in str(info.value)


def test_layer_validators_reject_contradictions():
    with pytest.raises(ValueError, match="describes FP8 activations"):
        LinearLayer(in_features=128, out_features=128, weight_format="nvfp4", activation_format="nvfp4",
                    activation_scale="static_tensor")
    with pytest.raises(ValueError, match="applies to block formats"):
        LinearLayer(in_features=128, out_features=128, weight_format="fp8_tensor", weight_block=(128, 128))
    with pytest.raises(ValueError, match="group_size 64 contradicts weight_block"):
        MoELayer(num_experts=8, top_k=2, hidden_size=128, intermediate_size=128, weight_format="fp8_block",
                 weight_block=(128, 128), group_size=64)
    layer = LinearLayer(in_features=128, out_features=128, weight_format="fp8_block", activation_format="fp8")
    fields = layer.rule_fields()
    assert (fields["activation_scale"], fields["weight_block_rows"], fields["weight_block_cols"]) == \
        ("unknown", 128, 128)                        # unknown kind; the format's standard block
