"""The CPU-testable parts of the b12x kernel classes: input checks, FP4 canonicalisation,
storage reuse across reloads, capture refusal, warmup signatures, and the library guard."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from b12x_test_helpers import require_b12x
from oracle.errors import CaptureError, InputError
from oracle.layer import EmbeddingLayer, LinearLayer, MoELayer
from oracle.warmup import plan_warmup
from oracle_b12x import common, library, linear, mapping, moe, runtime
from oracle_b12x.embedding import B12xQ8Embedding
from oracle_b12x.linear import B12xCodecLinear, B12xNVFP4Linear, B12xTensorFP8Linear
from oracle_b12x.moe import B12xMoE


def _mode(specs, kernel, name=None, weight=None):
    return next(m for m in specs[kernel].modes if (name is None or m.name == name)
                and (weight is None or m.weight == weight))


# ---- import hygiene ---------------------------------------------------------------------------
def test_plugin_entry_module_imports_neither_torch_nor_b12x():
    code = ("import sys, oracle_b12x.plugin, oracle_b12x.runtime, oracle_b12x.mapping; "
            "print(sorted(m for m in ('torch', 'b12x', 'triton', 'flashinfer') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---- FP4 canonicalisation and row order (hand-computed) ----------------------------------------
def test_fp4_negative_zeros_become_positive_in_both_nibbles():
    # 0x8 is E2M1 -0 (sign bit, zero exponent and mantissa); other codes must not change.
    before = torch.tensor([0x88, 0x08, 0x80, 0x8F, 0xF8, 0x18, 0x81, 0x00, 0x99], dtype=torch.uint8)
    after = [0x00, 0x00, 0x00, 0x0F, 0xF0, 0x10, 0x01, 0x00, 0x99]
    out = common.canonicalize_fp4_zero_signs_(before)
    assert out is before and before.tolist() == after


def test_gate_up_halves_swap_per_expert():
    w = torch.arange(2 * 4 * 3).reshape(2, 4, 3)          # E=2, 2I=4 rows (gate 0-1, up 2-3)
    swapped = common.swap_gate_up(w, 2)
    assert torch.equal(swapped[:, :2], w[:, 2:]) and torch.equal(swapped[:, 2:], w[:, :2])


# ---- storage reuse --------------------------------------------------------------------------
@dataclasses.dataclass
class _Packed:
    values: torch.Tensor
    scales: torch.Tensor
    k: int


def test_reload_with_same_layout_copies_into_existing_storage():
    first = _Packed(torch.zeros(4, 8), torch.zeros(4), 8)
    ptr = first.values.data_ptr()
    kept, changed = common.reuse_packed_storage(first, _Packed(torch.ones(4, 8), torch.full((4,), 2.0), 8))
    assert kept is first and not changed
    assert first.values.data_ptr() == ptr and float(first.values.sum()) == 32 and float(first.scales[0]) == 2


def test_reload_with_another_layout_takes_the_new_storage():
    first = _Packed(torch.zeros(4, 8), torch.zeros(4), 8)
    new = _Packed(torch.ones(4, 16), torch.zeros(4), 16)
    kept, changed = common.reuse_packed_storage(first, new)
    assert kept is new and changed
    assert common.reuse_packed_storage(None, new) == (new, False)


def test_release_empties_parameters_only():
    param, plain = torch.nn.Parameter(torch.ones(3)), torch.ones(3)
    assert common.release_sources([param, plain, None]) == 1
    assert param.numel() == 0 and plain.numel() == 3


def test_capacities_are_powers_of_two():
    assert [common.capacity(m) for m in (1, 2, 3, 8, 9, 8192)] == [1, 2, 4, 8, 16, 8192]
    assert common.capacities([1, 3, 4, 100, 0]) == [1, 4, 128]


# ---- input validation (fails before any CUDA or b12x work) ---------------------------------------
def _nvfp4_linear(specs, mode="nvfp4_w4a4", k=256, n=128):
    layer = LinearLayer(name="model.layers.0.mlp.down_proj", in_features=k, out_features=n, weight_format="nvfp4",
                        activation_format="nvfp4")
    return B12xNVFP4Linear(layer, _mode(specs, "b12x.linear.nvfp4", mode), specs["b12x.linear.nvfp4"])


def test_wrong_weight_dtype_names_the_tensor_and_expectation(b12x_specs):
    kernel = _nvfp4_linear(b12x_specs)
    with pytest.raises(InputError) as err:
        kernel.process_weights(weight=torch.zeros(128, 128, dtype=torch.float16))
    text = str(err.value)
    assert "down_proj" in text and "weight" in text and "expected dtype uint8" in text and "float16" in text


def test_wrong_scale_shape_names_the_tensor(b12x_specs):
    kernel = _nvfp4_linear(b12x_specs)
    with pytest.raises(InputError, match=r"weight_scale.*expected shape \[128, 16\].*got \[128, 8\]"):
        kernel.process_weights(weight=torch.zeros(128, 128, dtype=torch.uint8),
                               weight_scale=torch.zeros(128, 8, dtype=torch.float8_e4m3fn),
                               weight_global_scale=torch.tensor(1.0))


def test_w4a4_without_activation_scale_is_a_clear_error(b12x_specs):
    kernel = _nvfp4_linear(b12x_specs)
    with pytest.raises(InputError, match="input_global_scale.*required for"):
        kernel.process_weights(weight=torch.zeros(128, 128, dtype=torch.uint8),
                               weight_scale=torch.zeros(128, 16, dtype=torch.float8_e4m3fn),
                               weight_global_scale=torch.tensor(1.0))


def test_cpu_weights_are_refused_with_the_reason(b12x_specs):
    kernel = _nvfp4_linear(b12x_specs)
    with pytest.raises(InputError, match="expected a CUDA tensor"):
        kernel.process_weights(weight=torch.zeros(128, 128, dtype=torch.uint8),
                               weight_scale=torch.zeros(128, 16, dtype=torch.float8_e4m3fn),
                               weight_global_scale=torch.tensor(1.0), input_global_scale=torch.tensor(0.5))


def test_dynamic_fp8_activation_scale_is_rejected(b12x_specs):
    layer = LinearLayer(in_features=64, out_features=32, weight_format="fp8_tensor")
    kernel = B12xTensorFP8Linear(layer, _mode(b12x_specs, "b12x.linear.fp8_tensor"),
                                 b12x_specs["b12x.linear.fp8_tensor"])
    with pytest.raises(InputError, match="static per-tensor activation scale"):
        kernel.process_weights(weight=torch.zeros(32, 64, dtype=torch.float8_e4m3fn), weight_scale=torch.tensor(1.0))


def test_codec_vectors_are_rejected(b12x_specs):
    layer = LinearLayer(in_features=256, out_features=8, weight_format="q8_0")
    kernel = B12xCodecLinear(layer, _mode(b12x_specs, "b12x.linear.codec", "q8_0"), b12x_specs["b12x.linear.codec"])
    with pytest.raises(InputError, match="packed vectors"):
        kernel.process_weights(weight=torch.zeros(8 * 34, dtype=torch.uint8))


def _moe_kernel(specs, weight="nvfp4", mode="nvfp4", **extra):
    layer = MoELayer(name="model.layers.3.mlp.experts", num_experts=4, top_k=2, hidden_size=256,
                     intermediate_size=128, weight_format=weight, **extra)
    return B12xMoE(layer, _mode(specs, "b12x.moe", mode, weight), specs["b12x.moe"])


def _nvfp4_experts(e=4, h=256, i=128):
    return dict(w13=torch.zeros(e, 2 * i, h // 2, dtype=torch.uint8), w2=torch.zeros(e, h, i // 2, dtype=torch.uint8),
                w13_scale=torch.zeros(e, 2 * i, h // 16, dtype=torch.float8_e4m3fn),
                w2_scale=torch.zeros(e, h, i // 16, dtype=torch.float8_e4m3fn),
                w13_global_scale=torch.ones(e), w2_global_scale=torch.ones(e))


def test_moe_wrong_w2_shape_is_named(b12x_specs):
    tensors = _nvfp4_experts()
    tensors["w2"] = torch.zeros(4, 256, 32, dtype=torch.uint8)
    with pytest.raises(InputError, match=r"experts.*w2.*expected shape \[4, 256, 64\]"):
        _moe_kernel(b12x_specs).process_weights(**tensors)


def test_moe_bias_is_rejected_with_spec_reason(b12x_specs):
    with pytest.raises(InputError, match="kernel does not support expert biases"):
        _moe_kernel(b12x_specs).process_weights(**_nvfp4_experts(), w13_bias=torch.zeros(4, 256))


def test_moe_nvfp4_a4_needs_activation_scales(b12x_specs):
    with pytest.raises(InputError, match="w13_input_scale.*required for"):
        _moe_kernel(b12x_specs).process_weights(**_nvfp4_experts())


def test_moe_global_scales_accept_scalar_or_per_expert():
    assert common.per_expert("x", "g", torch.tensor(2.0), 3, "").tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(InputError, match=r"expected one value or \[3\]"):
        common.per_expert("x", "g", torch.ones(2), 3, "")
    with pytest.raises(InputError, match="finite positive"):
        common.per_expert("x", "g", torch.tensor([1.0, 0.0, 1.0]), 3, "")


# ---- CUDA-graph capture refusal -------------------------------------------------------------
@pytest.fixture
def capturing(monkeypatch):
    for module in (common, moe):        # linear's capture checks live in common.PlanCache
        monkeypatch.setattr(module, "is_capturing", lambda: True)
    import oracle_b12x.embedding as embedding
    monkeypatch.setattr(embedding, "is_capturing", lambda: True)


def test_process_weights_refuses_during_capture(b12x_specs, capturing):
    with pytest.raises(CaptureError, match="before capturing"):
        _nvfp4_linear(b12x_specs).process_weights(weight=None)
    with pytest.raises(CaptureError, match="capture"):
        _moe_kernel(b12x_specs).process_weights(**_nvfp4_experts())


def test_apply_without_a_warmed_plan_refuses_during_capture(b12x_specs, capturing):
    kernel = _nvfp4_linear(b12x_specs)
    kernel.packed = object()                     # as if packed; planning must not even start
    kernel._device = lambda: torch.device("cpu")
    with pytest.raises(CaptureError, match="no warmed b12x plan for 4 rows"):
        kernel.apply(torch.zeros(3, 256, dtype=torch.bfloat16))


def test_moe_topk_conversion_would_allocate_during_capture(b12x_specs, capturing):
    kernel = _moe_kernel(b12x_specs)
    kernel.experts = object()
    with pytest.raises(CaptureError, match="would allocate"):
        kernel.apply(torch.zeros(2, 256, dtype=torch.bfloat16), torch.ones(2, 2, dtype=torch.bfloat16),
                     torch.zeros(2, 2, dtype=torch.int32))


def test_embedding_refuses_during_capture(b12x_specs, capturing):
    layer = EmbeddingLayer(num_embeddings=10, embedding_dim=64, weight_format="q8_0")
    spec = b12x_specs["b12x.embedding.q8_0"]
    with pytest.raises(CaptureError):
        B12xQ8Embedding(layer, spec.modes[0], spec).process_weights(torch.zeros(10, 2, 34, dtype=torch.uint8))


# ---- warmup units ---------------------------------------------------------------------------
def test_linear_warmup_units_are_keyed_by_signature(b12x_specs):
    a, b = _nvfp4_linear(b12x_specs), _nvfp4_linear(b12x_specs)
    wider = _nvfp4_linear(b12x_specs, n=256)
    units = plan_warmup([a, b, wider], [1, 3, 4, 100])
    # capacities {1, 4, 128} x two distinct shapes; the twin layer adds nothing
    assert len(units) == 6
    assert {u.kernel for u in units} == {"b12x.linear.nvfp4"}
    assert len({u.signature for u in units}) == 6


def test_moe_warmup_units_are_keyed_by_signature(b12x_specs):
    kernels = [_moe_kernel(b12x_specs), _moe_kernel(b12x_specs),
               _moe_kernel(b12x_specs, activation="situ")]
    units = plan_warmup(kernels, [1, 8, 256])
    assert len(units) == 6 and {u.signature[-1] for u in units} == {1, 8, 256}


# ---- translation to b12x's vocabulary -----------------------------------------------------------
def test_activation_names_and_swiglu_arguments():
    assert mapping.b12x_activation("relu2_no_mul") == "relu2"
    assert mapping.b12x_activation("gelu") == "gelu"        # passed through for b12x to reject
    assert mapping.swiglu_args("swigluoai_uninterleave", {"limit": 7.0, "alpha": 1.702, "beta": 1.0}) == (7.0, 1.702, 1.0)
    assert mapping.swiglu_args("situ", {"beta": 4.0}) == (None, None, None)   # SiTU's beta is not SwiGLU's
    assert mapping.swiglu_args("silu", {"limit": 10.0}) == (10.0, None, None)


def test_dense_query_arguments(b12x_specs):
    layer = LinearLayer(in_features=1000, out_features=64, weight_format="mxfp8")
    query, fixed = mapping.dense_query_args(layer, _mode(b12x_specs, "b12x.linear.mxfp8", "mxfp8_w8a8"), tokens=16)
    assert not fixed and query["padded_in_features"] == 1024 and query["activation_mode"] == "auto"
    # fp16 MXFP8 and fp16 NVFP4 W4A4 go through b12x's fixed contract (packed MXFP8 / serialized NVFP4).
    layer = LinearLayer(in_features=1000, out_features=64, weight_format="mxfp8", dtype="float16")
    query, fixed = mapping.dense_query_args(layer, _mode(b12x_specs, "b12x.linear.mxfp8", "mxfp8_w8a8"), tokens=16)
    assert fixed and (query["recipe"], query["call_kind"], query["padded_in_features"]) == ("mxfp8", "packed", 1024)
    assert query["input_dtype"] == query["output_dtype"] == "float16"
    layer = LinearLayer(in_features=4096, out_features=64, weight_format="nvfp4", activation_format="nvfp4",
                        dtype="float16")
    query, fixed = mapping.dense_query_args(layer, _mode(b12x_specs, "b12x.linear.nvfp4", "nvfp4_w4a4"), tokens=16)
    assert fixed and (query["recipe"], query["call_kind"], query["input_dtype"]) == ("nvfp4", "serialized", "uint8")
    layer = LinearLayer(in_features=512, out_features=256, weight_format="fp8_block")
    query, fixed = mapping.dense_query_args(layer, _mode(b12x_specs, "b12x.linear.fp8_block"), tokens=8)
    assert fixed and query["recipe"] == "block_fp8" and query["call_kind"] == "serialized"


# ---- the library guard and the runtime check ---------------------------------------------------
def test_missing_and_too_old_b12x_are_clear_errors():
    from oracle_b12x.provider import STANDALONE, Provider, check_provider_version

    with pytest.raises(library.B12xUnavailableError, match="version is unknown.*pip install oracle-b12x"):
        check_provider_version(Provider(STANDALONE, None, "/x/b12x"))
    with pytest.raises(library.B12xUnavailableError, match=r"standalone b12x 1\.4\.0 .*b12x>=1\.5\.1,<1\.6"):
        check_provider_version(Provider(STANDALONE, "1.4.0", "/x/b12x"))
    check_provider_version(Provider(STANDALONE, "1.5.1", "/x/b12x"))


def test_b12x_import_failure_is_one_clear_error(monkeypatch):
    import importlib

    def broken(name):
        if name == "b12x.gemm.broken_for_test":
            raise RuntimeError("CUDA driver too old")
        if name == "b12x.gemm.needs_triton_for_test":
            raise ModuleNotFoundError("No module named 'triton'", name="triton")
        return importlib.__import__(name)
    monkeypatch.setattr(library.importlib, "import_module", broken)
    _pretend_b12x_is_installed(monkeypatch)      # the guard, not this machine's b12x, is under test
    with pytest.raises(library.B12xUnavailableError, match="failed to import: RuntimeError: CUDA driver too old"):
        library.load("gemm.broken_for_test")
    with pytest.raises(library.B12xUnavailableError, match="missing module 'triton'.*pip install triton"):
        library.load("gemm.needs_triton_for_test")


def _pretend_b12x_is_installed(monkeypatch):
    from oracle_b12x.provider import STANDALONE, Provider

    monkeypatch.setattr(library, "active_provider", lambda: Provider(STANDALONE, "1.5.1", "/x/b12x"))


def test_feature_detection_reports_missing_api(monkeypatch):
    import types

    _pretend_b12x_is_installed(monkeypatch)
    fake = types.ModuleType("b12x.gemm.fake")
    with pytest.raises(library.B12xUnavailableError, match="fake.mm_nvfp4 is missing"):
        library.attr(fake, "mm_nvfp4", "NVFP4 serialized GEMM")
    assert not library.has(fake, "w4a16")


def test_runtime_check_on_this_machine_says_why(b12x_specs):
    from oracle.platform import Platform

    ok, detail = runtime.is_supported(b12x_specs["b12x.moe"], Platform.detect())
    if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 12:
        pytest.skip("an SM12x device is present: the runtime check may pass")
    try:
        library.active_provider()
        expected = "b12x.is_b12x() is false"
    except library.B12xUnavailableError:
        expected = "b12x is not installed"
    assert not ok and expected in detail


# ---- planning through the real b12x (pure Python on CPU) -------------------------------------
def _planned_linear(specs, cls, kernel, mode, k, n, fmt, act=None):
    import types

    pytest.importorskip("b12x", reason="planning needs b12x")
    layer = LinearLayer(in_features=k, out_features=n, weight_format=fmt, activation_format=act)
    obj = cls(layer, _mode(specs, kernel, mode), specs[kernel])
    obj.packed = types.SimpleNamespace(padded_in_features=-(-k // 128) * 128)
    obj._device = lambda: torch.device("cpu")
    return obj


def test_linear_plans_are_b12x_declarations(b12x_specs):
    kernel = _planned_linear(b12x_specs, B12xNVFP4Linear, "b12x.linear.nvfp4", "nvfp4_w4a4", 4096, 4096,
                             "nvfp4", "nvfp4")
    plan = kernel._make_plan(16)
    assert type(plan).__name__ == "Plan" and plan.query.num_tokens == 16 and plan.query.activation_scale_available


@pytest.mark.parametrize("cls, kernel, mode, k, n, fmt, act, b12x_words", [
    (B12xNVFP4Linear, "b12x.linear.nvfp4", "nvfp4_w4a4", 4160, 4096, "nvfp4", "nvfp4", "requires stored K128"),
    (linear.B12xBlockFP8Linear, "b12x.linear.fp8_block", "block_fp8", 4096, 4100, "fp8_block", None,
     "unsupported serialized blockscaled recipe or geometry"),
])
def test_shapes_b12x_rejects_at_plan_time_are_a_clear_error(b12x_specs, cls, kernel, mode, k, n, fmt, act,
                                                             b12x_words):
    obj = _planned_linear(b12x_specs, cls, kernel, mode, k, n, fmt, act)
    with pytest.raises(InputError, match=f"b12x rejects this layer at plan time: .*{b12x_words}"):
        obj._make_plan(16)


def test_moe_plan_and_scratch_come_from_b12x(b12x_specs):
    import types

    pytest.importorskip("b12x", reason="planning needs b12x")
    fm = library.load("moe.fused_moe")
    layer = MoELayer(num_experts=8, top_k=2, hidden_size=4096, intermediate_size=1024, weight_format="mxfp4")
    spec = b12x_specs["b12x.moe"]
    kernel = B12xMoE(layer, _mode(b12x_specs, "b12x.moe", "w4a8_mx", "mxfp4"), spec)
    kernel.weight_plan = fm.plan_weights(quant_modes="w4a8_mx", source_format="fp4_e8m0_k32", activation="silu",
                                         params_dtype=torch.bfloat16, num_experts=8, hidden_size=4096,
                                         intermediate_size=1024, w13_layout="w31")
    kernel.experts = types.SimpleNamespace(w1_fp4=torch.empty(0))
    moe.clear_plans()
    plan, scratch = kernel._plan_for(8)
    assert type(plan).__name__ == "TPMoEScratchPlan"
    assert scratch.dtype == torch.uint8 and scratch.numel() == sum(s.nbytes for s in plan.scratch_specs()) > 0
    assert kernel._plan_for(common.capacity(5)) is kernel._plan_for(8)   # one plan per power-of-two capacity
    moe.clear_plans()


# ---- fp16 NVFP4 W4A4: activations quantized with b12x's own pure-torch quantizer --------------------
def test_fp16_nvfp4_activation_quantizer_matches_hand_computed_e2m1():
    import torch

    from oracle_b12x.linear import quantize_nvfp4_activations

    require_b12x()                   # the quantizer is b12x's own
    row = [0, .24, .26, .74, .76, 1.3, 1.8, 2.6, 3.6, 5.1, 6.0, -.5, -6, -2.4, 0, 0]     # block max 6 -> scale 1
    expected = [0, 0, .5, .5, 1, 1.5, 2, 3, 4, 6, 6, -.5, -6, -2, 0, 0]                 # E2M1, ties as b12x
    x = torch.tensor([row * 8] * 3, dtype=torch.float16)                                  # M=3, K=128
    packed, scales = quantize_nvfp4_activations(x, torch.tensor(1.0))
    assert packed.shape == (3, 64) and packed.dtype == torch.uint8
    lut = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6])
    low, high = packed & 0x7, (packed >> 4) & 0x7
    signs_low, signs_high = torch.where(packed & 0x8 > 0, -1.0, 1.0), torch.where(packed & 0x80 > 0, -1.0, 1.0)
    decoded = torch.stack([lut[low.long()] * signs_low, lut[high.long()] * signs_high], dim=-1).view(3, 128)
    assert decoded[0, :16].tolist() == expected                                            # low nibble = even k
    assert torch.equal(decoded, decoded[0].expand(3, 128))
    assert (scales.view(torch.uint8) == 0x38).sum() == 3 * 8                               # E4M3 1.0, one per 16
