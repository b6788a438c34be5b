"""Adapters of the dialects no CPU library writes here (GPTQ, AWQ, ModelOpt): hand-packed tensors.

The packed words are built bit by bit in Python from the dialects' definitions (GPTQ: 8 nibbles
per int32 along K, zeros stored minus one; AWQ: along N in the order 0,2,4,6,1,3,5,7; ModelOpt
NVFP4: weight_scale_2 multiplies), and the expected values are (q - zero) * scale written out.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from oracle.checkpoints import CheckpointError, DictSource, adapter_for  # noqa: E402
from oracle.layer import LinearLayer, MoELayer  # noqa: E402

K, N, G = 32, 16, 16


def word(values: list[int], order=range(8)) -> int:
    """Nibble i of the int32 holds values[order[i]] (bits 4i..4i+3), as a signed int32."""
    w = sum((values[o] & 0xF) << (4 * i) for i, o in enumerate(order))
    return w - 2 ** 32 if w >= 2 ** 31 else w


def gptq_unpack(words: torch.Tensor, rows: int) -> torch.Tensor:
    """Kernel int4 layout [K/8, N] -> [K, N] nibbles, element by element."""
    out = torch.zeros(rows, words.shape[1], dtype=torch.int64)
    for r in range(rows):
        for c in range(words.shape[1]):
            out[r, c] = (int(words[r // 8, c]) >> (4 * (r % 8))) & 0xF
    return out


@pytest.fixture
def ints():
    g = torch.Generator().manual_seed(0)
    q = torch.randint(0, 16, (K, N), generator=g)
    z = torch.randint(0, 16, (K // G, N), generator=g)
    s = (torch.rand(K // G, N, generator=g) + 0.5).to(torch.float16)
    return q, z, s


def layer(n=N, k=K, group=G):
    return LinearLayer(name="m", in_features=k, out_features=n, weight_format="int4", group_size=group)


def test_gptq_v1_zeros_are_stored_minus_one(ints):
    q, z, s = ints
    qweight = torch.tensor([[word(q[8 * r:8 * r + 8, c].tolist()) for c in range(N)] for r in range(K // 8)],
                           dtype=torch.int32)
    qzeros = torch.tensor([[word([(v - 1) for v in z[gi, 8 * j:8 * j + 8].tolist()]) for j in range(N // 8)]
                           for gi in range(K // G)], dtype=torch.int32)
    src = DictSource({"m.qweight": qweight, "m.qzeros": qzeros, "m.scales": s,
                      "m.g_idx": torch.arange(K, dtype=torch.int32) // G})
    args = adapter_for("gptq").linear(src, layer(), [("m", N)])
    assert torch.equal(args["weight"], qweight)
    assert torch.equal(gptq_unpack(args["weight_zero_point"].t().contiguous(), N).t()[:, :], z)


def test_gptq_act_order_is_refused_with_the_reason(ints):
    q, z, s = ints
    src = DictSource({"m.qweight": torch.zeros(K // 8, N, dtype=torch.int32),
                      "m.qzeros": torch.zeros(K // G, N // 8, dtype=torch.int32), "m.scales": s,
                      "m.g_idx": torch.randperm(K, generator=torch.Generator().manual_seed(1)).int() // G})
    with pytest.raises(CheckpointError, match="m.g_idx.*act-order"):
        adapter_for("gptq").linear(src, layer(), [("m", N)])


def test_awq_order_along_n_becomes_gptq_order_along_k(ints):
    q, z, s = ints
    order = (0, 2, 4, 6, 1, 3, 5, 7)
    qweight = torch.tensor([[word(q[r, 8 * j:8 * j + 8].tolist(), order) for j in range(N // 8)] for r in range(K)],
                           dtype=torch.int32)
    qzeros = torch.tensor([[word(z[gi, 8 * j:8 * j + 8].tolist(), order) for j in range(N // 8)]
                           for gi in range(K // G)], dtype=torch.int32)
    args = adapter_for("awq").linear(DictSource({"m.qweight": qweight, "m.qzeros": qzeros, "m.scales": s}),
                                     layer(), [("m", N)])
    assert torch.equal(gptq_unpack(args["weight"], K), q)
    assert torch.equal(gptq_unpack(args["weight_zero_point"].t().contiguous(), N).t(), z)
    assert torch.equal(args["weight_scale"], s)


def test_modelopt_nvfp4_fused_parts_with_different_global_scales():
    """q/k/v with different weight_scale_2: block scales rescaled to the largest global scale."""
    torch.manual_seed(0)
    parts, tensors = [("q", 32), ("k", 16), ("v", 16)], {}
    for i, (name, n) in enumerate(parts):
        tensors[f"{name}.weight"] = torch.randint(0, 256, (n, K // 2), dtype=torch.uint8)
        tensors[f"{name}.weight_scale"] = torch.full((n, K // 16), 2.0 ** i).to(torch.float8_e4m3fn)
        tensors[f"{name}.weight_scale_2"] = torch.tensor(0.5 * (i + 1))
        tensors[f"{name}.input_scale"] = torch.tensor(0.1 * (i + 1))
    lin = LinearLayer(name="qkv", in_features=K, out_features=64, weight_format="nvfp4", activation_format="nvfp4",
                      group_size=16)
    args = adapter_for("modelopt").linear(DictSource(tensors), lin, parts)
    assert float(args["weight_global_scale"]) == 1.5 and float(args["input_global_scale"]) == pytest.approx(0.3)
    # effective per-block multiplier block_scale * global is kept: 1*0.5, 2*1.0, 4*1.5 -> /1.5
    eff = args["weight_scale"].float() * 1.5
    assert torch.allclose(eff[:32], torch.full((32, 2), 0.5), rtol=2 ** -3)
    assert torch.allclose(eff[32:48], torch.full((16, 2), 2.0), rtol=2 ** -3)
    assert torch.equal(eff[48:], torch.full((16, 2), 6.0))
    assert torch.equal(args["weight"], torch.cat([tensors[f"{p}.weight"] for p, _ in parts]))


def test_modelopt_fp8_fused_parts_requantized_to_the_largest_scale():
    w = {"a.weight": torch.full((8, K), 2.0).to(torch.float8_e4m3fn), "a.weight_scale": torch.tensor(1.0),
         "b.weight": torch.full((8, K), 2.0).to(torch.float8_e4m3fn), "b.weight_scale": torch.tensor(4.0)}
    lin = LinearLayer(name="ab", in_features=K, out_features=16, weight_format="fp8_tensor")
    args = adapter_for("modelopt").linear(DictSource(w), lin, [("a", 8), ("b", 8)])
    assert float(args["weight_scale"]) == 4.0
    assert torch.equal(args["weight"][:8].float(), torch.full((8, K), 0.5))      # 2 * 1 / 4
    assert torch.equal(args["weight"][8:].float(), torch.full((8, K), 2.0))


def test_swigluoai_interleaves_gate_and_up_rows_for_per_expert_checkpoints():
    """A per-expert FP8 MoE with the gpt-oss activation: w13 rows alternate gate, up."""
    e, h, i = 2, 128, 128
    t = {}
    for x in range(e):
        for proj, val in (("gate_proj", 1.0), ("up_proj", 2.0), ("down_proj", 3.0)):
            shape = (h, i) if proj == "down_proj" else (i, h)
            t[f"ex.{x}.{proj}.weight"] = torch.full(shape, val).to(torch.float8_e4m3fn)
            t[f"ex.{x}.{proj}.weight_scale_inv"] = torch.ones(1, 1)
    moe = MoELayer(name="ex", num_experts=e, top_k=1, hidden_size=h, intermediate_size=i, weight_format="fp8_block",
                   activation="swigluoai", group_size=128)
    with pytest.raises(CheckpointError, match="cannot be interleaved"):
        adapter_for("fp8").moe(DictSource(t), moe, ("ex.0.gate_proj", "ex.0.up_proj", "ex.0.down_proj"))
    silu = moe.model_copy(update={"activation": "silu"})
    args = adapter_for("fp8").moe(DictSource(t), silu, ("ex.0.gate_proj", "ex.0.up_proj", "ex.0.down_proj"))
    assert list(args["w13"].shape) == [e, 2 * i, h] and float(args["w13"][0, 0, 0]) == 1.0
    assert float(args["w13"][1, i, 0]) == 2.0 and list(args["w13_scale"].shape) == [e, 2, 1]


def test_wrong_part_rows_are_named():
    w = {"a.weight": torch.zeros(8, K).to(torch.float8_e4m3fn), "a.weight_scale": torch.tensor(1.0)}
    lin = LinearLayer(name="a", in_features=K, out_features=16, weight_format="fp8_tensor")
    with pytest.raises(CheckpointError, match=r"a.weight: expected shape \[16, 32\]"):
        adapter_for("modelopt").linear(DictSource(w), lin, [("a", 16)])


def test_modelopt_ggml_codec_blocks_pass_through_and_fuse_along_n():
    w = {"a.weight": torch.randint(0, 256, (8, 1, 34), dtype=torch.uint8),
         "b.weight": torch.randint(0, 256, (4, 1, 34), dtype=torch.uint8)}
    lin = LinearLayer(name="ab", in_features=32, out_features=12, weight_format="q8_0", group_size=32)
    args = adapter_for("modelopt").linear(DictSource(w), lin, [("a", 8), ("b", 4)])
    assert torch.equal(args["weight"], torch.cat([w["a.weight"], w["b.weight"]]))
