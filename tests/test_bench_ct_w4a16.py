"""bench/ct_w4a16.py writes checkpoints without compressed-tensors (for the GPU device, which has none):
its W4A16 files must be what compressed-tensors itself reads. Checked with the library's own
decompression (tests/checkpoint_matrix.reference_tree), and loaded by oracle.hf on a CPU."""
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


def _tiny(tmp_path):
    from transformers import Qwen2Config
    cfg = Qwen2Config(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=True)
    plain = ct_w4a16.write_random_bf16(tmp_path / "bf16", cfg, std=0.05)
    return plain, ct_w4a16.quantize_dir(plain, tmp_path / "w4a16")


def test_pack_order_is_low_nibble_first():
    codes = torch.arange(16).reshape(2, 8)
    words = ct_w4a16.pack_int4(codes)
    assert words.tolist() == [[0x76543210], [int.from_bytes(bytes([0x98, 0xBA, 0xDC, 0xFE]), "little") - 2 ** 32]]


def test_written_w4a16_is_what_compressed_tensors_decompresses(tmp_path):
    plain, quant = _tiny(tmp_path)
    ref = cm.reference_tree(quant, activations=False)
    from safetensors.torch import load_file
    state, original = load_file(str(quant / "model.safetensors")), load_file(str(plain / "model.safetensors"))
    name = "model.layers.1.mlp.down_proj"
    packed, scale = state[f"{name}.weight_packed"], state[f"{name}.weight_scale"]
    codes = torch.stack([(packed >> (4 * i)) & 0xF for i in range(8)], dim=-1).flatten(-2) - 8
    mine = (codes.float() * scale.float().repeat_interleave(128, dim=1)).to(torch.bfloat16)
    assert torch.equal(ref.get_submodule(name).weight, mine)
    w = original[f"{name}.weight"].float()            # a 4-bit quantization of the original: error ~ step / 2
    assert float((mine.float() - w).norm() / w.norm()) < 0.15
    model = oracle.hf.load_quantized(quant, device="cpu")
    for row_name, kernel in model.oracle.kernels.items():
        if row_name.endswith("mlp.down_proj"):
            assert torch.equal(kernel.weight.float(), ref.get_submodule(row_name).weight.float()), row_name
    with torch.no_grad():
        assert torch.isfinite(model(torch.tensor([[1, 2, 3]])).logits).all()
