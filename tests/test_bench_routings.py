"""The MoE benchmarks' routings (bench/bench_peers._routings, also sweep_moe's and moe_gap's) are drawn
from a seed fixed per (M, experts, top_k): two draws, and two scripts, time the same routings, so a
figure does not move with the draw (DeepSeek-R1 M=16 measured 1022-1080 us over different draws)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_peers import _routings, routing_seed  # noqa: E402


@pytest.mark.parametrize("m", [1, 16])
def test_routings_are_the_same_on_every_draw(m):
    a, b = _routings(m, 256, 8, 4, "cpu"), _routings(m, 256, 8, 4, "cpu")
    for (wa, ia), (wb, ib) in zip(a, b):
        assert torch.equal(ia, ib) and torch.equal(wa, wb)
        assert ia.shape == (m, 8) and ia.dtype == torch.int32
        assert wa.shape == (m, 8) and bool((wa > 0).all())
        assert all(len(set(row.tolist())) == 8 for row in ia)       # top_k distinct experts per token


def test_one_token_routings_touch_disjoint_expert_sets():
    ids = torch.cat([i.reshape(-1) for _, i in _routings(1, 256, 8, 32, "cpu")])
    assert len(set(ids.tolist())) == 256


def test_seeds_differ_per_shape_and_token_count():
    seeds = {routing_seed(m, e, k) for m in (1, 16, 256, 4096) for e, k in ((128, 8), (256, 8), (32, 4))}
    assert len(seeds) == 12


def test_routings_can_be_held_to_an_expert_count():
    """--moe-experts: the seeded generator's draws kept only where the routing touches exactly E experts, so a
    row can be set beside a peer's figure measured on fewer expert bytes; the same draws every time."""
    a = _routings(16, 256, 8, 3, "cpu", touch=97)
    b = _routings(16, 256, 8, 3, "cpu", touch=97)
    for (wa, ia), (wb, ib) in zip(a, b):
        assert int(torch.unique(ia).numel()) == 97 and torch.equal(ia, ib) and torch.equal(wa, wb)
    with pytest.raises(ValueError, match="touched exactly"):
        _routings(2, 256, 8, 1, "cpu", touch=3)          # two tokens touch at least 8 experts


def test_one_token_routings_can_be_held_to_the_first_experts():
    """--moe-experts MODEL=1:E: one-token routings whose disjoint expert sets come from experts [0, E) only
    (gpt-oss-120b's 128 experts held to 20b's 32), as many sets as without it; 6 sets of 4 from 32 experts
    are disjoint, as the unrestricted ones are."""
    held = _routings(1, 128, 4, 6, "cpu", touch=32)
    ids = torch.cat([i.reshape(-1) for _, i in held])
    assert len(held) == 6 and int(ids.max()) < 32 and len(set(ids.tolist())) == 24
    again = torch.cat([i.reshape(-1) for _, i in _routings(1, 128, 4, 6, "cpu", touch=32)])
    assert torch.equal(ids, again)
    spread = torch.cat([i.reshape(-1) for _, i in _routings(1, 128, 4, 6, "cpu")])
    assert int(spread.max()) >= 32                           # the default draws span the 128 experts
