"""oracle.hf.decode: greedy decoding over a static cache equals transformers' own dynamic-cache generate.

Reference: `model.generate` (transformers' DynamicCache, its own masks and sliding windows) on the
same oracle-loaded model; the Decoder's static full-length cache and explicit positions must give
the same greedy tokens, for a model with sliding-window layers too (gpt-oss, window 8 < prompt),
at batch 1 and batch 2. Graph mode is refused without CUDA with a clear error.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import tf_checkpoints as tf  # noqa: E402

import oracle.hf  # noqa: E402
from oracle.errors import InputError  # noqa: E402
from oracle.hf.decode import Decoder  # noqa: E402

PROMPTS = [[1, 5, 9, 33, 100, 7, 2, 64, 17, 3, 99, 200], [4, 8, 15, 16, 23, 42, 7, 7, 9, 250, 1, 2]]


@pytest.fixture(scope="module", params=["fp8-qwen3-moe", "mxfp4-gpt-oss"])
def model(request, tmp_path_factory):
    write = tf.write_fp8_moe if request.param.startswith("fp8") else tf.write_gpt_oss
    return oracle.hf.load_quantized(write(tmp_path_factory.mktemp(request.param)), device="cpu")


@pytest.mark.parametrize("batch", [1, 2])
def test_static_cache_decode_equals_dynamic_cache_generate(model, batch):
    ids = torch.tensor(PROMPTS[:batch])
    want = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False,
                          min_new_tokens=12, pad_token_id=0)[:, ids.shape[1]:]
    dec = Decoder(model, batch=batch, max_len=32, mode="eager")
    got = dec.generate(ids, 12)
    assert torch.equal(got, want)
    again = dec.generate(ids, 12)                  # the cache is reset in place: a second run is the same
    assert torch.equal(again, want)


def test_step_logits_follow_the_full_forward(model):
    """After the prefill, each step's token is the argmax of a full forward over the sequence so far."""
    ids = torch.tensor(PROMPTS[:1])
    dec = Decoder(model, batch=1, max_len=24, mode="eager")
    toks = dec.generate(ids, 6)
    seq = torch.cat([ids, toks], 1)
    with torch.no_grad():
        full = model(seq).logits
    assert torch.equal(full[0, ids.shape[1] - 1:-1].argmax(-1), toks[0])


def test_bad_requests_are_input_errors(model):
    with pytest.raises(InputError, match="CUDA graphs need a CUDA device"):
        Decoder(model, batch=1, max_len=16, mode="graphs")
    with pytest.raises(InputError, match="expected one of eager, graphs"):
        Decoder(model, batch=1, max_len=16, mode="fast")
    dec = Decoder(model, batch=1, max_len=8, mode="eager")
    with pytest.raises(InputError, match="leaves no room"):
        dec.prefill(torch.ones(1, 8, dtype=torch.long))
    with pytest.raises(InputError, match=r"shape \[1, P\]"):
        dec.prefill(torch.ones(2, 3, dtype=torch.long))


def test_repeated_timed_blocks_decode_the_same_tokens(model):
    """measure(repeats=3) times three blocks, each after its own prefill of the same decoder: every
    block decodes the same greedy tokens as a plain generate, and the figure is the median block's."""
    from oracle.hf.decode import measure

    ids = torch.tensor(PROMPTS[:1])
    want = Decoder(model, batch=1, max_len=32, mode="eager").generate(ids, 7)
    m = measure(model, ids, steps=6, mode="eager", warmup=4, repeats=3)
    assert len(m.block_ms) == 3 and all(v > 0 for v in m.block_ms)
    assert m.ms_step == pytest.approx(sorted(m.block_ms)[1])
    assert torch.equal(m.tokens, want)
