"""Fused-MoE checkpoints through oracle.hf: transformers FP8 (Qwen3-MoE) and gpt-oss MXFP4.

Producer: tests/tf_checkpoints.py writes the tensors in each layout from the format's
definition (no library writes them on CPU). Reference: transformers' own dequantization
(`_dequantize_fp8_weight`, `convert_moe_packed_tensors`) into the BF16 model.

Tolerances: expert weights exact for MXFP4 (E2M1 x power-of-two scales are exact in BF16);
2**-6 relative for FP8 (transformers rounds the scale and the product to BF16, the kernel one product).
Logits (relative Frobenius): the kernels quantize activations (FP8 1x128 groups for the FP8
checkpoint, MXFP8 for gpt-oss experts, as the policy picks), the BF16 reference does not:
one E4M3 rounding (relative step 2**-3) per GEMM input over 2 layers of a random model gives
0.03-0.07 measured; bound 0.12. Greedy generation of 16 tokens must run.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import tf_checkpoints as tf  # noqa: E402

import oracle.hf  # noqa: E402

IDS = [[1, 5, 9, 33, 100, 7, 2, 64, 17, 3, 99, 200]]
CASES = {"fp8-qwen3-moe": (tf.write_fp8_moe, tf.fp8_reference, "fp8_block"),
         "mxfp4-gpt-oss": (tf.write_gpt_oss, tf.gpt_oss_reference, "mxfp4")}


@pytest.fixture(scope="module", params=sorted(CASES))
def loaded(request, tmp_path_factory):
    write, reference, fmt = CASES[request.param]
    path = write(tmp_path_factory.mktemp(request.param))
    return request.param, fmt, oracle.hf.load_quantized(path, device="cpu"), reference(path)


def test_experts_run_the_oracle_moe_kernel_with_the_reference_weights(loaded):
    case, fmt, model, ref = loaded
    for block in range(2):
        name = f"model.layers.{block}.mlp.experts"
        experts = model.get_submodule(name)
        assert type(experts).__name__ == "KernelExperts" and experts.decision.weight_format == fmt
        want = ref.get_submodule(name).gate_up_proj.float()
        if fmt == "mxfp4":                       # transformers keeps gpt-oss experts as [E, H, 2I]
            assert torch.equal(experts.kernel.w13.float(), want.transpose(1, 2))
        else:
            assert torch.allclose(experts.kernel.w13.float(), want, rtol=2 ** -6, atol=0)


def test_logits_match_and_greedy_generation_runs(loaded):
    case, fmt, model, ref = loaded
    ids = torch.tensor(IDS)
    with torch.no_grad():
        a, b = model(ids).logits.float(), ref(ids).logits.float()
    err = float((a - b).norm() / b.norm())
    assert err < 0.12, f"{case}: relative logits error {err:.3f}"
    out = model.generate(ids, max_new_tokens=16, do_sample=False)
    assert out.shape == (1, len(IDS[0]) + 16)
    report = model.oracle.report.summary()
    assert report["no_kernel"] == 0 and report["quantized"] >= 2


def test_decoding_step_by_step_matches_one_forward_over_the_sequence(loaded):
    """Each decode step (KV cache, fused q/k/v runner fed a new tensor every step) gives the logits a
    single forward over the whole generated sequence gives at that position."""
    case, fmt, model, _ = loaded
    ids = torch.tensor(IDS)
    with torch.no_grad():
        gen = model.generate(ids, max_new_tokens=6, do_sample=False, return_dict_in_generate=True,
                             output_logits=True)
        full = model(gen.sequences).logits.float()
    for step, logits in enumerate(gen.logits):
        want = full[0, len(IDS[0]) - 1 + step]
        err = float((logits[0].float() - want).norm() / want.norm())
        assert err < 0.05, f"{case}: step {step} differs from the full forward by {err:.3f}"
