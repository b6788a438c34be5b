"""MoE int4 with asymmetric (AWQ-style) zero points: w13_zero_point / w2_zero_point reach the kernel."""
from __future__ import annotations

import torch

from oracle.layer import MoELayer
from oracle.platform import Platform

from oracle import select_backend
from emulation_helpers import quantize
from oracle_emulation.formats import int4

CPU = Platform.cpu()


def test_moe_int4_zero_points_are_applied_per_expert():
    e, h, i, g = 4, 64, 32, 32
    layer = MoELayer(num_experts=e, top_k=2, hidden_size=h, intermediate_size=i, weight_format="int4",
                     group_size=g, dtype="float32", activation="silu")
    kernel = select_backend(layer, CPU).instantiate(layer)
    torch.manual_seed(0)
    w13, w2 = torch.randn(e, 2 * i, h) + 0.7, torch.randn(e, h, i) - 0.4     # offsets: zero points matter
    q13, q2 = quantize(w13, "int4", group_size=g), quantize(w2, "int4", group_size=g)
    # the packed layout of the kernel contract: int4 packs along K, [E, K/8, N]
    assert list(q13["weight"].shape) == [e, h // 8, 2 * i] and list(q13["weight_zero_point"].shape) == [e, h // g, 2 * i // 8]
    kernel.process_weights(w13=q13["weight"], w2=q2["weight"], w13_scale=q13["weight_scale"],
                           w2_scale=q2["weight_scale"], w13_zero_point=q13["weight_zero_point"],
                           w2_zero_point=q2["weight_zero_point"])
    x = torch.randn(5, h)
    ids = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0], [1, 3]])
    wts = torch.rand(5, 2)
    got = kernel.apply(x, wts, ids)
    # reference: dequantize each expert by the formula value = (q - zero) * scale, written out here
    def dq(q):
        nib = int4.unpack_int32(q["weight"], -2)
        zero = int4.unpack_int32(q["weight_zero_point"], -1).repeat_interleave(g, dim=-2)
        return ((nib - zero).float() * q["weight_scale"].float().repeat_interleave(g, dim=-2)).transpose(-1, -2)
    d13, d2 = dq(q13), dq(q2)
    want = torch.zeros(5, h)
    for t in range(5):
        for j in range(2):
            hid = d13[ids[t, j]] @ x[t]
            act = torch.nn.functional.silu(hid[:i]) * hid[i:]
            want[t] += wts[t, j] * (d2[ids[t, j]] @ act)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    assert (d13 - w13).abs().max() < 0.5          # the zero points made the dequantized weights close
