"""bench/persist_probe.timeline: the persistent MoE launch's stamps (moe_persist.STAMP_SLOTS per program) read
back as where the time went, checked on a hand-written two-program timeline."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from persist_probe import timeline  # noqa: E402


def test_timeline_of_two_programs():
    from oracle_triton.moe_persist import STAMP_SLOTS

    ns = 10**9                                    # the global timer's origin is arbitrary
    a = torch.zeros(2, int(STAMP_SLOTS.value), dtype=torch.int64)
    # program 0: starts at 0, rounds its inputs until 1 us, runs FC1 tile 0 (1-20 us), then FC2 tile 300, which
    # begins at 20 us, waits for its pair until 25 us and ends at 30 us
    a[0, :4] = torch.tensor([ns, ns + 1000, 2, ns + 30000])
    a[0, 4:8] = torch.tensor([0, ns + 1000, ns + 1000, ns + 20000])
    a[0, 8:12] = torch.tensor([300, ns + 20000, ns + 25000, ns + 30000])
    # program 1: starts 0.5 us later, rounds for 1 us, runs FC1 tile 1 (1.5-22 us)
    a[1, :4] = torch.tensor([ns + 500, ns + 1500, 1, ns + 22000])
    a[1, 4:8] = torch.tensor([1, ns + 1500, ns + 1500, ns + 22000])
    out = timeline(a, total1=256, bytes1=40_000_000, bytes2=20_000_000, bin_us=10.0)
    assert out["span_us"] == pytest.approx(30.0) and out["start_spread_us"] == pytest.approx(0.5)
    assert out["rounding_us"] == pytest.approx(1.0)
    assert out["fc1_tiles"] == 2 and out["fc2_tiles"] == 1
    assert out["fc1_last_end_us"] == pytest.approx(22.0) and out["fc2_first_begin_us"] == pytest.approx(20.0)
    assert out["fc2_wait_us_sum_max"] == pytest.approx([5.0, 5.0])
    assert out["fc2_tile_us_p10_p50_p90"] == pytest.approx([5.0, 5.0, 5.0])
    assert out["idle_tail_us_mean"] == pytest.approx(4.0)            # program 1 ends 8 us before program 0
    # TB/s per 10 us bin: a tile's bytes spread evenly over its run after any wait: tiles 0 (19 us) and 1
    # (20.5 us) of 40 MB over bins 0-2, tile 300 (20 MB, 5 us after its wait) in bin 2
    first = 40e6 * 9 / 19 + 40e6 * 8.5 / 20.5
    assert out["tb_per_s_by_bin"][0] == pytest.approx(first / 10e-6 / 1e12, abs=0.01)
    assert sum(out["tb_per_s_by_bin"]) * 10e-6 * 1e12 == pytest.approx(100e6, rel=1e-3)
