"""bench/ct_w4a16.py writes checkpoints without compressed-tensors (for the GPU device, which has none):
its W4A16 files must be what compressed-tensors itself reads. Checked with the library's own
decompression (tests/checkpoint_matrix.reference_tree) against an independent reading of the words,
and loaded by oracle.hf on a CPU."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("compressed_tensors")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import ct_w4a16  # noqa: E402

import checkpoint_matrix as cm  # noqa: E402  (tests/ is on the path under pytest)
import oracle.hf  # noqa: E402


def _config():
    from transformers import Qwen2Config
    return Qwen2Config(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                       tie_word_embeddings=True)


def test_random_w4a16_is_what_compressed_tensors_decompresses(tmp_path):
    quant = ct_w4a16.write_random_w4a16(tmp_path / "w4a16", _config())
    ref = cm.reference_tree(quant, activations=False)
    from safetensors.torch import load_file
    state = load_file(str(quant / "model.safetensors"))
    name = "model.layers.1.mlp.down_proj"
    words, scale = state[f"{name}.weight_packed"], state[f"{name}.weight_scale"]
    assert words.dtype == torch.int32 and list(state[f"{name}.weight_shape"]) == [256, 512]
    codes = torch.stack([(words >> (4 * i)) & 0xF for i in range(8)], dim=-1).flatten(-2) - 8   # low nibble first
    mine = (codes.float() * scale.float().repeat_interleave(128, dim=1)).to(torch.bfloat16)
    assert torch.equal(ref.get_submodule(name).weight, mine)
    model = oracle.hf.load_quantized(quant, device="cpu")
    assert model.oracle.kernels
    for row_name, kernel in model.oracle.kernels.items():
        want = torch.cat([ref.get_submodule(p).weight.float() for p in
                          next(r for r in model.oracle.report.model.layers if r.name == row_name).parts])
        assert torch.equal(kernel.weight.float(), want), row_name
    with torch.no_grad():
        assert torch.isfinite(model(torch.tensor([[1, 2, 3]])).logits).all()


def test_random_bf16_loads_in_transformers(tmp_path):
    from transformers import AutoModelForCausalLM
    plain = ct_w4a16.write_random_bf16(tmp_path / "bf16", _config())
    model = AutoModelForCausalLM.from_pretrained(plain, dtype=torch.bfloat16)
    assert float(model.model.layers[0].mlp.down_proj.weight.float().std()) == pytest.approx(0.02, rel=0.1)
