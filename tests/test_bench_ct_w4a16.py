"""bench/ct_w4a16.py writes checkpoints without compressed-tensors (for the GPU device, which has none):
its W4A16, W8A16, W8A8 and FP8_DYNAMIC files must be what compressed-tensors itself reads. Checked
with the library's own decompression (tests/checkpoint_matrix.reference_tree) against an independent
reading of the stored codes, and loaded by oracle.hf on a CPU (every kernel's weight equal to the
library's decompression, a finite forward)."""
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


def _independent_reading(scheme, state, name):
    """The weight the stored codes stand for, read without the library (its documented layout)."""
    scale = state[f"{name}.weight_scale"].float()
    if scheme in ("W4A16", "W8A16"):
        bits = 4 if scheme == "W4A16" else 8
        words = state[f"{name}.weight_packed"]
        assert words.dtype == torch.int32 and list(state[f"{name}.weight_shape"]) == [256, 512]
        mask, offset = (1 << bits) - 1, 1 << (bits - 1)
        codes = torch.stack([(words >> (bits * i)) & mask for i in range(32 // bits)], -1).flatten(-2) - offset
        return (codes.float() * scale.repeat_interleave(128, dim=1)).to(torch.bfloat16)     # low bits first
    w = state[f"{name}.weight"]
    assert w.dtype == (torch.int8 if scheme == "W8A8" else torch.float8_e4m3fn) and list(scale.shape) == [256, 1]
    return (w.float() * scale).to(torch.bfloat16)


@pytest.mark.parametrize("scheme", list(ct_w4a16.SCHEMES))
def test_random_checkpoint_is_what_compressed_tensors_decompresses(tmp_path, scheme):
    quant = ct_w4a16.write_random(tmp_path / scheme, _config(), scheme)
    ref = cm.reference_tree(quant, activations=False)
    from safetensors.torch import load_file
    state = load_file(str(quant / "model.safetensors"))
    name = "model.layers.1.mlp.down_proj"
    assert torch.equal(ref.get_submodule(name).weight, _independent_reading(scheme, state, name))
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
