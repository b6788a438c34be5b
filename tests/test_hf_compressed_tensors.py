"""compressed-tensors checkpoints -> oracle.hf -> logits and tokens, against compressed-tensors itself.

Producer: compressed-tensors' own code (preset schemes, `calculate_qparams`/`generate_gparam`,
`ModelCompressor.compress_model`) writes each checkpoint of a random tiny Qwen3 built with
transformers (tests/ct_checkpoints.py). Reference: the same library's `decompress_module`
into a BF16 model; for schemes that quantize activations, the library's own forward
wrappers quantize-dequantize the activations too (`activations=True`).

Tolerances (relative Frobenius error):
- each layer's weights: exact (the adapter only renames, transposes and repacks bits), except
  int4 with zero points on torch's tinygemm (the CPU kernel): within 1/16 of the group's scale, as it
  keeps (8 - z) * scale in BF16; and
  per-tensor FP8 where q/k/v (and gate/up) with different scales are requantized to the largest
  scale (as vLLM does): at most half an E4M3 step, 1/16 of the largest weight;
- each layer's output on the same input: 0.02 weight-only (BF16 rounding of the output), 0.04
  with quantized activations (compressed-tensors computes activation scales in BF16, the kernels
  in FP32, so a few elements land one FP8/FP4 step apart), 0.06 for MXFP4 activations (its E8M0
  scale rounding differs too);
- logits of the whole model: 0.03 weight-only; with quantized activations those per-GEMM
  differences compound over 14 GEMMs and two attention softmaxes of a random model: 0.15 for
  FP8, 0.45 for FP4 activations (measured 0.07-0.09 and 0.22-0.30).
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("compressed_tensors")

import ct_checkpoints as ct  # noqa: E402  (tests/ is on sys.path)

import oracle.hf  # noqa: E402

# scheme -> (weight format, activations quantized?, per-layer output tol, logits tol)
SCHEMES = {
    "FP8": ("fp8_tensor", True, 0.06, 0.15),   # + requantized fused parts
    "FP8_DYNAMIC": ("fp8_channel", True, 0.04, 0.15),
    "FP8_BLOCK": ("fp8_block", True, 0.04, 0.15),
    "NVFP4A16": ("nvfp4", False, 0.02, 0.03),
    "NVFP4": ("nvfp4", True, 0.04, 0.45),
    "MXFP4": ("mxfp4", True, 0.06, 0.45),
    "W4A16": ("int4", False, 0.02, 0.03),
    "W4A16_ASYM": ("int4", False, 0.02, 0.03),
}
IDS = [[1, 5, 9, 33, 100, 7, 2, 64]]


def rel(a, b) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.fixture(scope="module", params=sorted(SCHEMES))
def loaded(request, tmp_path_factory):
    scheme = request.param
    path = ct.write_checkpoint(tmp_path_factory.mktemp(scheme), scheme)
    model = oracle.hf.load_quantized(path, device="cpu")
    ref = ct.reference_model(path, activations=SCHEMES[scheme][1])
    return scheme, model, ref


def test_every_quantized_layer_runs_an_oracle_kernel(loaded):
    scheme, model, _ = loaded
    fmt = SCHEMES[scheme][0]
    quantized = [d for d in model.oracle.report.decisions if d.status == "selected"]
    assert len(quantized) == 8 and {d.weight_format for d in quantized} == {fmt}
    assert type(model.model.layers[1].mlp.down_proj).__name__ == "KernelLinear"
    assert type(model.lm_head).__name__ == "Linear"          # ignored by the scheme: loads as usual


def test_weights_match_the_library_decompression(loaded):
    scheme, model, ref = loaded
    fmt = SCHEMES[scheme][0]
    for name, kernel in model.oracle.kernels.items():
        row = next(r for r in model.oracle.report.model.layers if r.name == name)
        expected = torch.cat([ref.get_submodule(p).weight.float() for p in row.parts])
        got = kernel.weight.float()
        step = ct.tinygemm_step(kernel)
        if fmt == "fp8_tensor":
            assert (got - expected).abs().max() <= expected.abs().max() / 16, name
        elif step is not None:       # torch's tinygemm with zero points (the CPU default): 1/16 of a step
            assert bool(((got - expected).abs() <= step / 16).all()), name
        else:
            assert torch.equal(got, expected), name


def test_layer_outputs_match_the_library_forward(loaded):
    scheme, model, ref = loaded
    tol = SCHEMES[scheme][2]
    torch.manual_seed(1)
    x = torch.randn(1, 6, 128, dtype=torch.bfloat16)
    with torch.no_grad():
        for part in ("self_attn.q_proj", "self_attn.k_proj", "mlp.up_proj"):
            name = f"model.layers.0.{part}"
            err = rel(model.get_submodule(name)(x), ref.get_submodule(name)(x))
            assert err < tol, f"{scheme} {name}: relative error {err:.4f}"


def test_logits_match_and_greedy_generation_runs(loaded):
    scheme, model, ref = loaded
    ids = torch.tensor(IDS)
    with torch.no_grad():
        err = rel(model(ids).logits, ref(ids).logits)
    assert err < SCHEMES[scheme][3], f"{scheme}: relative logits error {err:.3f}"
    out = model.generate(ids, max_new_tokens=16, do_sample=False)
    assert out.shape == (1, len(IDS[0]) + 16)
    assert int(out.min()) >= 0 and int(out.max()) < 256


# ---------------------------------------------------------------- MoE: per-expert compressed tensors
# compressed-tensors compresses each expert's gate/up/down as its own Linear (the names real MoE
# checkpoints carry: ...mlp.experts.<e>.gate_proj.weight_packed); the reference stacks the library's
# decompressed experts into transformers' fused experts. Weight-only schemes, so the reference is exact
# up to BF16 rounding: logits within 0.03. W4A16_ASYM exercises MoE int4 zero points end to end.
MOE_SCHEMES = {"W4A16_ASYM": "int4", "NVFP4A16": "nvfp4"}


@pytest.fixture(scope="module", params=sorted(MOE_SCHEMES))
def loaded_moe(request, tmp_path_factory):
    scheme = request.param
    path = ct.write_checkpoint(tmp_path_factory.mktemp(f"moe-{scheme}"), scheme, moe=True)
    return scheme, oracle.hf.load_quantized(path, device="cpu"), ct.reference_model(path)


def test_moe_experts_match_the_library_decompression(loaded_moe):
    scheme, model, ref = loaded_moe
    ids = torch.tensor(IDS)
    for block in range(2):
        name = f"model.layers.{block}.mlp.experts"
        experts = model.get_submodule(name)
        assert experts.decision.weight_format == MOE_SCHEMES[scheme]
        assert torch.equal(experts.kernel.w13.float(), ref.get_submodule(name).gate_up_proj.float())
        assert torch.equal(experts.kernel.w2.float(), ref.get_submodule(name).down_proj.float())
    with torch.no_grad():
        err = rel(model(ids).logits, ref(ids).logits)
    assert err < 0.03, f"{scheme} MoE: relative logits error {err:.4f}"
    assert model.generate(ids, max_new_tokens=16, do_sample=False).shape == (1, len(IDS[0]) + 16)
