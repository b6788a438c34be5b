"""oracle::linear / oracle::moe / oracle::embedding: opaque custom ops over registered kernels.

Reference: the same kernel's eager `apply` (the op must be a pure pass-through); under
torch.compile (fullgraph, so any graph break fails) the compiled function must give the same
tensors bit for bit, and the op's fake implementation the same shape and dtype as the real one.
"""
from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")

from oracle import EmbeddingLayer, LinearLayer, MoELayer, Platform, select_backend  # noqa: E402
from oracle.integration import ops  # noqa: E402
from oracle_emulation.formats import codec_for  # noqa: E402

CPU = Platform.cpu()


def _linear(n=64, k=256, fmt="fp8_block", act="fp8"):
    layer = LinearLayer(name="q", in_features=k, out_features=n, weight_format=fmt, activation_format=act)
    kernel = select_backend(layer, CPU).instantiate(layer)
    q = codec_for(fmt).quantize(torch.randn(n, k) * 0.05, fmt)
    kernel.process_weights(weight=q["weight"], weight_scale=q["weight_scale"])
    return kernel


def _moe(e=8, k=2, h=128, i=64):
    layer = MoELayer(name="experts", num_experts=e, top_k=k, hidden_size=h, intermediate_size=i,
                     weight_format="mxfp4", activation_format="bf16")
    kernel = select_backend(layer, CPU).instantiate(layer)
    w13 = codec_for("mxfp4").quantize(torch.randn(e, 2 * i, h) * 0.05, "mxfp4")
    w2 = codec_for("mxfp4").quantize(torch.randn(e, h, i) * 0.05, "mxfp4")
    kernel.process_weights(w13=w13["weight"], w13_scale=w13["weight_scale"], w2=w2["weight"],
                           w2_scale=w2["weight_scale"])
    return kernel


def _block(lin, moe):
    """A toy decoder block: linear -> router top-k -> moe -> residual, all through the ops."""
    hl, hm = ops.register(lin), ops.register(moe)
    router = torch.randn(moe.layer.hidden_size, moe.layer.num_experts)

    def f(x, _keep=(lin, moe)):       # the registry holds kernels weakly: the caller owns them
        h = torch.ops.oracle.linear(x, hl)
        logits = h.float() @ router
        w, idx = torch.topk(logits.softmax(-1), moe.layer.top_k, dim=-1)
        return h + torch.ops.oracle.moe(h, w, idx, hm)
    return f


def test_ops_are_a_pass_through_to_apply():
    lin, moe = _linear(n=128), _moe()
    x = torch.randn(5, 256, dtype=torch.bfloat16)
    h = ops.register(lin)
    assert torch.equal(torch.ops.oracle.linear(x, h), lin.apply(x))
    y = torch.ops.oracle.linear(x.view(5, 1, 256), h)
    assert y.shape == (5, 1, 128) and y.dtype == torch.bfloat16
    hm = ops.register(moe)
    hs = torch.randn(3, 128, dtype=torch.bfloat16)
    ids, w = torch.tensor([[0, 3], [7, 1], [2, 2]]), torch.rand(3, 2)
    assert torch.equal(torch.ops.oracle.moe(hs, w, ids, hm), moe.apply(hs, w, ids))


@pytest.mark.parametrize("m", [1, 8])
def test_compiled_block_equals_eager(m):
    torch._dynamo.reset()
    f = _block(_linear(n=128), _moe())
    x = torch.randn(m, 256, dtype=torch.bfloat16)
    compiled = torch.compile(f, fullgraph=True, backend="inductor")
    assert torch.equal(compiled(x), f(x))


def test_fake_implementation_matches_the_real_output():
    from torch._subclasses.fake_tensor import FakeTensorMode

    lin, moe = _linear(n=64), _moe()
    hl, hm = ops.register(lin), ops.register(moe)
    x, hs = torch.randn(2, 3, 256, dtype=torch.bfloat16), torch.randn(4, 128)
    ids, w = torch.zeros(4, 2, dtype=torch.long), torch.ones(4, 2)
    real_l, real_m = torch.ops.oracle.linear(x, hl), torch.ops.oracle.moe(hs, w, ids, hm)
    with FakeTensorMode() as mode:
        fl = torch.ops.oracle.linear(mode.from_tensor(x), hl)
        fm = torch.ops.oracle.moe(mode.from_tensor(hs), mode.from_tensor(w), mode.from_tensor(ids), hm)
    assert (fl.shape, fl.dtype) == (real_l.shape, real_l.dtype)
    assert (fm.shape, fm.dtype) == (real_m.shape, real_m.dtype)
    torch.library.opcheck(torch.ops.oracle.linear.default, (x, hl))
    torch.library.opcheck(torch.ops.oracle.moe.default, (hs, w, ids, hm))


def test_embedding_op():
    layer = EmbeddingLayer(name="embed", num_embeddings=32, embedding_dim=64, weight_format="q8_0")
    kernel = select_backend(layer, CPU).instantiate(layer)
    q = codec_for("q8_0").quantize(torch.randn(32, 64), "q8_0")
    kernel.process_weights(weight=q["weight"])
    h = ops.register(kernel)
    ids = torch.tensor([[1, 5, 31]])
    assert torch.equal(torch.ops.oracle.embedding(ids, h), kernel.apply(ids).to(torch.bfloat16))


def test_registry_holds_kernels_weakly_and_names_unknown_handles():
    h = ops.register(_linear())
    gc.collect()
    with pytest.raises(KeyError, match=f"handle {h}: no kernel registered"):
        ops.kernel(h)
    lin = _linear()
    h = ops.register(lin)
    assert ops.kernel(h) is lin
    ops.unregister(h)
    with pytest.raises(KeyError):
        torch.ops.oracle.linear(torch.randn(1, 256), h)
