"""Tiny random models for the decode tests (a helper, not a test): bench/synthetic.py's builders,
for the shipped tiny Qwen3-MoE FP8 and gpt-oss MXFP4 kinds and a DeepSeek-V3 (MLA + MoE, dense
first layers, shared experts) cut from examples/deepseek-r1/config.json to test size."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import synthetic  # noqa: E402

DEEPSEEK_TINY = dict(hidden_size=256, intermediate_size=512, moe_intermediate_size=128, n_routed_experts=8,
                     n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1, num_attention_heads=4,
                     num_key_value_heads=4, q_lora_rank=128, kv_lora_rank=128, qk_rope_head_dim=64,
                     qk_nope_head_dim=64, v_head_dim=128, vocab_size=512, num_hidden_layers=3,
                     first_k_dense_replace=1)
KINDS = ("qwen3-moe-fp8", "gpt-oss-mxfp4", "deepseek-fp8")


def build(kind: str, tmp: Path, device: str = "cpu", engine: str = "oracle", config=None, layers: int | None = None):
    """The oracle.hf (or, engine="bf16", plain transformers) model of one tiny kind."""
    config_file = None
    if kind == "deepseek-fp8":
        data = {**json.loads((ROOT / "examples/deepseek-r1/config.json").read_text()), **DEEPSEEK_TINY}
        config_file = tmp / "deepseek-tiny.json"
        config_file.write_text(json.dumps(data))
        kind = "qwen3-moe-fp8"        # the transformers fine-grained FP8 layout
    if engine == "bf16":
        return synthetic.bf16_model(str(config_file) if config_file else None, kind, layers, device)
    return synthetic.oracle_model(str(config_file) if config_file else None, kind, layers, device, config=config)


def compiled_step_errors(model, ids, steps: int = 7):
    """Relative logits error of inductor-compiled decode steps against eager ones, fed the same tokens
    (batch row 0); on CUDA the compiled steps replay a CUDA graph. Also returns the compiled mode that ran."""
    import torch

    from oracle.hf.compiled import compile_layers
    from oracle.hf.decode import Decoder

    eager = Decoder(model, ids.shape[0], 32, "eager")
    tokens = eager.generate(ids, steps + 1)
    torch._dynamo.reset()
    compile_layers(model, backend="inductor")
    compiled = Decoder(model, ids.shape[0], 32, "compiled")
    for dec in (eager, compiled):
        dec.prefill(ids)
    errs = []
    for i in range(steps):
        logits = []
        for dec in (eager, compiled):
            dec.token.copy_(tokens[:, i:i + 1])
            dec.step()
            logits.append(dec.step_logits[0].float().clone())
        errs.append(float((logits[1] - logits[0]).norm() / logits[0].norm()))
    return torch.tensor(errs), compiled.mode
