"""Tiny checkpoints of many architectures, written by transformers' and compressed-tensors' own code
(a test helper, not a test).

For each architecture a random tiny model is built from a transformers config and saved with
transformers' own `save_pretrained`, so the tensor names are the ones real checkpoints of that
architecture carry (transformers 5 converts its fused modules back on save: Mixtral's
`block_sparse_moe.experts.<e>.w1`, per-expert `mlp.experts.<e>.gate_proj`, DeepSeek's
`mlp.gate.e_score_correction_bias`, Phi-3's fused `qkv_proj`). Every 2-D `<module>.weight` of
that state dict becomes an `nn.Linear` at the same name; compressed-tensors applies a preset
scheme to those modules (`apply_quantization_config`), scales come from min/max observations
(tests/ct_checkpoints.py's calibration, the observer's job), and `ModelCompressor` compresses
them. The reference of each quantized module is the same library's `decompress_module` of the
saved tensors, and, for schemes that quantize activations, the library's own quantized forward.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

_COMMON = dict(vocab_size=256, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               head_dim=64, max_position_embeddings=256, tie_word_embeddings=False)
_MOE = dict(num_experts_per_tok=2)
#: model_type -> the tiny config's own keys (layer 0 / 1 cover both layer kinds where an architecture has two)
ARCHITECTURES: dict[str, dict] = {
    "llama": dict(intermediate_size=256),
    "mistral": dict(intermediate_size=256),
    "gemma3_text": dict(intermediate_size=256, sliding_window=8, layer_types=["sliding_attention", "full_attention"]),
    "phi3": dict(intermediate_size=256, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "mixtral": dict(intermediate_size=128, num_local_experts=4, **_MOE),
    "olmoe": dict(intermediate_size=128, num_attention_heads=2, num_experts=4, **_MOE),
    "qwen2_moe": dict(intermediate_size=256, moe_intermediate_size=128, shared_expert_intermediate_size=128,
                      num_experts=4, **_MOE),
    "qwen3_next": dict(intermediate_size=256, moe_intermediate_size=128, shared_expert_intermediate_size=128,
                       num_experts=4, full_attention_interval=2, linear_num_key_heads=2, linear_num_value_heads=4,
                       linear_key_head_dim=64, linear_value_head_dim=64, **_MOE),
    "deepseek_v3": dict(intermediate_size=256, moe_intermediate_size=128, n_routed_experts=4, n_shared_experts=1,
                        first_k_dense_replace=1, num_key_value_heads=4, head_dim=32, kv_lora_rank=128, q_lora_rank=128, qk_nope_head_dim=32,
                        qk_rope_head_dim=32, v_head_dim=32, n_group=1, topk_group=1, **_MOE),
    "glm4_moe": dict(intermediate_size=256, moe_intermediate_size=128, n_routed_experts=4, n_shared_experts=1,
                     first_k_dense_replace=1, n_group=1, topk_group=1, **_MOE),
    "gpt_oss": dict(intermediate_size=128, num_local_experts=4, sliding_window=8,
                    layer_types=["sliding_attention", "full_attention"], **_MOE),
}
#: what real llm-compressor recipes leave in BF16: the head, routers and shared-expert gates
IGNORE = ["lm_head", "re:.*mlp\\.gate$", "re:.*block_sparse_moe\\.gate$", "re:.*mlp\\.router$",
          "re:.*shared_expert_gate$"]


def tiny_model(arch: str, seed: int = 0):
    """A random tiny BF16 transformers model of `arch`, weights widened so logits differ between tokens."""
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.for_model(arch, **{**_COMMON, **ARCHITECTURES[arch]})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.08)
            elif name.endswith("bias"):
                p.normal_(0, 0.05)
    return model.eval()


def save_plain(directory: Path, arch: str, seed: int = 0) -> Path:
    """The BF16 checkpoint of the tiny model, as transformers saves it (the architecture's own names)."""
    tiny_model(arch, seed).save_pretrained(directory)
    return directory


def linear_tree(state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """An nn.Linear at every checkpoint name `<m>.weight` with two dimensions (embeddings excepted)."""
    from ct_checkpoints import put
    tree = torch.nn.Module()
    for name, w in state.items():
        module = name[: -len(".weight")]
        if not name.endswith(".weight") or w.dim() != 2 or module.endswith(("embed_tokens", "embed")):
            continue
        lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=f"{module}.bias" in state, dtype=w.dtype)
        lin.weight.data = w.clone()
        if lin.bias is not None:
            lin.bias.data = state[f"{module}.bias"].clone()
        put(tree, module, lin)
    return tree


def _fusion_key(name: str) -> str:
    parent, _, leaf = name.rpartition(".")
    fused = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gate_up", "up_proj": "gate_up",
             "w1": "gate_up", "w3": "gate_up"}
    return f"{parent}.{fused.get(leaf, leaf)}"


def write(directory: Path, arch: str, scheme: str, seed: int = 0) -> Path:
    """A compressed-tensors checkpoint of tiny `arch` with preset `scheme`; returns its directory."""
    plain = save_plain(directory.with_name(directory.name + "-bf16"), arch, seed)
    quantize_dir(plain, directory, scheme)
    shutil.rmtree(plain)
    return directory


def quantize_dir(plain: Path, directory: Path, scheme: str) -> Path:
    """compressed-tensors' `scheme` applied to every Linear-shaped tensor of the BF16 checkpoint `plain`."""
    import ct_checkpoints as ct
    from safetensors.torch import load_file, save_file

    state = {}
    for f in sorted(plain.glob("*.safetensors")):
        state.update(load_file(str(f)))
    tree = linear_tree(state)
    compressor = ct.calibrate(tree, scheme, IGNORE, fusion_key=_fusion_key)
    out = {k: v for k, v in state.items() if k.rsplit(".", 1)[0] not in _modules(tree)}
    out.update(tree.state_dict())
    directory.mkdir(parents=True, exist_ok=True)
    for f in plain.iterdir():
        if f.suffix == ".json" and f.name != "model.safetensors.index.json":
            shutil.copy(f, directory / f.name)
    save_file({k: v.contiguous() for k, v in out.items()}, str(directory / "model.safetensors"),
              metadata={"format": "pt"})
    compressor.update_config(str(directory))
    return directory


def _modules(tree: torch.nn.Module) -> set[str]:
    return {n for n, m in tree.named_modules() if isinstance(m, torch.nn.Linear)}


def reference_tree(directory: Path, *, activations: bool) -> torch.nn.Module:
    """compressed-tensors' decompression of every quantized module (names as in the checkpoint); with
    `activations`, the library's quantized forward wrappers stay on, quantizing the inputs as declared."""
    import ct_checkpoints as ct
    from compressed_tensors.quantization import QuantizationConfig, QuantizationStatus
    from safetensors.torch import load_file

    qc = QuantizationConfig.model_validate(json.loads((directory / "config.json").read_text())["quantization_config"])
    qc.quantization_status = QuantizationStatus.COMPRESSED
    state = load_file(str(directory / "model.safetensors"))
    shells: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        module, _, leaf = name.rpartition(".")
        if leaf == "weight_shape":
            n, k = (int(v) for v in t.tolist())
        elif leaf == "weight_packed" and f"{module}.weight_shape" not in state:
            n, k = t.shape[0], t.shape[1] * (8 // t.element_size() // 4 * 4 if t.dtype == torch.int32 else 2)
        elif leaf == "weight" and t.dim() == 2:
            n, k = t.shape
        else:
            continue
        shells[f"{module}.weight"] = torch.zeros(n, k, dtype=torch.bfloat16)
    tree = linear_tree(shells | {k: v for k, v in state.items() if k.endswith(".bias")})
    mods = _modules(tree)
    ct.decompress_into(tree, qc, {k: v for k, v in state.items() if k.rpartition(".")[0] in mods}, activations)
    return tree.to(torch.bfloat16)


# ---------------------------------------------------------------- transformers fine-grained FP8
def write_fp8(directory: Path, arch: str, block: list[int] | None, seed: int = 0) -> Path:
    """transformers' own FP8 quantizer (`FineGrainedFP8Config`) applied while loading the tiny BF16
    checkpoint, then its `save_pretrained`: the names, scale shapes ([1, 1] per tensor) and fused
    expert scales its writer emits. Its environment check (a GPU, for FP8 matmuls) is skipped: the
    quantization itself runs on CPU."""
    from transformers import AutoModelForCausalLM, FineGrainedFP8Config
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer

    plain = save_plain(directory.with_name(directory.name + "-bf16"), arch, seed)
    check = FineGrainedFP8HfQuantizer.validate_environment
    FineGrainedFP8HfQuantizer.validate_environment = lambda self, *a, **k: None
    try:
        model = AutoModelForCausalLM.from_pretrained(plain, quantization_config=FineGrainedFP8Config(
            weight_block_size=block, modules_to_not_convert=["lm_head", "mlp.gate", "block_sparse_moe.gate",
                                                             "mlp.router", "shared_expert_gate"]))
    finally:
        FineGrainedFP8HfQuantizer.validate_environment = check
    model.save_pretrained(directory)
    shutil.rmtree(plain)
    return directory


def fp8_reference(directory: Path):
    """transformers' own loading of the FP8 checkpoint on CPU: it dequantizes every FP8 weight to BF16
    (`_dequantize_fp8_weight`) and converts the names as it does for every checkpoint."""
    import logging

    from transformers import AutoModelForCausalLM
    logging.getLogger("transformers").setLevel(logging.ERROR)
    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16).eval()
