"""Static-cache decoding of the synthetic models the benchmark builds (bench/synthetic.py), on the CPU.

Reference: transformers on the same model: its dynamic-cache `generate` for the BF16 DeepSeek-V3
(MLA attention whose key and value head sizes differ, dense first layers, shared experts): same
greedy tokens. With FP8 kernels the tokens of a random model are not a stable reference: the
static cache's attention (masked, over the whole cache) sums in another order than a forward over
the exact sequence (0.5% relative logits difference in BF16, measured), and rounding activations
to E4M3 (steps of 6%) plus router near-ties turn that into a few percent; so the FP8 model's step
logits are compared with one full forward over the decoded sequence: median relative error below
0.15 (measured 0.05-0.08), and the random-weights source must hand out every tensor it made.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import decode_models  # noqa: E402

from oracle.hf.decode import Decoder  # noqa: E402


def test_bf16_deepseek_static_decode_equals_generate(tmp_path):
    model = decode_models.build("deepseek-fp8", tmp_path, engine="bf16")
    ids = torch.randint(0, 512, (2, 10), generator=torch.Generator().manual_seed(0))
    want = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, min_new_tokens=8,
                          do_sample=False, pad_token_id=0)[:, 10:]
    assert torch.equal(Decoder(model, 2, 24, "eager").generate(ids, 8), want)


def test_fp8_deepseek_step_logits_follow_the_full_forward(tmp_path):
    model = decode_models.build("deepseek-fp8", tmp_path)
    assert {k.layer.op for k in model.oracle.kernels.values()} == {"linear", "moe"}
    ids = torch.randint(0, 512, (1, 10), generator=torch.Generator().manual_seed(0))
    dec = Decoder(model, 1, 24, "eager")
    logits = [dec.prefill(ids) is not None and dec.logits[0].clone()]
    tokens = [int(dec.token)]
    for _ in range(7):
        dec.step()
        tokens.append(int(dec.token))
    seq = torch.cat([ids, torch.tensor([tokens[:-1]])], 1)
    with torch.no_grad():
        full = model(seq).logits[0, 9:].float()
    # the decoder's own step logits: replay the same sequence step by step
    dec.prefill(ids)
    for t in tokens[:-1]:
        dec.token.fill_(t)
        with torch.no_grad():
            out = model(input_ids=dec.token, position_ids=dec.pos, past_key_values=dec.cache, use_cache=True)
        dec.pos.add_(1)
        logits.append(out.logits[0, -1].clone())
    errs = torch.tensor([float((a.float() - b).norm() / b.norm()) for a, b in zip(logits, full)])
    assert errs.median() < 0.15, errs
    # the prefill itself is the model's forward over the prompt alone (the longer forward above rounds its
    # activations with scales taken over all 17 tokens, so its first logits may swap a near-tie: 4.22 / 4.16)
    with torch.no_grad():
        prompt = model(ids).logits[0, -1].float()
    assert float((logits[0].float() - prompt).norm() / prompt.norm()) < 1e-3
    assert int(logits[0].argmax()) == int(prompt.argmax())


def test_bulk_made_experts_are_the_per_tensor_draws_in_the_loaders_order():
    """The synthetic build makes a run of experts in one draw and one quantizer call per shape; on the
    CPU that must give exactly the tensors of one draw per checkpoint tensor, made in the order the
    loader asks for them (per expert: gate, up, down), each rounded alone by the emulation codec."""
    import math
    import sys

    sys.path.insert(0, str(decode_models.ROOT / "scripts"))
    import make_tiny_checkpoint as mk
    from oracle_emulation.formats import codec_for

    _, meta = mk.meta_model("qwen3-moe-fp8")
    plan = [(names, make) for names, make, _ in mk.tensor_plan("qwen3-moe-fp8", meta)
            if any(".experts." in n for n in names)]
    assert plan and all(len(names) > 2 for names, _ in plan)       # several tensors per make
    bulk, single = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for names, make in plan:
        for name, got in zip(names, make(bulk)):
            if name.endswith("_scale_inv"):
                assert torch.equal(got, want_scale), name
                continue
            shape = tuple(got.shape)
            w = torch.randn(shape, generator=single) * min(0.08, 1.5 / math.sqrt(shape[-1]))
            q = codec_for("fp8_block").quantize(w, "fp8_block")
            want_scale = q["weight_scale"]
            assert torch.equal(got.view(torch.uint8), q["weight"].view(torch.uint8)), name
    assert torch.equal(torch.randn(4, generator=bulk), torch.randn(4, generator=single))   # same draws used


def test_interleaved_engines_decode_as_each_does_alone(tmp_path):
    """bench_decode.py --interleave (bench/interleave.py): the oracle and BF16 DeepSeek models in one
    process, timed in alternating blocks, each decode the greedy tokens its own Decoder gives alone, in
    every block (sharing the process and alternating changes no engine's result); one block time per
    engine per round, and each round's ratio is BF16's ms over oracle's."""
    import argparse

    import interleave

    models = {e: decode_models.build("deepseek-fp8", tmp_path, engine=e) for e in ("oracle", "bf16")}
    args = argparse.Namespace(engines=["oracle", "bf16"], device="cpu", seed=0, batch=[1], decode=["eager"],
                              prompt=6, steps=4, repeat=3)
    saved = []
    got = interleave.run(args, lambda engine, _: (models[engine], []), saved.append)
    run = got["runs"][0]
    ids = torch.randint(0, 512, (1, 6), generator=torch.Generator().manual_seed(1))
    for engine, model in models.items():
        alone = Decoder(model, 1, 6 + 16 + 8, "eager").generate(ids, 5)[0].tolist()
        assert run["tokens"][engine] == [alone] * 3
        assert len(run["block_ms"][engine]) == 3
    assert run["ratios"] == pytest.approx([b / o for b, o in zip(run["block_ms"]["bf16"], run["block_ms"]["oracle"])])
    assert saved and saved[-1] is got
