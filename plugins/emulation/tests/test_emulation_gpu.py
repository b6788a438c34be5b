"""The same code on CUDA tensors: results match the CPU, and nothing falls back to the CPU.

All tests here are marked `gpu` and skip cleanly when no CUDA device is present.
"""
from __future__ import annotations

import pytest
import torch

from oracle import KernelConfig, LinearLayer, MoELayer, Platform, select_backend
from oracle_emulation import activations as act
from oracle_emulation.formats import codec_for

from emulation_helpers import LINEAR_MODES, linear_tensors, moe_tensors, quantize

pytestmark = pytest.mark.gpu
CPU = Platform.cpu()


def _to(d: dict, device) -> dict:
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in d.items()}


@pytest.mark.parametrize("fmt", ["fp8_tensor", "fp8_channel", "fp8_block", "mxfp8", "mxfp4", "nvfp4", "int4",
                                 "q8_0", "iq2_xs", "iq2_xxs"])
def test_quantize_and_dequantize_on_cuda_match_the_cpu(fmt):
    w = torch.randn(128, 512)
    q_cpu = quantize(w, fmt)
    q_gpu = quantize(w.cuda(), fmt)
    for key, value in q_cpu.items():
        if value is None:
            assert q_gpu[key] is None
            continue
        assert q_gpu[key].is_cuda
        a = value.view(torch.uint8) if value.dtype == torch.float8_e4m3fn else value
        b = q_gpu[key].cpu()
        b = b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b
        if fmt in ("iq2_xs", "iq2_xxs"):            # argmin ties may resolve differently; decode instead
            continue
        assert torch.equal(a, b), key
    codec = codec_for(fmt)
    args = [v for k, v in q_gpu.items() if k != "weight"]
    if fmt in ("q8_0", "iq2_xs", "iq2_xxs"):
        deq = codec.dequantize(q_gpu["weight"], fmt)
        ref = codec.dequantize(q_gpu["weight"].cpu(), fmt)
    else:
        deq = codec.dequantize(q_gpu["weight"], *args, fmt)
        ref = codec.dequantize(q_gpu["weight"].cpu(), *[a.cpu() if a is not None else None for a in args], fmt)
    assert deq.is_cuda and torch.equal(deq.cpu(), ref)


ACT_CASES = [("fp8", {"granularity": "tensor"}), ("fp8", {"granularity": "token"}), ("fp8", {"granularity": "group"}),
             ("fp8", {"scale": torch.tensor(0.01)}), ("mxfp8", {}), ("mxfp4", {}), ("nvfp4", {}),
             ("nvfp4", {"global_scale": torch.tensor(0.003)})]


@pytest.mark.parametrize("fmt, params", ACT_CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_triton_activation_rounding_is_bit_exact_with_the_cpu(fmt, params, dtype):
    # the same IEEE divisions and ties-to-even roundings: identical bits, also for bf16 output
    x = (torch.randn(64, 1024) * torch.exp2(torch.randint(-8, 9, (64, 1)).float())).to(dtype)
    x[0, :64] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 8, dtype=dtype)
    out = act.quantize_dequantize(x.cuda(), fmt, **_to(params, "cuda"))
    assert out.is_cuda and out.dtype == dtype
    assert not act._TRITON_FAILED, "the Triton kernel failed and the eager path ran"
    assert torch.equal(out.cpu(), act.quantize_dequantize(x, fmt, **params))


@pytest.mark.parametrize("weight, act_fmt", LINEAR_MODES)
def test_linear_on_cuda_matches_cpu_and_stays_on_cuda(weight, act_fmt):
    n, k = 128, 512
    layer = LinearLayer(in_features=k, out_features=n, weight_format=weight, activation_format=act_fmt,
                        dtype="float32")
    decision = select_backend(layer, CPU, KernelConfig(linear_backend="emulation"))
    w, x = torch.randn(n, k), torch.randn(16, k)
    q = linear_tensors(quantize(w, weight))
    cpu, gpu = decision.instantiate(layer), decision.instantiate(layer)
    cpu.process_weights(**q)
    gpu.process_weights(**_to(q, "cuda"))
    assert gpu.weight.is_cuda
    y = gpu.apply(x.cuda())
    assert y.is_cuda
    ref = cpu.apply(x)
    # same rounding; cuBLAS vs CPU summation order, and (A8/A4) a rare tie flipped by GPU division
    assert ((y.cpu() - ref).norm() / ref.norm()).item() < 1e-3
    if act_fmt == "bf16":
        assert torch.allclose(y.cpu(), ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())
    with pytest.raises(ValueError, match="x: expected a tensor on cuda"):
        gpu.apply(x)                                                 # no silent CPU fallback


def test_moe_on_cuda_matches_cpu():
    layer = MoELayer(num_experts=8, top_k=2, hidden_size=256, intermediate_size=128, weight_format="mxfp4",
                     activation="swigluoai_uninterleave", has_bias=True)
    decision = select_backend(layer, CPU, KernelConfig(moe_backend="emulation"))
    assert decision.activation_format == "mxfp8"
    q = moe_tensors(quantize(torch.randn(8, 256, 256) * 0.1, "mxfp4"), quantize(torch.randn(8, 256, 128) * 0.1, "mxfp4"))
    b = {"w13_bias": torch.randn(8, 256) * 0.1, "w2_bias": torch.randn(8, 256) * 0.1}
    cpu, gpu = decision.instantiate(layer), decision.instantiate(layer)
    cpu.process_weights(**q, **b)
    gpu.process_weights(**_to(q, "cuda"), **_to(b, "cuda"))
    x = torch.randn(33, 256, dtype=torch.bfloat16)
    weights, ids = torch.topk(torch.softmax(torch.randn(33, 8), -1), 2, dim=-1)
    y = gpu.apply(x.cuda(), weights.cuda(), ids.cuda())
    ref = cpu.apply(x, weights, ids)
    assert y.is_cuda and y.dtype == torch.bfloat16
    rel = ((y.cpu().float() - ref.float()).norm() / ref.float().norm()).item()
    assert rel < 2e-2
