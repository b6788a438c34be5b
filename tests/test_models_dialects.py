"""Quantization dialects: each one's keys -> weight format, activation format, group size, skip lists.

The configs are small hand-written llama / MoE bodies; the expected formats are the
mapping stated in SPEC.md and oracle/models/quant.py's docstring.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from oracle.errors import InputError
from oracle.models import load_model

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
         "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 1000, "torch_dtype": "bfloat16"}
QWEN3_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 256,
             "intermediate_size": 512, "moe_intermediate_size": 128, "num_experts": 8, "num_experts_per_tok": 2,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
             "vocab_size": 1000}


def write(tmp_path: Path, config: dict, **siblings: dict) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    for name, data in siblings.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    return str(tmp_path)


def fmt(model, role, block=0):
    layer = next(r.layer for r in model.layers if r.role == role and r.block in (block, None))
    return layer.weight_format, layer.activation_format, getattr(layer, "group_size", None)


def with_qc(base: dict, qc: dict) -> dict:
    return {**base, "quantization_config": qc}


# ---------------------------------------------------------------- none / HF dialects
def test_unquantized_checkpoint(tmp_path):
    m = load_model(write(tmp_path, LLAMA))
    assert m.dialect == "none" and not m.quantized_layers
    assert {r.layer.weight_format for r in m.layers} == {"bf16"}
    fp16 = load_model(write(tmp_path, {**LLAMA, "torch_dtype": "float16"}))
    assert {(r.layer.weight_format, r.layer.dtype) for r in fp16.layers} == {("fp16", "float16")}


def test_fp8_block_and_per_tensor(tmp_path):
    block = load_model(write(tmp_path, with_qc(LLAMA, {"quant_method": "fp8", "activation_scheme": "dynamic",
                                                        "weight_block_size": [128, 128]})))
    assert fmt(block, "qkv_proj") == ("fp8_block", "fp8", 128)
    assert fmt(block, "down_proj") == ("fp8_block", "fp8", 128)
    assert fmt(block, "lm_head")[0] == "bf16" and fmt(block, "embed_tokens")[0] == "bf16"
    tensor = load_model(write(tmp_path, with_qc(LLAMA, {"quant_method": "fp8", "activation_scheme": "static"})))
    assert fmt(tensor, "qkv_proj") == ("fp8_tensor", "fp8", None)
    assert "per-tensor" in tensor.dialect_detail and "static" in tensor.dialect_detail


def test_mxfp4_modules_to_not_convert_globs(tmp_path):
    qc = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}
    m = load_model(write(tmp_path, with_qc(QWEN3_MOE, qc)))
    assert fmt(m, "experts") == ("mxfp4", None, 32)
    assert fmt(m, "qkv_proj")[0] == "bf16"
    # qwen3_moe's router follows the checkpoint's lists (quant.ROUTER_FOLLOWS_CHECKPOINT: vLLM 0.32 builds
    # its GateLinear with the quant config): nothing skips it here, so it is quantized like any linear ...
    assert fmt(m, "gate")[0] == "mxfp4"
    # ... and an entry naming it keeps it BF16
    skipped = load_model(write(tmp_path, with_qc(QWEN3_MOE, {**qc, "modules_to_not_convert": [
        *qc["modules_to_not_convert"], "re:.*mlp\\.gate$"]})))
    assert fmt(skipped, "gate")[0] == "bf16"


def test_skip_list_respects_dot_boundaries(tmp_path):
    # 'mlp.gate' names the router; it must not match 'mlp.gate_proj' (the checkpoint name of the MLP)
    qc = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
          "modules_to_not_convert": ["model.layers.0.mlp.gate"]}
    m = load_model(write(tmp_path, with_qc(LLAMA, qc)))
    assert fmt(m, "gate_up_proj", 0)[0] == "fp8_block"


def test_fused_layer_is_quantized_only_if_every_part_is(tmp_path):
    qc = {"quant_method": "fp8", "activation_scheme": "dynamic", "modules_to_not_convert": ["model.layers.1.self_attn.k_proj"]}
    m = load_model(write(tmp_path, with_qc(LLAMA, qc)))
    assert fmt(m, "qkv_proj", 0)[0] == "fp8_tensor"
    row = next(r for r in m.layers if r.role == "qkv_proj" and r.block == 1)
    assert row.layer.weight_format == "bf16"
    assert "fused parts disagree" in row.quant_note and "k_proj: unquantized" in row.quant_note


def test_gptq_in_config_and_quantize_config_json(tmp_path):
    m = load_model(write(tmp_path, with_qc(LLAMA, {"quant_method": "gptq", "bits": 4, "group_size": 128,
                                                  "desc_act": True, "sym": True})))
    assert m.dialect == "gptq" and fmt(m, "qkv_proj") == ("int4", None, 128)
    assert "desc_act True" in m.dialect_detail
    assert fmt(m, "lm_head")[0] == "bf16"
    side = tmp_path / "side"
    side.mkdir()
    m = load_model(write(side, LLAMA, quantize_config={"bits": 4, "group_size": -1, "desc_act": False, "sym": True,
                                                       "lm_head": True}))
    assert m.dialect == "gptq" and fmt(m, "down_proj") == ("int4", None, None)   # -1: per channel
    assert fmt(m, "lm_head")[0] == "int4"
    assert m.files[-1].endswith("quantize_config.json")


def test_awq(tmp_path):
    m = load_model(write(tmp_path, with_qc(QWEN3_MOE, {"quant_method": "awq", "bits": 4, "group_size": 64,
                                                      "zero_point": True,
                                                      "modules_to_not_convert": ["self_attn"]})))
    assert m.dialect == "awq" and fmt(m, "experts") == ("int4", None, 64)


# ---------------------------------------------------------------- compressed-tensors
def ct(weights: dict, inputs: dict | None = None, *, fmt_name="float-quantized", ignore=(), targets=("Linear",)):
    return {"quant_method": "compressed-tensors", "format": fmt_name, "ignore": list(ignore),
            "config_groups": {"group_0": {"targets": list(targets), "weights": weights,
                                          "input_activations": inputs}}}


FP8 = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False}
FP8_TOKEN = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}


@pytest.mark.parametrize("strategy,extra,expected", [
    ("tensor", {}, ("fp8_tensor", "fp8", None)),
    ("channel", {}, ("fp8_channel", "fp8", None)),
    ("block", {"block_structure": [128, 128]}, ("fp8_block", "fp8", 128)),
])
def test_compressed_tensors_fp8_strategies(tmp_path, strategy, extra, expected):
    qc = ct({**FP8, "strategy": strategy, **extra}, FP8_TOKEN)
    assert fmt(load_model(write(tmp_path, with_qc(LLAMA, qc))), "qkv_proj") == expected


def test_compressed_tensors_fp8_weight_only(tmp_path):
    qc = ct({**FP8, "strategy": "channel"}, None, fmt_name="naive-quantized")
    assert fmt(load_model(write(tmp_path, with_qc(LLAMA, qc))), "qkv_proj") == ("fp8_channel", "bf16", None)


def test_compressed_tensors_nvfp4_w4a4_and_weight_only(tmp_path):
    w = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "scale_dtype": "float8_e4m3fn"}
    a = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "dynamic": "local"}
    w4a4 = load_model(write(tmp_path, with_qc(QWEN3_MOE, ct(w, a, fmt_name="nvfp4-pack-quantized"))))
    assert fmt(w4a4, "experts") == ("nvfp4", "nvfp4", 16)
    w4a16 = load_model(write(tmp_path, with_qc(QWEN3_MOE, ct(w, None, fmt_name="nvfp4-pack-quantized"))))
    assert fmt(w4a16, "experts") == ("nvfp4", "bf16", 16)


def test_compressed_tensors_mxfp4(tmp_path):
    w = {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32}
    m = load_model(write(tmp_path, with_qc(QWEN3_MOE, ct(w, None, fmt_name="mxfp4-pack-quantized"))))
    assert fmt(m, "experts") == ("mxfp4", "bf16", 32)
    a = {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 32, "dynamic": True}
    m = load_model(write(tmp_path, with_qc(QWEN3_MOE, ct(w, a, fmt_name="mxfp4-pack-quantized"))))
    assert fmt(m, "experts") == ("mxfp4", "mxfp8", 32)


def test_compressed_tensors_int4_and_ignore_patterns(tmp_path):
    w = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}
    qc = ct(w, None, fmt_name="pack-quantized", ignore=["lm_head", r"re:.*self_attn\.(q|k|v)_proj$"])
    m = load_model(write(tmp_path, with_qc(LLAMA, qc)))
    assert fmt(m, "qkv_proj")[0] == "bf16"
    assert fmt(m, "o_proj") == ("int4", "bf16", 128)          # the regex names q/k/v only
    assert fmt(m, "gate_up_proj") == ("int4", "bf16", 128)


def test_compressed_tensors_name_target_beats_class_target(tmp_path):
    qc = {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": [],
          "config_groups": {
              "fp8": {"targets": ["Linear"], "weights": {**FP8, "strategy": "channel"}, "input_activations": FP8_TOKEN},
              "int4": {"targets": [r"re:.*mlp\.down_proj"], "format": "pack-quantized",
                       "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32}}}}
    m = load_model(write(tmp_path, with_qc(LLAMA, qc)))
    assert fmt(m, "down_proj") == ("int4", "bf16", 32)
    assert fmt(m, "gate_up_proj") == ("fp8_channel", "fp8", None)


# ---------------------------------------------------------------- ModelOpt
def test_modelopt_fp8_mxfp8_nvfp4(tmp_path):
    for algo, expected in (("FP8", ("fp8_tensor", "fp8", None)), ("MXFP8", ("mxfp8", "mxfp8", 32)),
                           ("NVFP4", ("nvfp4", "nvfp4", 16))):
        folder = tmp_path / algo
        folder.mkdir()
        hf = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": algo, "kv_cache_quant_algo": None,
                                                                "exclude_modules": ["lm_head"]}}
        m = load_model(write(folder, QWEN3_MOE, hf_quant_config=hf))
        assert m.dialect == "modelopt" and fmt(m, "experts") == expected, algo
        assert fmt(m, "qkv_proj") == expected


def test_modelopt_inside_config_json(tmp_path):
    qc = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}
    m = load_model(write(tmp_path, with_qc(QWEN3_MOE, qc)))
    assert fmt(m, "experts") == ("nvfp4", "nvfp4", 16)


CODEC = {"IQ2_XS": (256, 74, "iq2_xs"), "IQ2_XXS": (256, 66, "iq2_xxs"), "Q8_0": (32, 34, "q8_0")}


def test_modelopt_mixed_precision_codecs(tmp_path):
    def entry(algo):
        g, b, _ = CODEC[algo]
        return {"quant_algo": algo, "group_size": g, "block_payload_bytes": b, "packing": "ggml"}
    layers = {"model.embed_tokens": entry("Q8_0"),
              "model.layers.0.self_attn.q_proj": {"quant_algo": "FP8"},
              "model.layers.0.self_attn.k_proj": {"quant_algo": "FP8"},
              "model.layers.0.self_attn.v_proj": {"quant_algo": "FP8"},
              "model.layers.0.mlp.experts": entry("IQ2_XS"),
              "model.layers.1.mlp.experts": entry("IQ2_XXS")}
    qc = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": layers}
    m = load_model(write(tmp_path, with_qc(QWEN3_MOE, qc)))
    assert fmt(m, "embed_tokens")[0] == "q8_0"
    assert fmt(m, "qkv_proj", 0) == ("fp8_tensor", "fp8", None)
    assert fmt(m, "o_proj", 0)[0] == "bf16"                   # not listed -> unquantized
    assert fmt(m, "experts", 0) == ("iq2_xs", None, 256)
    assert fmt(m, "experts", 1) == ("iq2_xxs", None, 256)
    assert fmt(m, "qkv_proj", 1)[0] == "bf16"
    o_row = next(r for r in m.layers if r.role == "o_proj")
    assert o_row.quant_note == "not listed in quantized_layers"


@pytest.mark.parametrize("entry,field", [
    ({"quant_algo": "IQ2_XS", "group_size": 256, "block_payload_bytes": 66, "packing": "ggml"}, "block_payload_bytes"),
    ({"quant_algo": "Q8_0", "group_size": 256, "block_payload_bytes": 34, "packing": "ggml"}, "group_size"),
    ({"quant_algo": "IQ2_XXS", "group_size": 256, "block_payload_bytes": 66, "packing": "gguf"}, "packing"),
    ({"quant_algo": "Q8_0", "group_size": 32, "packing": "ggml"}, "block_payload_bytes"),
    ({"quant_algo": "Q4_K"}, "quant_algo"),
])
def test_modelopt_codec_errors(tmp_path, entry, field):
    qc = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
          "quantized_layers": {"model.layers.0.mlp.experts": entry}}
    with pytest.raises(InputError) as err:
        load_model(write(tmp_path, with_qc(QWEN3_MOE, qc)))
    text = str(err.value)
    assert "config.json" in text and f"model.layers.0.mlp.experts.{field}" in text
    assert "\n" not in text


def test_modelopt_quantized_norm_is_an_error(tmp_path):
    qc = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
          "quantized_layers": {"model.layers.0.input_layernorm": {"quant_algo": "Q8_0", "group_size": 32,
                                                                  "block_payload_bytes": 34, "packing": "ggml"}}}
    with pytest.raises(InputError, match="normalization weights"):
        load_model(write(tmp_path, with_qc(QWEN3_MOE, qc)))


# ---------------------------------------------------------------- unsupported formats
@pytest.mark.parametrize("qc,field", [
    (ct({"num_bits": 3, "type": "int", "strategy": "channel"}, {"num_bits": 8, "type": "int", "strategy": "token"},
        fmt_name="int-quantized"), "config_groups.group_0.weights.num_bits"),
    ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "quantization_config.bits"),
    ({"quant_method": "fp8", "fmt": "e5m2", "activation_scheme": "dynamic"}, "quantization_config.fmt"),
    ({"quant_method": "bitsandbytes"}, "quantization_config.quant_method"),
])
def test_unsupported_formats_name_file_and_key(tmp_path, qc, field):
    with pytest.raises(InputError) as err:
        load_model(write(tmp_path, with_qc(LLAMA, qc)))
    assert str(tmp_path / "config.json") in str(err.value) and field in str(err.value)
