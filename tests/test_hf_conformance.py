"""Conformance matrix: architectures x schemes, each checkpoint written by its library, each quantized
module compared with that library's own decompression.

Writers (tests/checkpoint_matrix.py): a random tiny model of each architecture saved by transformers
(the architecture's real tensor names), then
- compressed-tensors: every preset the library writes on CPU (`preset_name_to_scheme`), calibrated from
  min/max and packed by `ModelCompressor`;
- transformers fine-grained FP8: `FineGrainedFP8Config` with 128x128 blocks and per tensor
  (`weight_block_size=None`), written by transformers' quantizer and `save_pretrained`;
- gpt-oss MXFP4: tests/tf_checkpoints.py (no library writes it on CPU; reference below is transformers').

References and tolerances, per quantized module:
- weight-only compressed-tensors schemes: the kernel's dequantized weight equals the library's
  `decompress_module` output bit for bit (NVFP4: within one BF16 unit, 2**-7 relative: the library
  divides by its stored global scale, the kernels multiply by its fp32 reciprocal, as vLLM's do;
  int4 with zero points on torch's tinygemm, the CPU default: within 1/16 of the group's scale, as
  tinygemm keeps (8 - z) * scale as one BF16 number, 2**-9 relative, and the product rounds once more);
- activation-quantized compressed-tensors schemes: weights exact as above (q/k/v and gate/up whose
  per-tensor scales differ keep them: one kernel per part); the module's output on a random input against the library's own quantized forward
  (its wrappers quantize-dequantize the input as the scheme declares), relative Frobenius error below
  0.04 for FP8 and int8 (the library rounds activation scales in BF16, the kernels in FP32: a few
  elements one step apart; measured 0.003-0.02), 0.06 for MXFP8 and 0.10 for MX/NV FP4 activations
  (the MX scale rule differs too: the kernels take the power of two at or above amax/max, the
  library rounds amax to a power of two first; measured 0.03-0.07); experts 1.5x these (two GEMMs in
  a row, and one activation global scale for all experts where the library has one per expert's
  module; measured 0.042 FP8, 0.124 NVFP4); per-tensor FP8 experts carry one w13 scale per expert,
  so gate/up are requantized to the larger: within half an E4M3 step (1/16 of the largest weight), and
  their outputs within 0.08 (measured 0.064);
- transformers FP8: transformers' own CPU load of the checkpoint (it dequantizes every FP8 linear
  weight in BF16 and converts the names); experts through its `_dequantize_fp8_weight` on the stacked
  weights and the fused scales its writer saved (its CPU reload drops those scales and keeps raw E4M3
  codes: a transformers defect, so not the reference): weights within 2**-7 relative (transformers
  multiplies in BF16, the kernel in FP32 and rounds once);
- gpt-oss MXFP4: transformers' `convert_moe_packed_tensors`: expert weights exact.
Every loaded model also runs a forward pass with finite logits.

Not written by the library on CPU (recorded as such in the matrix, not compared): UNQUANTIZED (no
quantized weights), transformers FP8 for gpt-oss (its FP8 experts refuse biases).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("compressed_tensors")

import checkpoint_matrix as cm  # noqa: E402  (tests/ is on sys.path)
import ct_checkpoints as ct  # noqa: E402

import oracle.hf  # noqa: E402
from oracle.errors import InputError  # noqa: E402


@dataclass(frozen=True)
class Scheme:
    """What a preset should load as: the kernel weight format and activation format (or a refusal)."""

    weight: str | None            # None: refused with `refusal` in the message
    activation: str = "bf16"
    out_tol: float | None = None  # per-module output tolerance when activations are quantized
    refusal: str = ""


FP4_ACT, FP8_ACT, MX8_ACT = 0.10, 0.04, 0.06
#: experts: two quantized GEMMs in a row, FC2's input rounded after the activation, and one activation
#: scale for all experts where the library keeps one per expert's module (static NVFP4 global scales)
MOE_FACTOR = 1.5
MOE_FP4_ACT = 0.20          # MXFP4 W4A4 experts: the MX scale rules differ on both GEMMs (measured 0.16)
MOE_FP8_TENSOR = 0.08       # per-tensor FP8 experts: w13 requantized to one scale as well (measured 0.064)
#: every compressed-tensors preset, with what oracle.hf must do with it
CT_SCHEMES: dict[str, Scheme] = {
    "W4A16": Scheme("int4"),
    "W4A16_ASYM": Scheme("int4"),
    "W8A16": Scheme("int8"),
    "W8A8": Scheme("int8", "int8", FP8_ACT),
    "INT8": Scheme("int8", "int8", FP8_ACT),
    "W4A8": Scheme("int4", "int8", FP8_ACT),
    "W4AFP8": Scheme("int4", "fp8", FP8_ACT),
    "FP8": Scheme("fp8_tensor", "fp8", FP8_ACT),
    "FP8_DYNAMIC": Scheme("fp8_channel", "fp8", FP8_ACT),
    "FP8_BLOCK": Scheme("fp8_block", "fp8", FP8_ACT),
    "NVFP4A16": Scheme("nvfp4"),
    "NVFP4": Scheme("nvfp4", "nvfp4", FP4_ACT),
    "MXFP4A16": Scheme("mxfp4"),
    "MXFP4": Scheme("mxfp4", "mxfp4", FP4_ACT),
    "MXFP4XFP8": Scheme("mxfp4", "mxfp8", MX8_ACT),
    "MXFP8A16": Scheme("mxfp8"),
    "MXFP8": Scheme("mxfp8", "mxfp8", MX8_ACT),
    "W4A4": Scheme(None, refusal="int4 weights with int 4-bit activations"),
    "MXFP6A16": Scheme(None, refusal="mxfp6-pack-quantized"),
    "MXFP6A8": Scheme(None, refusal="mxfp6-pack-quantized"),
    **{f"W{b}A{a}": Scheme(None, refusal=f"int{b} weights") for b in (2, 3, 5, 6, 7) for a in (16, 8)},
    "W2A4": Scheme(None, refusal="int2 weights"),
    "W3A4": Scheme(None, refusal="int3 weights"),
}
NOT_WRITTEN = {"UNQUANTIZED": "the preset quantizes nothing (compressed-tensors writes no scheme for it)"}
ARCHS = sorted(cm.ARCHITECTURES)
#: the part that runs first (every scheme on one dense and one MoE architecture, every architecture
#: under one weight-only and one activation-quantized scheme); the rest is marked slow (CI runs it too)
FAST_ARCHS = {"llama", "mixtral"}
FAST_SCHEMES = {"W4A16", "FP8_DYNAMIC"}
IDS = torch.tensor([[1, 5, 9, 33, 100, 7]]) if torch else None


def _case(arch: str, scheme: str):
    marks = [] if arch in FAST_ARCHS or scheme in FAST_SCHEMES else [pytest.mark.slow]
    return pytest.param(arch, scheme, marks=marks, id=f"{arch}-{scheme}")


def rel(a, b) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp(min=1e-12))


def _rows(model):
    return {r.name: r for r in model.oracle.report.model.layers}


def _ref_weight(ref, part: str):
    return ref.get_submodule(part).weight.float()


def _same(got, want, fmt: str) -> bool:
    """Bit for bit, except NVFP4: the library divides by its stored global scale, the kernels (like vLLM's)
    multiply by its fp32 reciprocal, so a few BF16 results round one unit apart (2**-7 relative at most)."""
    if fmt == "nvfp4":
        return torch.allclose(got, want, rtol=2 ** -7, atol=0)
    return torch.equal(got, want)


def _check_linear(kernel, row, ref, scheme: Scheme, fmt: str) -> None:
    want = torch.cat([_ref_weight(ref, p) for p in row.parts])
    got = kernel.weight.float()     # fused parts with their own per-tensor scales: one kernel each, exact
    step = ct.tinygemm_step(kernel)
    if step is not None:
        assert bool(((got - want).abs() <= step / 16).all()), \
            f"{row.name}: weights beyond 1/16 of a quantization step from the library's decompression"
    else:
        assert _same(got, want, fmt), f"{row.name}: weights differ from the library's decompression"
    if scheme.out_tol is not None:
        torch.manual_seed(1)
        x = torch.randn(5, row.layer.in_features, dtype=torch.bfloat16)
        with torch.no_grad():
            expect = torch.cat([ref.get_submodule(p)(x) for p in row.parts], dim=-1)
            err = rel(kernel.apply(x), expect)
        assert err < scheme.out_tol, f"{row.name}: output {err:.4f} from the library's quantized forward"


def _check_experts(kernel, row, ref, scheme: Scheme) -> None:
    prefix, layer = row.name, row.layer
    gate, up, down = (p[len(prefix) + 3:] for p in row.parts)
    e = layer.num_experts
    w13 = torch.stack([torch.cat([_ref_weight(ref, f"{prefix}.{x}.{gate}"), _ref_weight(ref, f"{prefix}.{x}.{up}")])
                       for x in range(e)])
    w2 = torch.stack([_ref_weight(ref, f"{prefix}.{x}.{down}") for x in range(e)])
    if layer.weight_format == "fp8_tensor":     # one scale per expert's w13: gate/up requantized to the larger
        assert (kernel.w13.float() - w13).abs().max() <= w13.abs().max() / 16, prefix
    else:
        assert _same(kernel.w13.float(), w13, layer.weight_format), f"{prefix}: w13 differs from the library's"
    assert _same(kernel.w2.float(), w2, layer.weight_format), f"{prefix}: w2 differs from the library's decompression"
    if scheme.out_tol is None:
        return
    torch.manual_seed(2)
    x = torch.randn(6, layer.hidden_size, dtype=torch.bfloat16)
    ids = torch.stack([torch.randperm(e)[: layer.top_k] for _ in range(6)])
    weights = torch.softmax(torch.randn(6, layer.top_k), dim=-1)
    expect = torch.zeros(6, layer.hidden_size)
    with torch.no_grad():
        for t in range(6):
            for j in range(layer.top_k):
                b = f"{prefix}.{int(ids[t, j])}"
                h = x[t:t + 1]
                a = torch.nn.functional.silu(ref.get_submodule(f"{b}.{gate}")(h)) * ref.get_submodule(f"{b}.{up}")(h)
                expect[t] += weights[t, j] * ref.get_submodule(f"{b}.{down}")(a.to(torch.bfloat16)).float()[0]
        err = rel(kernel.apply(x, weights, ids), expect)
    tol = MOE_FP4_ACT if scheme.activation == "mxfp4" else MOE_FP8_TENSOR if layer.weight_format == "fp8_tensor" \
        else scheme.out_tol * MOE_FACTOR
    assert err < tol, f"{prefix}: expert output {err:.4f} from the library's quantized forward"


def _runs(model) -> None:
    with torch.no_grad():
        logits = model(IDS).logits
    assert logits.shape == (1, IDS.shape[1], 256) and bool(torch.isfinite(logits).all())


# ---------------------------------------------------------------- compressed-tensors presets
@pytest.mark.parametrize("arch,scheme", [_case(a, s) for s in sorted(CT_SCHEMES) for a in ARCHS])
def test_compressed_tensors_preset(arch, scheme, tmp_path):
    expect = CT_SCHEMES[scheme]
    path = cm.write(tmp_path / f"{arch}-{scheme}", arch, scheme)
    if expect.weight is None:
        with pytest.raises(InputError, match=expect.refusal):
            oracle.hf.load_quantized(path, device="cpu")
        return
    model = oracle.hf.load_quantized(path, device="cpu")
    ref = cm.reference_tree(path, activations=expect.out_tol is not None)
    rows = _rows(model)
    assert model.oracle.kernels, "no quantized layer was loaded"
    for name, kernel in model.oracle.kernels.items():
        row = rows[name]
        assert (row.layer.weight_format, kernel.mode.activation) == (expect.weight, expect.activation), name
        if row.layer.op == "moe":
            _check_experts(kernel, row, ref, expect)
        else:
            _check_linear(kernel, row, ref, expect, expect.weight)
    _runs(model)


def test_the_matrix_names_every_preset_the_library_has():
    from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES
    assert set(PRESET_SCHEMES) == set(CT_SCHEMES) | set(NOT_WRITTEN)


# ---------------------------------------------------------------- transformers fine-grained FP8
FP8_BLOCKS = {"fp8-block": ([128, 128], "fp8_block"), "fp8-tensor": (None, "fp8_tensor")}
FP8_ARCHS = [a for a in ARCHS if a != "gpt_oss"]     # transformers' FP8 experts refuse gpt-oss's biases


@pytest.mark.parametrize("arch,kind", [pytest.param(a, k, id=f"{a}-{k}", marks=[] if a in FAST_ARCHS
                                                    else [pytest.mark.slow])
                                       for k in sorted(FP8_BLOCKS) for a in FP8_ARCHS])
def test_transformers_fp8(arch, kind, tmp_path):
    pytest.importorskip("accelerate")          # transformers' FP8 quantizer needs it (scripts/dev-setup installs it)
    block, fmt = FP8_BLOCKS[kind]
    path = cm.write_fp8(tmp_path / f"{arch}-{kind}", arch, block)
    model = oracle.hf.load_quantized(path, device="cpu")
    ref = cm.fp8_reference(path)
    from oracle.hf.naming import ModelNames
    names = ModelNames(model)
    rows = _rows(model)
    assert model.oracle.kernels
    for name, kernel in model.oracle.kernels.items():
        row = rows[name]
        assert row.layer.weight_format == fmt, name
        if row.layer.op == "moe":
            w13, w2 = _tf_experts(path, row, block)
            pairs = [(kernel.w13, w13), (kernel.w2, w2)]
        else:
            want = torch.cat([ref.get_submodule(names.module(p)).weight for p in row.parts])
            pairs = [(kernel.weight, want)]
        for got, want in pairs:
            assert torch.allclose(got.float(), want.float(), rtol=2 ** -7, atol=0), name
    _runs(model)


def _tf_experts(path, row, block) -> tuple:
    """(w13, w2) of one MoE layer by transformers' own `_dequantize_fp8_weight`, applied as its FP8 experts
    apply it: to the stacked [gate; up] and down weights with the fused `<experts>.<proj>_scale_inv` its
    writer saved. (Its CPU reload does not: it drops those scales and keeps the raw E4M3 codes.)"""
    from safetensors.torch import load_file
    from transformers.integrations.finegrained_fp8 import _dequantize_fp8_weight
    state = load_file(str(path / "model.safetensors"))
    prefix, e = row.name, row.layer.num_experts
    gate, up, down = (p[len(prefix) + 3:] for p in row.parts)

    def stacked(projs):
        return torch.stack([torch.cat([state[f"{prefix}.{x}.{p}.weight"] for p in projs]) for x in range(e)])
    return tuple(_dequantize_fp8_weight(stacked(projs), state[f"{prefix}.{fused}_scale_inv"], block, torch.bfloat16)
                 for projs, fused in (((gate, up), "gate_up_proj"), ((down,), "down_proj")))


def test_transformers_fp8_refuses_gpt_oss_on_its_own(tmp_path):
    """The one cell of the FP8 row no checkpoint exists for: transformers' own quantizer refuses it."""
    pytest.importorskip("accelerate")
    with pytest.raises(AssertionError, match="bias"):
        cm.write_fp8(tmp_path / "oss", "gpt_oss", [128, 128])


# ---------------------------------------------------------------- gpt-oss MXFP4
def test_gpt_oss_mxfp4(tmp_path):
    import tf_checkpoints as tf
    path = tf.write_gpt_oss(tmp_path / "oss")
    model = oracle.hf.load_quantized(path, device="cpu")
    ref = tf.gpt_oss_reference(path)
    for block in range(2):
        name = f"model.layers.{block}.mlp.experts"
        kernel = model.get_submodule(name).kernel
        assert torch.equal(kernel.w13.float(), ref.get_submodule(name).gate_up_proj.float().transpose(1, 2))
        assert torch.equal(kernel.w2.float(), ref.get_submodule(name).down_proj.float().transpose(1, 2))
    _runs(model)


# ---------------------------------------------------------------- the generated docs page
PAGE = "docs/conformance.md"


def render_page() -> str:
    """docs/conformance.md: what the matrix loads and compares (regenerate: python tests/test_hf_conformance.py)."""
    doc = __doc__.split("\n\n", 1)[1].strip()
    lines = ["# Checkpoint conformance: what is tested", "",
             "Generated from tests/test_hf_conformance.py (`python tests/test_hf_conformance.py > "
             f"{PAGE}`); tests/test_hf_conformance.py checks this copy is current. Every cell is a test: "
             "a tiny random checkpoint written by the library named, loaded by `oracle.hf.load_quantized` on "
             "CPU, every quantized module compared with the library's own decompression, and a forward pass run.",
             "", "## How", "", doc, "", "## Architectures", "",
             ", ".join(f"`{a}`" for a in ARCHS) + " (transformers configs; tests/checkpoint_matrix.py holds the "
             "tiny geometry of each).", "", "## compressed-tensors presets (every architecture)", "",
             "| preset | loads as (weights / activations) | compared with |", "|---|---|---|"]
    for name in sorted(CT_SCHEMES):
        s = CT_SCHEMES[name]
        if s.weight is None:
            lines.append(f"| {name} | refused: InputError naming the config key ({s.refusal} ...) | - |")
        else:
            what = ("decompressed weights, bit for bit" if s.weight != "nvfp4" else
                    "decompressed weights, within one BF16 unit") + (
                " (with zero points on torch's tinygemm, the CPU kernel where the shape fits: within 1/16 of "
                "the group's scale)" if name.endswith("_ASYM") else "") + ("" if s.out_tol is None else
                                                          f"; module output vs the library's quantized forward "
                                                          f"(relative error < {s.out_tol:g}, experts "
                                                          f"< {MOE_FP4_ACT if s.activation == 'mxfp4' else s.out_tol * MOE_FACTOR:g})")
            lines.append(f"| {name} | {s.weight} / {s.activation} | {what} |")
    lines += [f"| {name} | not written: {why} | - |" for name, why in sorted(NOT_WRITTEN.items())]
    lines += ["", "## transformers fine-grained FP8 (every architecture but gpt-oss)", "",
              "| writer config | loads as | compared with |", "|---|---|---|",
              "| `FineGrainedFP8Config(weight_block_size=[128, 128])` | fp8_block / fp8 | transformers' dequantization, "
              "2**-7 relative |",
              "| `FineGrainedFP8Config(weight_block_size=None)` (scales `[1, 1]`) | fp8_tensor / fp8, q/k/v and gate/up "
              "one kernel per part | transformers' dequantization, 2**-7 relative |",
              "", "gpt-oss: transformers' FP8 quantizer refuses its expert biases (a test pins the refusal).", "",
              "## gpt-oss MXFP4", "", "Experts against transformers' `convert_moe_packed_tensors`: exact.", "",
              "Run: `pytest tests/test_hf_conformance.py` (the cells outside llama and mixtral, and outside W4A16 "
              "and FP8_DYNAMIC, are marked `slow`; CI runs them all).", ""]
    lines += _kernel_lines() + [""]
    return "\n".join(lines)


# ---------------------------------------------------------------- which kernel serves the integer presets
#: integer presets -> (weight format, activation format, group size) of their linear layers
INT_PRESETS = {"W4A16": ("int4", None, 128), "W8A16": ("int8", None, 128), "W8A8": ("int8", "int8", None),
               "W4A8": ("int4", "int8", 128), "W4AFP8": ("int4", "fp8", 128)}
#: why a preset stays on oracle-emulation on an H200; the page and a test check these are exactly the ones
#: the engine sends there
EMULATION_WHY = {
    "W8A16": "torch has no int8 x BF16 kernel with groups along K on CUDA: its CUDA `aten._weight_int8pack_mm` "
             "takes one scale per output row and is one thread per output looping over K in float32 "
             "(aten/src/ATen/native/cuda/int8mm.cu), and oracle-triton's dense kernels decode int4/FP4/FP8 "
             "weights, not int8. The emulation keeps a dequantized BF16 copy (BF16 memory, cuBLAS BF16 speed)",
    "W4A8": "no int4 x int8 kernel for Hopper in torch or the shipped plugins (vLLM's CUTLASS W4A8 is outside "
            "torch); on CPUs torch's only int4 x int8 operator, `aten._dyn_quant_matmul_4bit` (Arm KleidiAI, a "
            "reference loop on x86), rounds activations asymmetrically per row, not as compressed-tensors' "
            "symmetric per-token scheme, so it is not declared",
    "W4AFP8": "no int4 x FP8 kernel in torch or the shipped plugins (vLLM's CUTLASS W4A8-FP8 for SM90 is "
              "outside torch)",
}


def int_preset_kernels() -> dict[str, tuple[str, str]]:
    """preset -> (kernel on this CPU, kernel on the H200 preset) for a 4096 x 4096 linear layer."""
    from oracle import LinearLayer, Platform, select_backend

    out = {}
    for name, (w, a, g) in INT_PRESETS.items():
        layer = LinearLayer(name="model.layers.0.mlp.down_proj", in_features=4096, out_features=4096,
                            weight_format=w, activation_format=a, group_size=g)
        out[name] = tuple(select_backend(layer, p).kernel for p in (Platform.cpu(), Platform.preset("h200")))
    return out


def test_emulation_reasons_name_exactly_the_presets_left_on_emulation():
    on_emulation = {name for name, (_, gpu) in int_preset_kernels().items() if gpu.startswith("emulation.")}
    assert on_emulation == set(EMULATION_WHY)


def _kernel_lines() -> list[str]:
    lines = ["", "## Kernels for the integer presets", "",
             "What the engine selects for one 4096 x 4096 linear layer of each preset (generated: "
             "`select_backend` on this CPU's torch and on the `h200` platform preset). The conformance "
             "matrix above runs on CPU; the GPU kernels are tested in plugins/*/tests (`-m gpu`).", "",
             "| preset | CPU | H200 |", "|---|---|---|"]
    kernels = int_preset_kernels()
    lines += [f"| {name} | `{cpu}` | `{gpu}` |" for name, (cpu, gpu) in kernels.items()]
    lines += ["", "Why a preset stays on oracle-emulation on an H200:", ""]
    lines += [f"- {name}: {why}." for name, why in EMULATION_WHY.items()]
    return lines


def test_docs_page_is_current():
    from pathlib import Path
    page = Path(__file__).resolve().parents[1] / PAGE
    assert page.read_text() == render_page() + "\n", f"regenerate: python tests/test_hf_conformance.py > {PAGE}"


if __name__ == "__main__":
    print(render_page())
