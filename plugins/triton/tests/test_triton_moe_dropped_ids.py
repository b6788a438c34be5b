"""Out-of-range expert ids on the aligned grouped-GEMM path add nothing to their token's output, and
the aligned path's one-launch preparation (PREP: count, align, FC1's input codes), its top-k sum
inside the FC2 GEMM (FUSE_SUM) and its column-tile-first grid (N_FAST) give the bits of the
separate launches.

The eager expert-id check reads the ids back (a host sync), so it is skipped under graph capture and
when an engine vouches for its router (check_inputs False). The alignment launches then drop such a
pair: no GEMM writes its row of the fp32 pair buffer, and the top-k sum must not read what that row
still holds from an earlier call. On CPU the kernels run in Triton's interpreter; on a GPU (marked gpu)
a captured graph is replayed on valid ids first (their pair rows are written) and then on ids with
out-of-range entries, so a sum that read the stale rows would differ from the reference."""
from __future__ import annotations

import pytest
import torch

from helpers import moe_pair, rel, routing

DEV = "cuda" if torch.cuda.is_available() else "cpu"
FP8 = ("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"})


def _aligned(t, m, **kw):
    from oracle_triton.moe import moe_config

    lay = t.w13.layout
    return {**moe_config(m, t.layer.top_k, t.experts, lay.pack), **kw}


def _reference(ref, x, w, ids, experts):
    """The emulation MoE with each out-of-range pair's router weight zeroed (its id made valid)."""
    bad = (ids < 0) | (ids >= experts)
    return ref.apply(x, torch.where(bad, torch.zeros_like(w), w), torch.where(bad, torch.zeros_like(ids), ids))


def test_topk_sum_skips_rows_of_out_of_range_ids():
    """The summing launch alone: rows of dropped pairs hold NaN (stale memory) and add nothing; the
    valid rows add in slot order, as before."""
    from oracle_triton.moe_kernels import topk_sum_kernel

    m, k, h, e = 3, 4, 1100, 8
    pairs = torch.randn(m * k, h, device=DEV)
    ids = torch.randint(0, e, (m, k), dtype=torch.int32, device=DEV)
    ids[0, 1], ids[2, 3], ids[1, 0] = -1, e, e + 5
    bad = ((ids < 0) | (ids >= e)).reshape(-1)
    pairs[bad] = float("nan")
    out = torch.empty(m, h, dtype=torch.bfloat16, device=DEV)
    topk_sum_kernel[(m, -(-h // 1024))](pairs, ids, out, h, e, TOPK=k, BLOCK=1024, EXACT_BF16=True)
    expect = torch.where(bad[:, None], 0.0, pairs).view(m, k, h).sum(1)
    assert torch.isfinite(out.float()).all()
    assert rel(out, expect) < 1e-2


@pytest.mark.slow
def test_aligned_path_drops_out_of_range_pairs():
    """Three tokens on the aligned tiles, ids -1 and E among the slots: as the reference without them."""
    fmt, mode, act, params = FP8
    t, ref = moe_pair(fmt, 8, 256, 128, 2, mode, act, params, device=DEV)
    t.check_inputs = False
    t.config = _aligned(t, 3)
    x = torch.randn(3, 256, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(3, 8, 2, DEV)
    ids[0, 1], ids[2, 0] = -1, 8
    y = t.apply(x, w, ids)
    assert torch.isfinite(y.float()).all()
    assert rel(y, _reference(ref, x, w, ids, 8)) < 5e-2


@pytest.mark.slow
@pytest.mark.parametrize("fmt,mode,act,params,on_input", [
    (*FP8, False), (*FP8, True), ("fp8_block", "w8a16_block", "bf16", {}, False)])
def test_prep_launch_and_fused_sum_give_the_aligned_bits(fmt, mode, act, params, on_input):
    """PREP and PREP + FUSE_SUM (and N_FAST: the grid walks a block's column tiles first) against the
    five-launch aligned path: the same bits, a token whose ids are all out of range gives zeros, and the
    sum's counters are back at zero (a second call agrees)."""
    t, ref = moe_pair(fmt, 8, 256, 128, 2, mode, act, params, device=DEV, router_on_input=on_input)
    t.check_inputs = False
    x = torch.randn(4, 256, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(4, 8, 2, DEV)
    ids[1, 0], ids[3] = 8, -1                 # token 3: no expert in range
    t.config = _aligned(t, 4)
    apart = t.apply(x, w, ids)
    assert torch.equal(apart[3], torch.zeros_like(apart[3]))
    for cfg in (_aligned(t, 4, PREP=1), _aligned(t, 4, PREP=1, FUSE_SUM=1), _aligned(t, 4, N_FAST=1),
                _aligned(t, 4, N_FAST=1, PREP=1, FUSE_SUM=1)):
        t.config = cfg
        out = t.apply(x, w, ids)
        assert torch.equal(out, apart), cfg
        assert torch.equal(t.apply(x, w, ids), apart), cfg
    assert int(t._sum_counters.abs().sum()) == 0
    assert rel(apart, _reference(ref, x, w, ids, 8)) < 5e-2


def _fp8_five_tokens(top_k: int):
    """An 8-expert FP8 block layer and five tokens whose ids hold one id past the experts and one -1."""
    fmt, mode, act, params = FP8
    t, ref = moe_pair(fmt, 8, 256, 256, top_k, mode, act, params, device=DEV)
    t.check_inputs = False
    x = torch.randn(5, 256, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(5, 8, top_k, DEV)
    ids[1, 0], ids[4, 1] = 8, -1
    return t, ref, x, w, ids


@pytest.mark.slow
def test_alignment_launch_rounding_and_fc1_codes_give_the_separate_launches_bits(monkeypatch):
    """The aligned FP8 path's defaults against the launches they replace: align_small_kernel's extra
    programs rounding FC1's input (no quantization launch after the alignment) against count + align +
    act_qdq, and QUANT_OUT (the FC1 GEMM writes FC2's input codes and scales) against the quantization
    launch between the GEMMs: the same bits, with out-of-range ids among the slots."""
    from oracle_triton import moe as moe_mod

    t, ref, x, w, ids = _fp8_five_tokens(2)
    t.config = _aligned(t, 5)
    merged = t.apply(x, w, ids)
    with monkeypatch.context() as mp:
        mp.setattr(moe_mod, "ALIGN_SMALL_PAIRS", 0)     # count + align launches, then act_qdq
        apart = t.apply(x, w, ids)
    assert torch.equal(merged, apart)
    t.config = _aligned(t, 5, QUANT_OUT=1, BLOCK_N1=128)
    assert torch.equal(t.apply(x, w, ids), apart)
    assert rel(apart, _reference(ref, x, w, ids, 8)) < 5e-2
    t.config = _aligned(t, 5, QUANT_OUT=1)              # 64-wide FC1 tiles: half a group each
    with pytest.raises(ValueError, match="QUANT_OUT"):
        t.apply(x, w, ids)


@pytest.mark.slow
def test_programs_finding_their_own_expert_rows_give_the_aligned_bits():
    """BY_EXPERT (a program per expert finds its rows in the ids: no alignment launch) against the aligned
    launches, alone and with QUANT_OUT, on ids with out-of-range entries and a token that names one
    expert twice (computed once, each slot weighed by its own router weight); refused above BLOCK_M
    tokens and with the router weight on the input."""
    t, ref, x, w, ids = _fp8_five_tokens(3)
    ids[2, 2] = ids[2, 0]                               # the same expert in two slots of token 2
    t.config = _aligned(t, 5)
    apart = t.apply(x, w, ids)
    for extra in ({"BY_EXPERT": 1}, {"BY_EXPERT": 1, "QUANT_OUT": 1, "BLOCK_N1": 128}, {"BY_EXPERT": 1, "N_FAST": 1}):
        t.config = _aligned(t, 5, **extra)
        assert torch.equal(t.apply(x, w, ids), apart), extra
    assert rel(apart, _reference(ref, x, w, ids, 8)) < 5e-2
    t.config = _aligned(t, 5, BY_EXPERT=1, BLOCK_M=4)
    with pytest.raises(ValueError, match="BY_EXPERT"):
        t.apply(x, w, ids)


def test_fused_sum_on_aligned_tiles_needs_the_prep_launch():
    fmt, mode, act, params = FP8
    t, _ = moe_pair(fmt, 8, 256, 128, 2, mode, act, params, device=DEV)
    t.config = _aligned(t, 4, FUSE_SUM=1)
    w, ids = routing(4, 8, 2, DEV)
    with pytest.raises(ValueError, match="PREP"):
        t.apply(torch.randn(4, 256, dtype=torch.bfloat16, device=DEV), w, ids)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt,mode,act,params,extra,m", [
    (*FP8, {}, 40), ("mxfp4", "w4a16_mx", "bf16", {}, {}, 40), (*FP8, {"PREP": 1, "FUSE_SUM": 1, "N_FAST": 1}, 40),
    (*FP8, {"QUANT_OUT": 1, "BLOCK_N1": 128, "BY_EXPERT": 1, "BLOCK_M": 16}, 16)])
def test_aligned_path_under_capture_drops_out_of_range_pairs(fmt, mode, act, params, extra, m):
    """m = 40: 160 pairs over 32 experts, the aligned tiles; m = 16 with BY_EXPERT: no alignment launch."""
    t, ref = moe_pair(fmt, 32, 1024, 768, 4, mode, act, params, device="cuda")
    t.check_inputs = False
    t.config = _aligned(t, m, **extra)
    x = torch.randn(m, 1024, dtype=torch.bfloat16, device="cuda")
    w, ids = routing(m, 32, 4, "cuda")
    t.forward(x, w, ids)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = t.forward(x, w, ids)
    g.replay()                                   # every pair row written with valid ids
    bad = ids.clone()
    bad[0, 1], bad[5, 0], bad[11, 3] = -1, 32, 1000
    ids.copy_(bad)
    g.replay()
    torch.cuda.synchronize()
    tol = {"bf16": 1e-2, "fp8": 5e-2}[act]
    assert torch.isfinite(out.float()).all()
    assert rel(out, _reference(ref, x, w, ids, 32)) < tol


@pytest.mark.parametrize("t,e,bm", [(37, 8, 16), (128, 128, 16), (300, 100, 64)])
def test_one_launch_alignment_gives_the_blocks_of_the_two_launches(t, e, bm):
    """moe_kernels.align_small_kernel against count_kernel + align_kernel on ids with duplicates and
    out-of-range entries: the same block labels, and each labelled block holds the same pairs (the
    order inside a block may differ: the atomics decide it there)."""
    from oracle_triton import moe_kernels as mk
    from oracle_triton.moe import triton_pow2

    ids = torch.randint(-2, e + 2, (t,), dtype=torch.int32, device=DEV)
    blocks = -(-t // bm) + min(e, t)
    got = []
    for small in (False, True):
        sorted_ids = torch.full((blocks * bm,), -7, dtype=torch.int32, device=DEV)
        labels = torch.full((blocks,), -7, dtype=torch.int32, device=DEV)
        if small:
            mk.align_small_kernel[(e,)](ids, sorted_ids, labels, t, e, blocks, BLOCK_M=bm, E_POW2=triton_pow2(e),
                                        CHUNK=max(16, 16384 // triton_pow2(e)))
        else:
            counts = torch.zeros(e, dtype=torch.int32, device=DEV)
            rank = torch.empty(t, dtype=torch.int32, device=DEV)
            mk.count_kernel[(-(-t // 1024),)](ids, counts, rank, t, e, BLOCK=1024)
            mk.align_kernel[(1,)](ids, rank, counts, torch.empty_like(counts), sorted_ids, labels, t, e, blocks,
                                  BLOCK_M=bm, E_POW2=triton_pow2(e), BLOCK=256)
        got.append((labels.clone(), sorted_ids.view(blocks, bm).clone()))
    (la, sa), (lb, sb) = got
    assert torch.equal(la, lb)
    used = la >= 0
    assert torch.equal(sa[used].sort(1).values, sb[used].sort(1).values)
    for b in torch.nonzero(used).flatten().tolist():
        real = sa[b][sa[b] < t]
        assert (ids[real.long()] == la[b]).all()
