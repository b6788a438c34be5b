"""2026 checkpoints explained by their own tensor names (issue 21).

Each test reads a 2026 config (tests/fixtures/models2026, provenance in its SOURCES.md) and
asserts every layer's format against what the checkpoint's own names say: the entry of
quantized_layers, the target or the ignore entry that names it. Expected shapes are worked out
by hand from the config keys, written next to each assert.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models2026 import (FIXTURES, config, deepseek_v4_flash_ct, deepseek_v4_flash_index, minimax_m3_quantization,
                        with_mixed_expert, write)
from oracle.errors import InputError
from oracle.models import load_model
from oracle.models.matching import NameMatcher

REPO = Path(__file__).resolve().parents[1]


def rows(model, role, block=None):
    found = [r for r in model.layers if r.role == role and (block is None or r.block == block)]
    assert found, f"no {role} in block {block}"
    return found


def fmt(row) -> tuple:
    return row.layer.weight_format, row.layer.activation_format, row.layer.group_size


def explain(*argv):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "ORACLE_"))}
    return subprocess.run([sys.executable, "-m", "oracle.cli", "explain", "--device", "sm120",
                           "--with-package", "b12x=1.5.1", *argv],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=env)


# ---------------------------------------------------------------- DeepSeek-V4-Flash
def test_deepseek_v4_flash_original_fp8_with_fp4_experts():
    """deepseek-ai/DeepSeek-V4-Flash: quant_method fp8 (128x128 blocks) and expert_dtype fp4."""
    m = load_model(str(FIXTURES / "deepseek-v4-flash"))
    assert m.model_type == "deepseek_v4" and "expert_dtype" in m.dialect_detail
    for role in ("wq_a", "wq_b", "wkv", "wo_a", "wo_b", "shared_experts.gate_up_proj", "shared_experts.down_proj"):
        assert {fmt(r) for r in rows(m, role)} == {("fp8_block", "fp8", 128)}, role
    experts = rows(m, "experts")
    assert len(experts) == 43 and {fmt(r) for r in experts} == {("mxfp4", None, 32)}   # expert_dtype: fp4
    assert [r.block for r in rows(m, "gate")] == list(range(3, 43))    # num_hash_layers 3: no router GEMM
    assert {fmt(r)[0] for r in rows(m, "gate")} == {"bf16"}
    assert fmt(rows(m, "lm_head")[0])[0] == "bf16"


def test_deepseek_v4_flash_compressed_tensors_original_names(tmp_path):
    """Targets name fused_wqa_wkv and ffn.*.(gate|up|down)_proj: the checkpoint's names, not the tables'."""
    m = load_model(str(write(tmp_path / "ct", deepseek_v4_flash_ct())))
    assert m.coverage.status == "complete" and m.coverage.error is None, m.coverage.error
    fp8 = ("fp8_block", "fp8", 128)
    # wq_a and wkv are stored as one tensor, attn.fused_wqa_wkv, which group_0's regex names
    for role in ("wq_a", "wkv", "wq_b", "wo_a", "wo_b"):
        assert {fmt(r) for r in rows(m, role)} == {fp8}, role
    # routed experts: per-expert gate_proj/up_proj/down_proj under ffn (the tables say w1/w3/w2)
    assert {fmt(r) for r in rows(m, "experts")} == {("nvfp4", "nvfp4", 16)}
    assert {fmt(r) for r in rows(m, "shared_experts.gate_up_proj")} == {("nvfp4", "nvfp4", 16)}
    assert {fmt(r)[0] for r in rows(m, "gate")} == {"bf16"}
    assert rows(m, "lm_head")[0].quant_note == "ignore: head"
    names = m.checkpoint_names
    assert names.spelling("layers.7.ffn.experts.0.w1") == "layers.7.ffn.experts.0.gate_proj"
    assert names.spelling("layers.7.ffn.shared_experts.w2") == "layers.7.ffn.shared_experts.down_proj"
    assert "layers.7.attn.fused_wqa_wkv" in names.aliases("layers.7.attn.wq_a")


def test_tiny_safetensors_index_with_original_names_maps_to_derived_modules(tmp_path):
    folder = write(tmp_path / "m", deepseek_v4_flash_ct(), model__safetensors__index__json=deepseek_v4_flash_index())
    m = load_model(str(folder))
    names = m.checkpoint_names
    by_name = {r.name: r for r in m.layers}
    # every checkpoint module of the index stands for a derived module (or part, or expert)
    module, part, expert = names.owner("layers.5.ffn.experts.17.up_proj")
    assert (module.name, part, expert) == ("layers.5.ffn.experts", "layers.5.ffn.experts.0.w3", 17)
    module, part, expert = names.owner("layers.5.attn.fused_wqa_wkv")
    assert (module.name, expert) == ("layers.5.attn.wq_a", None)          # the fused tensor holds wq_a (and wkv)
    assert names.owner("layers.5.ffn.shared_experts.down_proj")[0].name == "layers.5.ffn.shared_experts.w2"
    assert names.owner("layers.1.ffn.gate") is None                       # hash-routed layer: no router GEMM
    module, part, expert, suffix = names.owner_of_tensor("layers.5.ffn.experts.17.up_proj.weight_packed")
    assert (module.name, part, expert, suffix) == ("layers.5.ffn.experts", "layers.5.ffn.experts.0.w3", 17,
                                                   "weight_packed")
    weight_map = deepseek_v4_flash_index()["weight_map"]
    assert [t for t in weight_map if names.owner_of_tensor(t) is None] == []     # every tensor has its module
    assert by_name["layers.5.ffn.experts"].layer.weight_format == "nvfp4"
    assert any("every derived part is in the checkpoint" in n for n in m.notes)
    # the index, not the lists, decides the spelling when both are present
    unquantized = deepseek_v4_flash_ct()
    del unquantized["quantization_config"]
    bare = load_model(str(write(tmp_path / "bare", unquantized,
                                model__safetensors__index__json=deepseek_v4_flash_index())))
    assert bare.checkpoint_names.spelling("layers.2.ffn.experts.0.w2") == "layers.2.ffn.experts.0.down_proj"


def test_index_tensors_whose_names_no_table_knows_are_reported(tmp_path):
    index = {"weight_map": {"embed.weight": "a.safetensors", "decoder.blk.0.moe.fc1.weight": "a.safetensors"}}
    m = load_model(str(write(tmp_path / "m", config("deepseek-v4-flash"), model__safetensors__index__json=index)))
    note = next(n for n in m.notes if "not in model.safetensors.index.json" in n)
    assert "no checkpoint name the name tables know stands for them" in note


# ---------------------------------------------------------------- MiniMax-M3 (ModelOpt, multimodal)
def test_minimax_m3_modelopt_per_expert_entries(tmp_path):
    folder = write(tmp_path / "m", config("minimax-m3-nvfp4"), hf_quant_config__json=minimax_m3_quantization())
    m = load_model(str(folder))
    assert (m.model_type, m.dialect) == ("minimax_m3", "modelopt")
    assert m.coverage.status == "complete", m.coverage.error
    mx = ("mxfp8", "mxfp8", 32)
    # layers 0-2: dense MLP (mlp.*) and attention, all MXFP8 by their own entries
    assert [r.block for r in rows(m, "gate_up_proj")] == [0, 1, 2]
    assert {fmt(r) for r in rows(m, "gate_up_proj")} | {fmt(r) for r in rows(m, "down_proj")} == {mx}
    # q/k/v fused; the sparse layers 3-59 fuse index_q_proj/index_k_proj in too:
    # q 64x128 = 8192, k/v 4x128 = 512 each, index_q 4x128 = 512, index_k 128
    assert rows(m, "qkv_proj", 0)[0].layer.out_features == 8192 + 2 * 512 == 9216
    assert rows(m, "qkv_proj", 3)[0].layer.out_features == 9216 + 512 + 128 == 9856
    assert {fmt(r) for r in rows(m, "qkv_proj")} | {fmt(r) for r in rows(m, "o_proj")} == {mx}
    # layers 3-59: routed experts NVFP4 from 128 x 3 per-expert entries each, shared experts MXFP8
    experts = rows(m, "experts")
    assert [r.block for r in experts] == list(range(3, 60))
    assert {fmt(r) for r in experts} == {("nvfp4", "nvfp4", 16)}
    e = experts[0].layer
    assert (e.num_experts, e.top_k, e.hidden_size, e.intermediate_size, e.activation) == (128, 4, 6144, 3072,
                                                                                          "swigluoai")
    assert {fmt(r) for r in rows(m, "shared_experts.gate_up_proj")} == {mx}
    assert {fmt(r)[0] for r in rows(m, "gate")} == {"bf16"}       # and exclude_modules names each router
    assert fmt(rows(m, "lm_head")[0])[0] == "bf16"
    module = next(mod for mod in m.checkpoint_names.modules if mod.name == experts[0].name)
    assert m.checkpoint_names.experts_named(module) == tuple(range(128))      # every expert's entries checked


def test_mixed_formats_across_one_fused_moe_module_is_an_error_naming_both(tmp_path):
    quant = with_mixed_expert(minimax_m3_quantization(), 7, 17, "MXFP8")
    folder = write(tmp_path / "m", config("minimax-m3-nvfp4"), hf_quant_config__json=quant)
    with pytest.raises(InputError) as err:
        load_model(str(folder))
    text = str(err.value)
    assert "language_model.model.layers.7.block_sparse_moe.experts" in text
    assert "quantized_layers: language_model.model.layers.7.block_sparse_moe.experts.0.w1" in text
    assert "quantized_layers: language_model.model.layers.7.block_sparse_moe.experts.17.w1" in text
    done = explain("--model", str(folder))
    assert done.returncode == 1 and "Traceback" not in done.stderr and "experts 0 and 17" in done.stderr


# ---------------------------------------------------------------- Kimi-K3 style (SiTU, text_config)
def test_kimi_k3_situ_mxfp4_in_text_config():
    pytest.importorskip("transformers")
    m = load_model(str(FIXTURES / "kimi-k3"))
    assert m.derivation == "transformers meta-device model" and m.model_type == "kimi_linear"
    assert any("transformers has no activation 'situ'" in n and "built with 'silu' in its place" in n for n in m.notes)
    experts = rows(m, "experts")
    assert [r.block for r in experts] == list(range(1, 93))           # first_k_dense_replace 1
    e = experts[0].layer
    # routed experts at the latent width routed_expert_hidden_size (3584), moe_intermediate_size 3072
    assert (e.num_experts, e.top_k, e.hidden_size, e.intermediate_size) == (896, 16, 3584, 3072)
    assert (e.activation, e.activation_params) == ("situ", {"beta": 4.0, "linear_beta": 25.0})
    # the target names block_sparse_moe.experts.N.w1/w2/w3: the checkpoint's words for transformers' mlp.experts
    # compressed-tensors weight-only schemes declare 16-bit activations
    assert {fmt(r) for r in experts} == {("mxfp4", "bf16", 32)}
    assert {r.layer.weight_format for r in m.layers if r.role != "experts"} == {"bf16"}
    assert m.coverage.status == "complete", m.coverage.error


# ---------------------------------------------------------------- Gemma 4 (top_k_experts, ModelOpt globs)
def test_gemma4_26b_a4b_nvfp4():
    pytest.importorskip("transformers")
    m = load_model(str(FIXTURES / "gemma-4-26b-a4b-nvfp4"))
    experts = rows(m, "experts")
    assert len(experts) == 30
    e = experts[0].layer
    assert (e.num_experts, e.top_k, e.hidden_size, e.intermediate_size) == (128, 8, 2816, 704)  # top_k_experts 8
    assert {fmt(r) for r in experts} == {("nvfp4", "nvfp4", 16)}
    # ModelOpt wildcards: 'model.language_model.layers.N.mlp*' / 'self_attn*' / 'router*' keep the rest BF16
    assert {r.layer.weight_format for r in m.layers if r.role != "experts"} == {"bf16"}
    assert rows(m, "gate_up_proj", 4)[0].quant_note == "exclude_modules: model.language_model.layers.4.mlp*"
    assert m.coverage.status == "complete", m.coverage.error


# ---------------------------------------------------------------- Step-3.7-Flash (no causal-LM class)
def test_step37_flash_fp8_built_from_its_text_model():
    pytest.importorskip("transformers")
    m = load_model(str(FIXTURES / "step-3.7-flash-fp8"))
    assert any("no causal-LM class" in n and "lm_head (vocab_size x hidden_size) added" in n for n in m.notes)
    c = Counter(r.role for r in m.layers)
    assert c["experts"] == 45 - 3 and c["gate"] == 42                 # first_k_dense_replace 3
    e = rows(m, "experts")[0].layer
    assert (e.num_experts, e.top_k, e.hidden_size, e.intermediate_size) == (288, 8, 4096, 1280)
    block = ("fp8_block", "fp8", 128)
    assert {fmt(r) for r in m.layers if r.role not in ("gate", "embed_tokens", "lm_head")} == {block}
    assert {fmt(r)[0] for r in rows(m, "gate")} == {"bf16"}             # step3p7: router built unquantized
    head = rows(m, "lm_head")[0].layer
    assert (head.in_features, head.out_features, head.weight_format) == (4096, 128896, "bf16")


# ---------------------------------------------------------------- coverage: errors and bounded warnings
def test_config_group_matching_nothing_exits_1_unless_partial_coverage_is_accepted(tmp_path):
    cfg = deepseek_v4_flash_ct()
    cfg["quantization_config"]["config_groups"]["group_1"]["targets"] = [r"re:.*moe_block\.experts.*"]
    folder = write(tmp_path / "m", cfg)
    cov = load_model(str(folder)).coverage
    assert cov.status == "partial" and cov.error is not None
    assert "config group 'group_1' (nvfp4/nvfp4, targets re:.*moe_block\\.experts.*) quantizes no derived layer" in cov.error
    done = explain("--model", str(folder))
    assert done.returncode == 1, done.stdout[-2000:]
    assert "ERROR: " in done.stdout and "--accept-partial-coverage" in done.stdout
    assert "nearest derived names: layers." in done.stdout
    ok = explain("--model", str(folder), "--accept-partial-coverage")
    assert ok.returncode == 0 and "WARNING: partial quantization coverage" in ok.stdout
    assert load_model(str(folder), accept_partial=True).coverage.error is None


def test_twenty_thousand_unmatched_entries_warn_in_under_2kb(tmp_path):
    quant = minimax_m3_quantization()
    layers = quant["quantization"]["quantized_layers"]
    for i in range(20_000):
        layers[f"language_model.model.layers.{i % 60}.moe_block.expert_{i}.fc"] = {"quant_algo": "NVFP4"}
    folder = write(tmp_path / "m", config("minimax-m3-nvfp4"), hf_quant_config__json=quant)
    strict = load_model(str(folder)).coverage
    assert len(strict.unmatched) == 20_000 and strict.error is not None
    assert len(strict.error.encode()) < 2048 and "(and 19997 more)" in strict.error
    cov = load_model(str(folder), accept_partial=True).coverage
    [warning] = cov.warnings
    assert len(warning.encode()) < 2048, len(warning.encode())
    assert "20000 entries matched no derived module" in warning and "(and 19997 more)" in warning
    assert len(json.dumps(cov.to_dict()).encode()) < 8192            # json lists examples too, not every entry


# ---------------------------------------------------------------- spellings from the writers' code
def test_fp8_element_format_spellings(tmp_path):
    cfg = config("deepseek-v4-flash")
    cfg["quantization_config"]["fmt"] = "float8_e4m3fn"               # torch's dtype name
    assert rows(load_model(str(write(tmp_path / "a", cfg))), "wq_b")[0].layer.weight_format == "fp8_block"
    cfg["quantization_config"]["fmt"] = "float8_e5m2"
    with pytest.raises(InputError, match=r"quantization_config.fmt: unsupported FP8 element format 'float8_e5m2'"):
        load_model(str(write(tmp_path / "b", cfg)))


@pytest.mark.parametrize("algo, expected", [
    ("W4A16_NVFP4", ("nvfp4", None, 16)),                 # weight-only NVFP4 (ModelOpt 2026)
    ("w4a16_nvfp4", ("nvfp4", None, 16)),
    ("W4A8_NVFP4_FP8", ("nvfp4", "fp8", 16)),
    ("FP8_PB_WO", ("fp8_block", None, 128)),
    ("MXFP8", ("mxfp8", "mxfp8", 32)),
])
def test_modelopt_quant_algo_values(tmp_path, algo, expected):
    quant = json.loads((REPO / "examples" / "nvidia-minimax-m2.5-nvfp4" / "hf_quant_config.json").read_text())
    quant["quantization"]["quant_algo"] = algo
    del quant["quantization"]["group_size"]
    cfg = json.loads((REPO / "examples" / "nvidia-minimax-m2.5-nvfp4" / "config.json").read_text())
    cfg.pop("quantization_config", None)
    m = load_model(str(write(tmp_path / "m", cfg, hf_quant_config__json=quant)))
    assert {fmt(r) for r in rows(m, "experts")} == {expected}


def test_modelopt_quant_algo_without_a_kernel_format_says_so(tmp_path):
    quant = json.loads((REPO / "examples" / "nvidia-minimax-m2.5-nvfp4" / "hf_quant_config.json").read_text())
    quant["quantization"]["quant_algo"] = "NVFP4_AWQ"
    cfg = json.loads((REPO / "examples" / "nvidia-minimax-m2.5-nvfp4" / "config.json").read_text())
    cfg.pop("quantization_config", None)
    with pytest.raises(InputError, match="NVFP4_AWQ.*AWQ pre-quant scales"):
        load_model(str(write(tmp_path / "m", cfg, hf_quant_config__json=quant)))


def test_backbone_prefix_in_exclude_modules(tmp_path):
    """A checkpoint whose decoder lives under `backbone.`: its excludes still reach the derived model.* layers."""
    quant = json.loads((REPO / "examples" / "nvidia-minimax-m2.5-nvfp4" / "hf_quant_config.json").read_text())
    q = quant["quantization"]
    q["exclude_modules"] = [e.replace("model.layers.", "backbone.layers.") for e in q["exclude_modules"]]
    cfg = json.loads((REPO / "examples" / "nvidia-minimax-m2.5-nvfp4" / "config.json").read_text())
    cfg.pop("quantization_config", None)
    m = load_model(str(write(tmp_path / "m", cfg, hf_quant_config__json=quant)))
    assert m.coverage.status == "complete", m.coverage.error
    assert {r.layer.weight_format for r in m.layers if r.quantized} == {"nvfp4"}
    assert {r.role for r in m.layers if r.quantized} == {"experts"}
    assert rows(m, "qkv_proj", 0)[0].quant_note == "exclude_modules: backbone.layers.0.self_attn*"


# ---------------------------------------------------------------- each library's own matching rule
_SEG = st.sampled_from(["model", "layers", "0", "1", "mlp", "experts", "gate", "gate_proj", "self_attn", "q_proj"])
_NAMES = st.lists(_SEG, min_size=1, max_size=5).map(".".join)


@settings(max_examples=300, deadline=None)
@given(_NAMES, _NAMES, st.sampled_from(["", "re:", "re:.*", "re:.*\\."]))
def test_compressed_tensors_rule_matches_compressed_tensors(name, target, prefix):
    """compressed-tensors' own match_name (the installed library) is the reference."""
    from compressed_tensors.utils.match import match_name
    entry = prefix + (re.escape(target) if prefix else target)
    ours = NameMatcher([entry], rule="compressed-tensors").match(name) is not None
    assert ours == match_name(name, entry)


def test_plain_compressed_tensors_ignore_entries_do_not_reach_children(tmp_path):
    """compressed-tensors matches a plain ignore entry against the exact module name: ignoring a container
    (self_attn) leaves its Linear children quantized."""
    cfg = deepseek_v4_flash_ct()
    cfg["quantization_config"]["config_groups"]["group_0"]["targets"] = ["Linear"]
    cfg["quantization_config"]["ignore"] = ["head", "layers.0.attn", "layers.1.attn.wq_b"]
    m = load_model(str(write(tmp_path / "m", cfg)))
    assert fmt(rows(m, "wq_b", 0)[0])[0] == "fp8_block"               # 'layers.0.attn' names no Linear
    assert rows(m, "wq_b", 1)[0].quant_note == "ignore: layers.1.attn.wq_b"


@settings(max_examples=200, deadline=None)
@given(_NAMES, st.lists(st.sampled_from(["model", "layers", "*", "?", "0", "mlp", "gate*", "experts"]),
                        min_size=1, max_size=5).map(".".join))
def test_modelopt_rule_is_fnmatch_of_the_whole_name(name, pattern):
    """vLLM reads ModelOpt exclude_modules with fnmatch(prefix, pattern): the stdlib is the reference."""
    ours = NameMatcher([pattern], rule="modelopt").match(name) is not None
    assert ours == fnmatch.fnmatchcase(name, pattern)


# ---------------------------------------------------------------- router gates
def _qwen3_moe(**extra):
    return {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64,
            "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2,
            "vocab_size": 128, **extra}


def _ct_int4(ignore):
    return {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ignore,
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                "num_bits": 4, "type": "int", "strategy": "group", "group_size": 32, "symmetric": True}}}}


def test_qwen3_moe_router_follows_targets_and_ignore(tmp_path):
    """vLLM 0.32 builds Qwen3-MoE's GateLinear with the quant config: targets 'Linear' and no ignore -> quantized."""
    m = load_model(str(write(tmp_path / "a", _qwen3_moe(quantization_config=_ct_int4(["lm_head"])))))
    # compressed-tensors weight-only schemes declare 16-bit activations
    assert {fmt(r) for r in rows(m, "gate")} == {("int4", "bf16", 32)}
    m = load_model(str(write(tmp_path / "b", _qwen3_moe(quantization_config=_ct_int4(["lm_head", "re:.*mlp.gate$"])))))
    assert {fmt(r)[0] for r in rows(m, "gate")} == {"bf16"}
    assert rows(m, "gate")[0].quant_note == "ignore: re:.*mlp.gate$"


def test_other_routers_stay_unquantized(tmp_path):
    cfg = deepseek_v4_flash_ct()
    cfg["quantization_config"]["config_groups"]["group_0"]["targets"] = ["Linear"]
    m = load_model(str(write(tmp_path / "m", cfg)))
    assert {fmt(r)[0] for r in rows(m, "gate")} == {"bf16"}
    assert "without a quantization method" in rows(m, "gate")[0].quant_note


def test_checkpoint_names_is_torch_free_and_documented():
    import oracle.models.checkpoint_names as cn
    assert "names.aliases(part)" in cn.__doc__ and "names.owner(name)" in cn.__doc__
    out = subprocess.run([sys.executable, "-c", "import sys, oracle.models.checkpoint_names; "
                          "print('torch' in sys.modules, 'transformers' in sys.modules)"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr



def test_docs_list_the_aliases_per_architecture():
    from oracle.models.build import shipped_architectures
    from oracle.models.checkpoint_names import render_markdown
    text = (REPO / "docs" / "models.md").read_text(encoding="utf-8")
    begin, end = "<!-- aliases:begin -->\n", "\n<!-- aliases:end -->"
    current = text.split(begin, 1)[1].split(end, 1)[0]
    assert current == render_markdown(shipped_architectures()), (
        "regenerate docs/models.md's table: see oracle.models.build.shipped_architectures")


def test_router_stored_unquantized_in_the_index_is_served_as_stored(tmp_path):
    """The vLLM 0.32 mismatch: a Linear target without a gate ignore, while the checkpoint's index has the
    router's plain weight only (no scale or packed tensors): the checkpoint's tensors decide."""
    weights = {"model.embed_tokens.weight": "a.safetensors", "lm_head.weight": "a.safetensors"}
    for i in range(2):
        p = f"model.layers.{i}"
        weights[f"{p}.mlp.gate.weight"] = "a.safetensors"
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            weights[f"{p}.self_attn.{proj}.weight_packed"] = "a.safetensors"
            weights[f"{p}.self_attn.{proj}.weight_scale"] = "a.safetensors"
        for e in range(8):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                weights[f"{p}.mlp.experts.{e}.{proj}.weight_packed"] = "a.safetensors"
                weights[f"{p}.mlp.experts.{e}.{proj}.weight_scale"] = "a.safetensors"
    folder = write(tmp_path / "m", _qwen3_moe(quantization_config=_ct_int4(["lm_head"])),
                   model__safetensors__index__json={"weight_map": weights})
    m = load_model(str(folder))
    gate = rows(m, "gate", 0)[0]
    assert gate.layer.weight_format == "bf16"
    assert "stores model.layers.0.mlp.gate without quantization tensors although group_0 target Linear" in gate.quant_note
    # compressed-tensors weight-only schemes declare 16-bit activations
    assert {fmt(r) for r in rows(m, "experts")} == {("int4", "bf16", 32)}
