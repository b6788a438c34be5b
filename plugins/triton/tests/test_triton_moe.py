"""The fused MoE in Triton's interpreter on CPU (compiled on a GPU machine): the expert
alignment (counts, ranks, padded offsets, block labels), the packed-weight indexing per
expert, every activation and both activation modes, against oracle-emulation's MoE.
Tolerance as in test_triton_dense_cpu (1e-2 relative Frobenius; the reference also rounds
FC1's output and the activation to bf16, as the kernel does)."""
from __future__ import annotations

import pytest
import torch

from helpers import moe_pair, rel, routing

pytestmark = pytest.mark.slow   # every case runs the kernels in Triton's CPU interpreter (seconds each)

TOL = 1e-2
TOL_Q = {"bf16": TOL, "fp8": 5e-2, "nvfp4": 8e-2}
DEV = "cuda" if torch.cuda.is_available() else "cpu"   # compiled on a GPU machine
E, H, I, K = 8, 256, 128, 2


def _run(t, ref, m=5, scale=1.0):
    x = torch.randn(m, H, dtype=torch.bfloat16, device=DEV) * scale
    w, ids = routing(m, E, K, DEV)
    yt, yr = t.apply(x, w, ids), ref.apply(x, w, ids)
    assert yt.shape == (m, H) and yt.dtype == torch.bfloat16
    return rel(yt, yr)


@pytest.mark.parametrize("fmt,mode,act,params", [
    ("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}),
    ("fp8_block", "w8a16_block", "bf16", {}),
    ("fp8_channel", "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"}),
    ("fp8_tensor", "w8a8_fp8_tensor", "fp8", {"activation_granularity": "tensor"}),
    ("mxfp4", "w4a16_mx", "bf16", {}),
    ("nvfp4", "w4a16_nvfp4", "bf16", {}),
    ("nvfp4", "w4a4_nvfp4", "nvfp4", {}),
    ("int4", "w4a16_int4", "bf16", {}),
])
def test_moe_formats_match_emulation(fmt, mode, act, params):
    t, ref = moe_pair(fmt, E, H, I, K, mode, act, params, bias=True, device=DEV)
    assert _run(t, ref) < TOL_Q[act]


@pytest.mark.parametrize("activation,aparams", [
    ("gelu", {}), ("silu", {"limit": 0.5}), ("situ", {}), ("swigluoai", {}), ("swigluoai_uninterleave", {}),
    ("relu2", {}), ("swigluoai", {"alpha": 1.5, "beta": 0.5, "limit": 0.3}),
])
def test_moe_activations(activation, aparams):
    t, ref = moe_pair("mxfp4", E, H, I, K, "w4a16_mx", "bf16", activation=activation,
                      activation_params=aparams, bias=True, device=DEV)
    assert _run(t, ref, scale=4.0) < TOL


def test_router_weight_on_input():
    t, ref = moe_pair("fp8_block", E, H, I, 1, "w8a8_block", "fp8", {"activation_granularity": "group"},
                      router_on_input=True, device=DEV)
    x = torch.randn(4, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(4, E, 1, DEV)
    assert rel(t.apply(x, w, ids), ref.apply(x, w, ids)) < TOL_Q["fp8"]


def test_alignment_blocks_and_padding():
    """Counts reset, block labels and the padded order, read back from the kernels."""
    from oracle_triton import moe_kernels as mk
    from oracle_triton.moe import triton_pow2

    ids = torch.tensor([3, 0, 3, 3, 5, 0, 3, 7, 3], dtype=torch.int32, device=DEV)
    t, e, bm = ids.numel(), 8, 4
    blocks = -(-t // bm) + min(e, t)
    cnt = torch.zeros(e, dtype=torch.int32, device=DEV)
    off = torch.zeros(e, dtype=torch.int32, device=DEV)
    rank = torch.empty(t, dtype=torch.int32, device=DEV)
    sorted_ids = torch.empty(blocks * bm, dtype=torch.int32, device=DEV)
    bexp = torch.empty(blocks, dtype=torch.int32, device=DEV)
    mk.count_kernel[(1,)](ids, cnt, rank, t, e, BLOCK=16)
    assert cnt.tolist() == [2, 0, 0, 5, 0, 1, 0, 1]
    mk.align_kernel[(1,)](ids, rank, cnt, off, sorted_ids, bexp, t, e, blocks,
                          BLOCK_M=bm, E_POW2=triton_pow2(e), BLOCK=8)
    assert cnt.tolist() == [0] * e                              # reset for the next call / graph replay
    assert off.tolist() == [0, 4, 4, 4, 12, 12, 16, 16]         # counts padded to 4: 4, 0, 0, 8, 0, 4, 0, 4
    assert bexp.tolist() == [0, 3, 3, 5, 7] + [-1] * (blocks - 5)
    rows = sorted_ids.view(-1, bm)
    for b, expert in enumerate(bexp.tolist()):
        if expert >= 0:
            members = [p for p in rows[b].tolist() if p < t]
            assert all(int(ids[p]) == expert for p in members)
            assert all(p == t for p in rows[b].tolist()[len(members):])     # sentinel padding after the rows
    assert sorted(p for p in sorted_ids.tolist() if p < t) == list(range(t))


@pytest.mark.parametrize("form", ["one", "wide", "parts", "parts_tail"])
def test_alignment_of_thousands_of_pairs(form, monkeypatch):
    """TritonMoE._align beyond ALIGN_SMALL_PAIRS (count_kernel, then align_kernel's scatter 256 pairs a step, or
    ALIGN_WIDE's 4096 on 16 warps: a partial step and a whole one here, or ALIGN_PARTS: one program per 1024
    pairs, the last one partial; "parts_tail": 320-row blocks, moe_ws's WS_TAIL alignment): blocks labelled with
    their experts in order and the unused ones -1, as computed here from the ids; every pair once, in a block of
    its expert, the sentinel T after each expert's pairs; the counts and the programs' arrival counter back at
    zero, so a second call aligns the same way (on a GPU the pairs' order inside an expert follows count_kernel's
    atomics, so that call may order them differently)."""
    from oracle_triton import moe as moe_mod

    monkeypatch.setattr(moe_mod, "ALIGN_WIDE", form == "wide")
    monkeypatch.setattr(moe_mod, "ALIGN_PARTS", form.startswith("parts"))
    e, bm, t_pairs = 32, 320 if form == "parts_tail" else 256, 4099 + 1500
    t, _ = moe_pair("mxfp4", e, 256, 128, 1, "w4a16_mx", "bf16", {}, device=DEV)
    gen = torch.Generator().manual_seed(7)
    ids = (torch.rand(t_pairs, generator=gen) ** 2 * e).to(torch.int32).clamp(max=e - 1)   # uneven: few in high ids
    counts = torch.bincount(ids.long(), minlength=e).tolist()
    labels = [x for x in range(e) for _ in range(-(-counts[x] // bm))]
    for _ in range(2):
        sorted_ids, block_expert, blocks = t._align(ids.to(DEV), t_pairs, bm)
        assert blocks == -(-t_pairs // bm) + e and t.counts.cpu().tolist() == [0] * e
        assert t.align_done.cpu().tolist() == [0]
        assert block_expert.cpu().tolist() == labels + [-1] * (blocks - len(labels))
        rows = sorted_ids.cpu()[:len(labels) * bm].view(-1, bm).tolist()
        seen = []
        for b, x in enumerate(labels):
            members = [p for p in rows[b] if p < t_pairs]
            assert all(int(ids[p]) == x for p in members), b
            assert rows[b][len(members):] == [t_pairs] * (bm - len(members)), b
            seen += members
        assert sorted(seen) == list(range(t_pairs))


def test_out_of_range_expert_ids_are_named_and_dropped_when_the_engine_vouches():
    """The id check reads the ids back (a host sync); with check_inputs cleared the pair is dropped."""
    from oracle.errors import TensorError

    ids = torch.tensor([[0, 8], [1, 2]], dtype=torch.int32, device=DEV)
    x = torch.randn(2, H, dtype=torch.bfloat16, device=DEV)
    t, ref = moe_pair("mxfp4", E, H, I, K, "w4a16_mx", "bf16", device=DEV)
    with pytest.raises(TensorError, match=r"topk_ids: expected expert ids in \[0, 8\), got 8"):
        t.apply(x, torch.ones(2, K, device=DEV), ids)
    t.check_inputs = False
    dropped = t.apply(x, torch.ones(2, K, device=DEV), ids)
    ok = torch.tensor([[0, 3], [1, 2]], dtype=torch.int32, device=DEV)
    weights = torch.tensor([[1.0, 0.0], [1.0, 1.0]], device=DEV)     # the bad pair contributes nothing
    assert rel(dropped, ref.apply(x, weights, ok)) < TOL


@pytest.mark.parametrize("group", [32, 128])
def test_asymmetric_int4_experts_match_emulation_on_both_paths(group):
    """AWQ-style int4 experts (GPTQ zero points per group and column) run here, not in emulation:
    the aligned grouped GEMM (5 tokens) and the direct path (1 token) read the zero points."""
    t, ref = moe_pair("int4", E, H, I, K, "w4a16_int4", "bf16", bias=True, device=DEV, group=group,
                      symmetric=False)
    assert t.w13.zero is not None and t.w13.layout.stride_zk != 0
    assert _run(t, ref, m=5) < TOL
    x = torch.randn(1, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(1, E, K, DEV)
    y = t.apply_direct(x, w.reshape(-1).float(), ids.reshape(-1), 1, K)
    assert rel(y, ref.apply(x, w, ids)) < TOL


def test_asymmetric_int4_zero_points_are_checked_by_name():
    from oracle.errors import TensorError

    t, _ = moe_pair("int4", E, H, I, K, "w4a16_int4", "bf16", device=DEV, group=32, symmetric=False)
    q = {"w13": t.w13.weight, "w2": t.w2.weight, "w13_scale": t.w13.scale, "w2_scale": t.w2.scale}
    fresh = type(t)(t.layer, t.mode, None)
    with pytest.raises(TensorError, match=r"w2_zero_point: expected shape"):
        fresh.process_weights(**q, w13_zero_point=t.w13.zero, w2_zero_point=t.w13.zero)


def test_expert_weights_stay_packed():
    t, _ = moe_pair("nvfp4", E, H, I, K, "w4a16_nvfp4", "bf16", device=DEV)
    assert t.w13.weight.dtype == torch.uint8 and tuple(t.w13.weight.shape) == (E, 2 * I, H // 2)
    assert t.w2.weight.element_size() == 1


@pytest.mark.parametrize("fmt,op", [("fp8_block", "linear"), ("mxfp4", "linear"), ("fp8_block", "moe"),
                                    ("mxfp4", "moe")])
def test_runtime_probe_product_agrees(fmt, op):
    """The device probe (runtime.check) computes the same product as its float32 reference."""
    from oracle_triton import runtime

    y, ref = runtime._run(fmt, op, torch.device(DEV))
    assert rel(y, ref) < runtime.PROBE_TOLERANCE
