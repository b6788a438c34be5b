"""The lean load, pinned: what a CPU load keeps is the checkpoint's bytes, not a BF16 copy, and no
shard stays memory-mapped (a map held for the whole load keeps every touched page resident).
Load time and peak RSS of a 0.5B model are bench/bench_hf_load.py's (bench/results/hf_load.md)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import ct_w4a16  # noqa: E402

import oracle.hf  # noqa: E402
from oracle.checkpoints import TensorSource  # noqa: E402


def _checkpoint(tmp_path):
    from transformers import Qwen2Config
    cfg = Qwen2Config(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=True)
    return ct_w4a16.write_random_w4a16(tmp_path / "w4a16", cfg)


def _tensor_bytes(obj) -> dict[int, int]:
    """Storage pointer -> bytes of every tensor an object holds directly (kernels keep a few attributes)."""
    found = {}
    for value in vars(obj).values():
        if isinstance(value, torch.Tensor):
            found[value.untyped_storage().data_ptr()] = value.untyped_storage().nbytes()
    return found


def test_cpu_load_keeps_the_quantized_bytes(tmp_path):
    model = oracle.hf.load_quantized(_checkpoint(tmp_path), device="cpu")
    weights, held = 0, {}
    for name, kernel in model.oracle.kernels.items():
        assert kernel.spec.name == "torch.linear.int4_cpu", name
        weights += kernel.n * kernel.k
        held.update(_tensor_bytes(kernel))
    # 4 bits a weight, plus a BF16 (scale, zero) pair per group of 128: 0.5 + 4/128 bytes a weight
    assert sum(held.values()) <= weights * (0.5 + 4 / 128) * 1.01
    assert not [n for n, p in model.named_parameters() if n.endswith(("q_proj.weight", "down_proj.weight"))]


def test_shards_are_read_without_a_lasting_memory_map(tmp_path):
    if not Path("/proc/self/maps").is_file():
        pytest.skip("needs Linux's /proc/self/maps")
    path = _checkpoint(tmp_path)
    src = TensorSource.from_dir(path)
    t = src.get("model.layers.0.mlp.down_proj.weight_packed")
    assert t.dtype == torch.int32 and list(t.shape) == [256, 64]
    shard = str(path / "model.safetensors")
    assert shard not in Path("/proc/self/maps").read_text()
    src.close()
