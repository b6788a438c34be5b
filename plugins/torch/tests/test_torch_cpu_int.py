"""torch's CPU integer kernels as oracle-torch kernels (oracle_torch.cpu_int): numerics against
oracle-emulation and against float64 products of the same quantized operands, what the engine
selects on a CPU, and bad input.

Tolerances:
- W8A16 (aten._weight_int8pack_mm, K a multiple of 16: other K crash it): the operator sums x * q in float32 and scales the sum; the
  emulation rounds each q * scale to bf16 first. Relative Frobenius error measured 1.5-2.5e-3
  against the emulation; bound 1e-2. Against float64 of the same operands: bf16 output rounding only
  (2**-9 relative per value), bound 4e-3.
- W8A8 (torch._int_mm): the int32 sum is exact; the emulation rounds its dequantized activations
  and weights to bf16 and multiplies those. Bound 1e-2 against the emulation; the activation codes
  and scales themselves are compared exactly with the emulation's quantizer.
- int4 (aten._weight_int4pack_mm_for_cpu): see test_torch_tinygemm.py (same arithmetic); here
  the symmetric case with bf16 scales, where tinygemm's weight is exactly the emulation's.
A wrong layout (weights transposed, scales per the wrong axis) gives errors of order 1.
"""
from __future__ import annotations

import pytest
import torch
from oracle_emulation.activations import quantize_dequantize
from oracle_emulation.formats import codec_for
from oracle_emulation.linear import EmulationLinear

from oracle import LinearLayer, Platform, select_backend
from oracle.catalog import Mode
from oracle.errors import TensorError
from oracle_torch import cpu_int
from oracle_torch.cpu_int import (TorchCpuInt4Linear, TorchInt8DynamicLinear, TorchInt8WeightLinear,
                                  quantize_per_token)

TOLERANCE = 1e-2
W8A16 = Mode(weight="int8", activation="bf16", name="w8a16_int8")
W8A8 = Mode(weight="int8", activation="int8", name="w8a8_int8")
W4A16 = Mode(weight="int4", activation="bf16", name="w4a16_int4")


def _layer(n, k, fmt="int8", group=None, dtype="bfloat16"):
    return LinearLayer(name="model.layers.0.mlp.down_proj", in_features=k, out_features=n, weight_format=fmt,
                       group_size=group, dtype=dtype)


def _int8(n, k, group=None):
    """Per-channel scales [N, 1], or [N, K/group] (compressed-tensors' W8A16 preset: groups of 128)."""
    return codec_for("int8").quantize(torch.randn(n, k) * 0.05, "int8", group_size=group)


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def _pair(cls, mode, n, k, bias=False):
    layer, tensors = _layer(n, k), _int8(n, k)
    if bias:
        tensors["bias"] = torch.randn(n).to(torch.bfloat16)
    ref = EmulationLinear(layer, mode, None)
    ref.process_weights(**tensors)
    fast = cls(layer, mode, None)
    fast.process_weights(**tensors)
    return fast, ref, tensors


@pytest.mark.parametrize("cls,mode", [(TorchInt8WeightLinear, W8A16), (TorchInt8DynamicLinear, W8A8)],
                         ids=["w8a16", "w8a8"])
@pytest.mark.parametrize("n,k", [(64, 96), (256, 512), (24, 48), (7, 16)])
def test_int8_kernels_agree_with_emulation(cls, mode, n, k):
    fast, ref, _ = _pair(cls, mode, n, k)
    for m in (1, 5, 33):
        x = torch.randn(m, k).to(torch.bfloat16)
        y = fast.apply(x)
        assert y.dtype == torch.bfloat16 and y.shape == (m, n)
        assert _rel(y, ref.apply(x)) < TOLERANCE


@pytest.mark.parametrize("n,k,group", [(64, 256, 128), (48, 896, 128), (32, 96, 32), (16, 64, 16)])
def test_grouped_w8a16_agrees_with_emulation_and_float64(n, k, group):
    layer, t = _layer(n, k, group=group), _int8(n, k, group)
    assert list(t["weight_scale"].shape) == [n, k // group]
    ref = EmulationLinear(layer, W8A16, None)
    ref.process_weights(**t)
    fast = TorchInt8WeightLinear(layer, W8A16, None)
    fast.process_weights(**t)
    assert fast.q.dtype == torch.int8 and fast.q.numel() == n * k            # one byte a weight, one copy
    assert torch.equal(fast.weight, ref.weight)
    x = torch.randn(5, k).to(torch.bfloat16)
    y = fast.apply(x)
    assert y.dtype == torch.bfloat16 and _rel(y, ref.apply(x)) < TOLERANCE
    w = t["weight"].double().unflatten(-1, (-1, group)) * t["weight_scale"].double()[..., None]
    assert _rel(y, x.double() @ w.flatten(-2).t()) < 4e-3


def test_w8a16_is_the_float64_product_of_its_operands():
    fast, _, t = _pair(TorchInt8WeightLinear, W8A16, 128, 256)
    x = torch.randn(7, 256).to(torch.bfloat16)
    want = x.double() @ (t["weight"].double() * t["weight_scale"].double()).t()
    assert _rel(fast.apply(x), want) < 4e-3


def test_w8a8_is_the_float64_product_of_its_quantized_operands():
    fast, _, t = _pair(TorchInt8DynamicLinear, W8A8, 128, 256)
    x = torch.randn(7, 256).to(torch.bfloat16)
    xq, sx = quantize_per_token(x)
    want = (xq.double() * sx.double()) @ (t["weight"].double() * t["weight_scale"].double()).t()
    assert _rel(fast.apply(x), want) < 4e-3


def test_per_token_codes_are_the_emulations():
    """The activation quantizer rounds exactly as oracle-emulation's int8 mode (float32 in, float32 out)."""
    x = torch.randn(9, 200) * torch.logspace(-3, 2, 9)[:, None]
    x[3] = 0.0                                                   # an all-zero row: scale 1, codes 0
    xq, sx = quantize_per_token(x)
    assert xq.dtype == torch.int8 and int(xq.abs().max()) <= 127
    assert torch.equal(xq.float() * sx, quantize_dequantize(x, "int8"))


def test_weight_is_the_dequantized_matrix():
    for cls, mode in ((TorchInt8WeightLinear, W8A16), (TorchInt8DynamicLinear, W8A8)):
        fast, ref, _ = _pair(cls, mode, 48, 64)
        assert torch.equal(fast.weight, ref.weight)


def test_bias_leading_dims_float32_input_and_empty_batch():
    for cls, mode in ((TorchInt8WeightLinear, W8A16), (TorchInt8DynamicLinear, W8A8)):
        fast, ref, _ = _pair(cls, mode, 48, 256, bias=True)
        x = torch.randn(2, 3, 256)
        assert fast.apply(x).shape == (2, 3, 48)
        assert _rel(fast.apply(x), ref.apply(x.to(torch.bfloat16))) < TOLERANCE
        assert fast.apply(torch.randn(0, 256)).shape == (0, 48)


def test_a_transposed_weight_is_caught_by_the_comparison():
    """The comparisons have teeth: the right bytes in the wrong layout give an error of order 1."""
    fast, ref, t = _pair(TorchInt8WeightLinear, W8A16, 64, 64)
    wrong = TorchInt8WeightLinear(_layer(64, 64), W8A16, None)
    wrong.process_weights(weight=t["weight"].t().contiguous(), weight_scale=t["weight_scale"])
    x = torch.randn(4, 64).to(torch.bfloat16)
    assert _rel(wrong.apply(x), ref.apply(x)) > 0.5


def test_int4_symmetric_weight_is_the_emulations_and_output_agrees():
    n, k, group = 96, 256, 64
    layer = _layer(n, k, "int4", group)
    q = codec_for("int4").quantize(torch.randn(n, k) * 0.05, "int4", group_size=group, symmetric=True)
    tensors = {name: t for name, t in q.items() if t is not None}
    tensors["weight_scale"] = tensors["weight_scale"].to(torch.bfloat16).to(torch.float16)   # bf16-exact scales
    ref = EmulationLinear(layer, W4A16, None)
    ref.process_weights(**tensors)
    fast = TorchCpuInt4Linear(layer, W4A16, None)
    fast.process_weights(**tensors)
    assert fast.packed.dtype == torch.uint8 and fast.packed.numel() == n * k // 2     # 4 bits a weight
    assert torch.equal(fast.weight, ref.weight)
    x = torch.randn(5, k).to(torch.bfloat16)
    assert _rel(fast.apply(x), ref.apply(x)) < TOLERANCE


@pytest.mark.parametrize("n,k", [(64, 128), (80, 128), (112, 256), (176, 256), (16, 64), (4864, 896),
                                 (896, 4864)])
def test_direct_int4_packing_gives_the_operators_bytes(n, k):
    """pack_int4_for_cpu (bytes to bytes) against aten._convert_weight_to_int4pack_for_cpu on the same words
    widened to int32 nibbles: full 64-row blocks and 16/32/48-row tails. On a CPU build with another layout
    the kernel does not use it (direct_int4_packing() is False) and this comparison is what says why."""
    from oracle.tensors import unpack_nibbles

    if not cpu_int.direct_int4_packing():
        pytest.skip(f"this torch's CPU int4 layout ({torch.backends.cpu.get_cpu_capability()}) is not the "
                    "AVX-512 one: the operator packs")
    words = torch.randint(-2 ** 31, 2 ** 31 - 1, (n, k // 8), dtype=torch.int32)
    nibbles = unpack_nibbles(words.t(), dim=0).t().contiguous()
    assert torch.equal(cpu_int.pack_int4_for_cpu(words), torch.ops.aten._convert_weight_to_int4pack_for_cpu(nibbles, 8))


def test_int4_kernel_packed_directly_computes_what_the_operator_packing_computes():
    from oracle_torch.tinygemm import TorchTinyGemmInt4Linear

    n, k, group = 208, 512, 128
    layer = _layer(n, k, "int4", group)
    q = codec_for("int4").quantize(torch.randn(n, k) * 0.05, "int4", group_size=group, symmetric=False)
    tensors = {name: t for name, t in q.items() if t is not None}
    fast, plain = TorchCpuInt4Linear(layer, W4A16, None), TorchTinyGemmInt4Linear(layer, W4A16, None)
    fast.process_weights(**tensors)
    plain.process_weights(**tensors)                      # the base class: unpack to int32, then the operator
    assert torch.equal(fast.packed, plain.packed)
    x = torch.randn(3, k).to(torch.bfloat16)
    assert torch.equal(fast.apply(x), plain.apply(x))


@pytest.mark.parametrize("tensors,match", [
    (lambda t: {**t, "weight_scale": t["weight_scale"].reshape(1, -1)}, "one scale per output channel"),
    (lambda t: {**t, "weight_scale": torch.ones(64, 3)}, "one scale per output channel"),
    (lambda t: {**t, "weight": t["weight"].float()}, "int8"),
    (lambda t: {**t, "weight_zero_point": torch.zeros(64, 1, dtype=torch.int8)}, "symmetric"),
    (lambda t: {**t, "input_scale": torch.ones(())}, "no static activation scale"),
    (lambda t: {**t, "weight_scale": torch.full((64, 1), float("nan"))}, "finite"),
])
def test_bad_tensors_are_refused_with_the_name(tensors, match):
    t = _int8(64, 64)
    for cls, mode in ((TorchInt8WeightLinear, W8A16), (TorchInt8DynamicLinear, W8A8)):
        with pytest.raises(TensorError, match=match):
            cls(_layer(64, 64), mode, None).process_weights(**tensors(t))


def test_w8a16_refuses_k_the_operator_cannot_read():
    """K = 40 crashes aten._weight_int8pack_mm (SIGSEGV) in torch 2.13: refused before it is ever called."""
    t = _int8(24, 40)
    with pytest.raises(TensorError, match="divisible by 16"):
        TorchInt8WeightLinear(_layer(24, 40), W8A16, None).process_weights(**t)
    w8a8 = TorchInt8DynamicLinear(_layer(24, 40), W8A8, None)       # torch._int_mm takes any K
    w8a8.process_weights(**t)
    assert w8a8.apply(torch.randn(3, 40)).shape == (3, 24)


def test_apply_before_process_weights_says_so():
    with pytest.raises(RuntimeError, match="process_weights"):
        TorchInt8DynamicLinear(_layer(8, 8), W8A8, None).apply(torch.zeros(1, 8))


# ---------------------------------------------------------------- what the engine picks on a CPU
@pytest.mark.parametrize("fmt,act,group,dtype,k,kernel", [
    ("int4", None, 128, "bfloat16", 896, "torch.linear.int4_cpu"),
    ("int8", None, None, "bfloat16", 896, "torch.linear.int8_weight_cpu"),
    ("int8", "int8", None, "bfloat16", 896, "torch.linear.int8_cpu"),
    ("int8", None, 128, "bfloat16", 896, "torch.linear.int8_weight_cpu"),  # compressed-tensors' W8A16 preset
    ("int8", None, 8, "bfloat16", 896, "emulation.linear"),     # groups of 8: the operator reads K by 16
    ("int8", "int8", 128, "bfloat16", 896, "emulation.linear"), # W8A8 with groups: _int_mm has one scale a row
    ("int8", None, None, "bfloat16", 904, "emulation.linear"),  # K not a multiple of 16 (W8A16 operator)
    ("int8", "int8", None, "bfloat16", 904, "torch.linear.int8_cpu"),
    ("int4", None, 128, "float16", 896, "emulation.linear"),    # tinygemm takes bfloat16 activations only
    ("int4", None, None, "bfloat16", 904, "emulation.linear"),  # K not in whole pairs of 16-wide K tiles
])
def test_cpu_selection(fmt, act, group, dtype, k, kernel):
    layer = LinearLayer(name="m", in_features=k, out_features=4864, weight_format=fmt, group_size=group,
                        activation_format=act, dtype=dtype)
    decision = select_backend(layer, Platform.cpu())
    assert decision.status == "selected" and decision.kernel == kernel, decision.explain(layer)


def test_int4_cpu_refuses_what_its_operators_refuse():
    """N not a multiple of 16 (the CPU packing's tile) and groups that do not tile K leave tinygemm out."""
    narrow = LinearLayer(name="m", in_features=256, out_features=24, weight_format="int4", group_size=128)
    assert select_backend(narrow, Platform.cpu()).kernel == "emulation.linear"
    ragged = LinearLayer(name="m", in_features=96, out_features=64, weight_format="int4", group_size=64)
    decision = select_backend(ragged, Platform.cpu())
    why = [c.reason for c in decision.candidates if c.kernel == "torch.linear.int4_cpu"]
    assert why and "INT4 groups of 64 must tile K = 96 exactly" in why[0]


def test_not_declared_for_a_gpu():
    """The CPU kernels never serve a GPU: there W8A8 goes to torch.linear.int8 (torch._int_mm on CUDA,
    test_torch_int8_gpu.py) and grouped W8A16 to oracle-emulation."""
    served = {None: "emulation.linear", "int8": "torch.linear.int8"}
    for act, kernel in served.items():
        layer = LinearLayer(name="m", in_features=896, out_features=4864, weight_format="int8",
                            activation_format=act, group_size=None if act else 128)
        decision = select_backend(layer, Platform.preset("h200"))
        assert decision.kernel == kernel, decision.kernel


def test_runtime_check_finds_the_cpu_operators():
    class Spec:
        name = ""
    for name in cpu_int.CPU_OPS:
        Spec.name = name
        assert cpu_int.check(Spec, Platform.cpu()) == (True, None)
    Spec.name = "torch.linear.unknown"
    assert cpu_int.check(Spec, Platform.cpu())[0] is False
