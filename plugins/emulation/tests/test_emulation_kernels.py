"""The kernels, reached the way an engine reaches them: select_backend -> decision.instantiate().

References are assembled here from the format dequantizers and activation rounding,
which the format-fact and activation tests pin to independent facts.
"""
from __future__ import annotations

import pytest
import torch

from oracle import EmbeddingLayer, KernelConfig, LinearLayer, MoELayer, Platform, select_backend
from oracle_emulation import activations as act
from oracle_emulation.formats import codec_for

from emulation_helpers import LINEAR_MODES, MOE_MODES, linear_tensors, moe_tensors, quantize

CPU = Platform.cpu()
NOTE = "slow path meant for testing"
#: Loose sanity bounds on ||y - x W^T|| / ||x W^T||: the kernel must really quantize, and not too badly.
REL_ERR = {"fp8": 0.08, "mxfp8": 0.08, "q8_0": 0.02, "int4": 0.15, "nvfp4": 0.2, "mxfp4": 0.25, "iq2": 0.5}


def _bound(fmt: str, act_fmt: str) -> float:
    key = next(k for k in REL_ERR if fmt.startswith(k))
    return REL_ERR[key] + (REL_ERR.get(act_fmt, 0.0) if act_fmt != "bf16" else 0.0) + \
        (0.25 if act_fmt == "nvfp4" else 0.0)


def _dequant(fmt: str, q: dict) -> torch.Tensor:
    codec = codec_for(fmt)
    if fmt.startswith("fp8") or fmt in ("mxfp8", "mxfp4"):
        return codec.dequantize(q["weight"], q["weight_scale"], fmt)
    if fmt == "nvfp4":
        return codec.dequantize(q["weight"], q["weight_scale"], q["weight_global_scale"])
    if fmt == "int4":
        return codec.dequantize(q["weight"], q["weight_scale"], q["weight_zero_point"])
    return codec.dequantize(q["weight"], fmt)


def _act_params(weight: str, act_fmt: str, static: torch.Tensor | None) -> dict:
    if act_fmt == "fp8":
        gran = {"fp8_tensor": "tensor", "fp8_channel": "token", "fp8_block": "group"}[weight]
        return {"granularity": gran, **({"scale": static} if static is not None and gran == "tensor" else {})}
    if act_fmt == "nvfp4" and static is not None:
        return {"global_scale": static}
    return {}


@pytest.mark.parametrize("weight, act_fmt", LINEAR_MODES)
def test_linear_every_mode_through_select_backend(weight, act_fmt):
    n, k, m = 64, 512, 8
    layer = LinearLayer(in_features=k, out_features=n, weight_format=weight, activation_format=act_fmt,
                        has_bias=True, dtype="float32")
    decision = select_backend(layer, CPU, KernelConfig(linear_backend="emulation"))
    assert decision.status == "selected" and decision.kernel == "emulation.linear"
    assert (decision.mode_spec.weight, decision.mode_spec.activation) == (weight, act_fmt)
    assert any(NOTE in note for note in decision.notes)
    kernel = decision.instantiate(layer)
    w, b, x = torch.randn(n, k), torch.randn(n), torch.randn(m, k)
    q = quantize(w, weight)
    extra = {}
    static = None
    if weight == "fp8_tensor" and act_fmt == "fp8":
        static = x.abs().max() / 448 * 1.1
        extra["input_scale"] = static
    if act_fmt == "nvfp4":
        static = x.abs().max() / (6 * 448)
        extra["input_global_scale"] = static
    kernel.process_weights(**linear_tensors(q), bias=b, **extra)
    y = kernel.apply(x)
    wd = _dequant(weight, q)
    xq = act.quantize_dequantize(x, act_fmt, **_act_params(weight, act_fmt, static))
    assert torch.allclose(y, xq @ wd.t() + b, rtol=1e-5, atol=1e-5)
    exact = x @ w.t()
    rel = ((y - b - exact).norm() / exact.norm()).item()
    assert rel < _bound(weight, act_fmt)
    if act_fmt != "bf16":                                             # the activations really are rounded
        assert not torch.allclose(y, x @ wd.t() + b, rtol=1e-6, atol=1e-6)


def test_linear_bf16_layer_keeps_bf16_and_leading_dims():
    layer = LinearLayer(in_features=256, out_features=32, weight_format="mxfp4", activation_format="mxfp8")
    kernel = select_backend(layer, CPU).instantiate(layer)
    w = torch.randn(32, 256)
    kernel.process_weights(**quantize(w, "mxfp4"))
    assert kernel.weight.dtype == torch.bfloat16
    x = torch.randn(2, 3, 256, dtype=torch.bfloat16)
    y = kernel.apply(x)
    assert y.dtype == torch.bfloat16 and list(y.shape) == [2, 3, 32]


def test_int4_asymmetric_zero_points_reach_the_kernel():
    layer = LinearLayer(in_features=256, out_features=64, weight_format="int4", group_size=64, dtype="float32")
    kernel = select_backend(layer, CPU).instantiate(layer)
    w = torch.randn(64, 256) + 0.5
    q = quantize(w, "int4", group_size=64, symmetric=False)
    assert q["weight_zero_point"] is not None
    kernel.process_weights(**linear_tensors(q))
    x = torch.randn(4, 256)
    assert torch.allclose(kernel.apply(x), x @ _dequant("int4", q).t(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- golden MoE
def _golden_activation(h: torch.Tensor, name: str, p: dict) -> torch.Tensor:
    """One token's activation, written out from the formulas (not the module under test)."""
    if name in ("relu2", "relu2_no_mul"):
        return torch.where(h > 0, h * h, torch.zeros_like(h))
    if name == "swigluoai":
        gate, up = h[0::2], h[1::2]
    else:
        gate, up = h[: h.numel() // 2], h[h.numel() // 2:]
    sig = lambda v: 1.0 / (1.0 + torch.exp(-v))                       # noqa: E731
    if name == "silu":
        return gate * sig(gate) * up
    if name == "gelu":
        return 0.5 * gate * (1.0 + torch.erf(gate / 2 ** 0.5)) * up
    if name == "situ":
        beta, lb = p.get("beta", 4.0), p.get("linear_beta", 25.0)
        return beta * torch.tanh(gate / beta) * sig(gate) * lb * torch.tanh(up / lb)
    limit, alpha, beta = p.get("limit", 7.0), p.get("alpha", 1.702), p.get("beta", 1.0)
    gate = torch.minimum(gate, torch.tensor(limit))
    up = torch.maximum(torch.minimum(up, torch.tensor(limit)), torch.tensor(-limit))
    return gate * sig(alpha * gate) * (up + beta)


def _golden_moe(x, ids, weights, w13, w2, b13, b2, name, p, on_input=False, qdq=None):
    out = torch.zeros_like(x)
    qdq = qdq or (lambda v, stage: v)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e, r = int(ids[t, j]), float(weights[t, j])
            xin = x[t] * r if on_input else x[t]
            h = w13[e] @ qdq(xin[None], "fc1")[0] + b13[e]
            a = _golden_activation(h, name, p)
            y = w2[e] @ qdq(a[None], "fc2")[0] + b2[e]
            out[t] += y if on_input else r * y
    return out


ACTIVATIONS = [
    ("silu", {}), ("gelu", {}), ("situ", {"beta": 3.0, "linear_beta": 20.0}), ("situ", {}),
    ("swigluoai", {"limit": 5.0, "alpha": 1.5, "beta": 0.5}), ("swigluoai_uninterleave", {}),
    ("relu2", {}), ("relu2_no_mul", {}),
]


def _moe_layer(weight, act_fmt, activation="silu", params=None, **kw):
    base = dict(num_experts=4, top_k=2, hidden_size=256, intermediate_size=256, weight_format=weight,
                activation_format=act_fmt, activation=activation, activation_params=params or {},
                dtype="float32")
    base.update(kw)
    return MoELayer(**base)


def _routing(m, e, k, gen):
    logits = torch.randn(m, e, generator=gen)
    weights, ids = torch.topk(torch.softmax(logits, -1), k, dim=-1)
    return weights.float(), ids.to(torch.int32)


@pytest.mark.parametrize("activation, params", ACTIVATIONS)
@pytest.mark.parametrize("on_input", [False, True])
def test_golden_moe_every_activation(activation, params, on_input):
    gen = torch.Generator().manual_seed(3)
    layer = _moe_layer("mxfp8", "bf16", activation, params, has_bias=True,
                       apply_router_weight_on_input=on_input, hidden_size=64, intermediate_size=32)
    decision = select_backend(layer, CPU, KernelConfig(moe_backend="emulation"))
    assert decision.kernel == "emulation.moe" and any(NOTE in note for note in decision.notes)
    kernel = decision.instantiate(layer)
    rows = 64 if activation not in ("relu2", "relu2_no_mul") else 32
    w13, w2 = torch.randn(4, rows, 64, generator=gen) * 0.3, torch.randn(4, 64, 32, generator=gen) * 0.3
    b13, b2 = torch.randn(4, rows, generator=gen), torch.randn(4, 64, generator=gen)
    q13, q2 = quantize(w13, "mxfp8"), quantize(w2, "mxfp8")
    kernel.process_weights(**moe_tensors(q13, q2), w13_bias=b13, w2_bias=b2)
    x = torch.randn(7, 64, generator=gen) * 2.0
    weights, ids = _routing(7, 4, 2, gen)
    y = kernel.apply(x, weights, ids)
    ref = _golden_moe(x, ids, weights, _dequant("mxfp8", q13), _dequant("mxfp8", q2), b13, b2,
                      activation, params, on_input)
    assert torch.allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("weight, act_fmt", MOE_MODES)
def test_moe_every_mode_matches_the_golden_loop(weight, act_fmt):
    gen = torch.Generator().manual_seed(5)
    layer = _moe_layer(weight, act_fmt)
    decision = select_backend(layer, CPU, KernelConfig(moe_backend="emulation"))
    assert (decision.mode_spec.weight, decision.mode_spec.activation) == (weight, act_fmt)
    kernel = decision.instantiate(layer)
    w13, w2 = torch.randn(4, 512, 256, generator=gen) * 0.1, torch.randn(4, 256, 256, generator=gen) * 0.1
    kw = {"symmetric": True} if weight == "int4" else {}
    q13, q2 = quantize(w13, weight, **kw), quantize(w2, weight, **kw)
    tensors = moe_tensors(q13, q2)
    x = torch.randn(6, 256, generator=gen)
    scales = {}
    if act_fmt == "fp8" and weight == "fp8_tensor":
        # per-expert static scales: activations are quantized once, with the largest of them
        tensors.update(w13_input_scale=torch.full((4,), 0.02), w2_input_scale=torch.tensor([0.006, 0.011, 0.001, 0.001]))
        scales = {"fc1": torch.tensor(0.02), "fc2": torch.tensor(0.011)}
    if act_fmt == "nvfp4":
        scales = {"fc1": torch.tensor(0.002), "fc2": torch.tensor(0.001)}
        tensors.update(w13_input_scale=torch.full((4,), 0.002), w2_input_scale=torch.full((4,), 0.001))
    kernel.process_weights(**tensors)
    weights, ids = _routing(6, 4, 2, gen)
    y = kernel.apply(x, weights, ids)

    def qdq(v, stage):
        return act.quantize_dequantize(v, act_fmt, **_act_params(weight, act_fmt, scales.get(stage)))
    ref = _golden_moe(x, ids, weights, _dequant(weight, q13), _dequant(weight, q2),
                      torch.zeros(4, 512), torch.zeros(4, 256), "silu", {}, qdq=qdq)
    assert torch.allclose(y, ref, rtol=1e-4, atol=1e-5)


def test_moe_with_few_experts_hit_matches_the_golden_loop():
    # 3 of 16 experts receive tokens: the kernel gathers just their weights
    gen = torch.Generator().manual_seed(11)
    layer = _moe_layer("nvfp4", "bf16", num_experts=16, hidden_size=64, intermediate_size=32, has_bias=True)
    kernel = select_backend(layer, CPU, KernelConfig(moe_backend="emulation")).instantiate(layer)
    q13, q2 = quantize(torch.randn(16, 64, 64, generator=gen), "nvfp4"), quantize(torch.randn(16, 64, 32, generator=gen), "nvfp4")
    b13, b2 = torch.randn(16, 64, generator=gen), torch.randn(16, 64, generator=gen)
    kernel.process_weights(**moe_tensors(q13, q2), w13_bias=b13, w2_bias=b2)
    x = torch.randn(5, 64, generator=gen)
    ids = torch.tensor([[3, 9], [9, 14], [3, 14], [14, 3], [9, 3]], dtype=torch.int32)
    weights = torch.rand(5, 2, generator=gen)
    y = kernel.apply(x, weights, ids)
    ref = _golden_moe(x, ids, weights, _dequant("nvfp4", q13), _dequant("nvfp4", q2), b13, b2, "silu", {})
    assert torch.allclose(y, ref, rtol=1e-4, atol=1e-4)
    assert torch.equal(kernel.apply(x[:0], weights[:0], ids[:0]), torch.zeros(0, 64))


def test_moe_bf16_gpt_oss_like_layer_runs_w4a8():
    layer = MoELayer(num_experts=8, top_k=4, hidden_size=256, intermediate_size=128, weight_format="mxfp4",
                     activation="swigluoai", has_bias=True)
    decision = select_backend(layer, CPU)
    assert decision.backend == "emulation" and decision.activation_format == "mxfp8"
    kernel = decision.instantiate(layer)
    q13, q2 = quantize(torch.randn(8, 256, 256) * 0.05, "mxfp4"), quantize(torch.randn(8, 256, 128) * 0.05, "mxfp4")
    kernel.process_weights(**moe_tensors(q13, q2), w13_bias=torch.zeros(8, 256, dtype=torch.bfloat16),
                           w2_bias=torch.zeros(8, 256, dtype=torch.bfloat16))
    x = torch.randn(5, 256, dtype=torch.bfloat16)
    weights, ids = _routing(5, 8, 4, torch.Generator().manual_seed(0))
    y = kernel.apply(x, weights, ids.long())
    assert y.dtype == torch.bfloat16 and list(y.shape) == [5, 256] and bool(torch.isfinite(y).all())


# ---------------------------------------------------------------------------- embedding
def test_q8_0_embedding_lookup():
    layer = EmbeddingLayer(num_embeddings=100, embedding_dim=64, weight_format="q8_0")
    decision = select_backend(layer, CPU)
    assert decision.kernel == "emulation.embedding" and any(NOTE in note for note in decision.notes)
    kernel = decision.instantiate(layer)
    table = torch.randn(100, 64)
    q = quantize(table, "q8_0")
    kernel.process_weights(**q)
    ids = torch.tensor([[0, 5], [99, 5]])
    out = kernel.apply(ids)
    ref = _dequant("q8_0", q).bfloat16()
    assert out.dtype == torch.bfloat16 and torch.equal(out, ref[ids])


def test_float_embeddings_are_unquantized_and_never_reach_a_kernel():
    for fmt in ("bf16", "fp16"):
        decision = select_backend(EmbeddingLayer(num_embeddings=10, embedding_dim=32, weight_format=fmt), CPU)
        assert decision.status == "unquantized" and decision.kernel is None
