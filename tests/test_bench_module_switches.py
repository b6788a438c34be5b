"""bench/bench_peers.module_switches: a --moe-variants entry's SET holds module switches (ALIGN_WIDE,
ZERO_PADDING: code that waits for a GPU round to be measured both ways) for that variant only, and puts the old
values back whatever happens inside; a name the module lacks is refused by name, not set as a new attribute."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_peers import module_switches  # noqa: E402


def test_switches_hold_inside_and_come_back_after():
    from oracle_triton import moe, moe_ws

    before = (moe.ALIGN_WIDE, moe_ws.ZERO_PADDING)
    with module_switches({"oracle_triton.moe.ALIGN_WIDE": not before[0],
                          "oracle_triton.moe_ws.ZERO_PADDING": not before[1]}):
        assert (moe.ALIGN_WIDE, moe_ws.ZERO_PADDING) == (not before[0], not before[1])
    assert (moe.ALIGN_WIDE, moe_ws.ZERO_PADDING) == before
    with pytest.raises(RuntimeError, match="inside"):
        with module_switches({"oracle_triton.moe.ALIGN_WIDE": not before[0]}):
            raise RuntimeError("inside")
    assert moe.ALIGN_WIDE == before[0]


def test_a_name_the_module_lacks_is_refused_and_nothing_stays_set():
    from oracle_triton import moe

    before = moe.ALIGN_WIDE
    with pytest.raises(AttributeError, match="SET oracle_triton.moe.NO_SUCH_SWITCH"):
        with module_switches({"oracle_triton.moe.ALIGN_WIDE": not before, "oracle_triton.moe.NO_SUCH_SWITCH": 1}):
            pass
    assert moe.ALIGN_WIDE == before and not hasattr(moe, "NO_SUCH_SWITCH")


def test_a_variant_of_switches_only_keeps_the_shipped_choice():
    """variant_held: an entry of SET (and ONLY_M) alone times the shipped launch config (t.config None) under its
    switches; one with launch keys holds those; both put back after."""
    from types import SimpleNamespace

    from bench_peers import variant_held
    from oracle_triton import moe

    before, t = moe.ALIGN_PARTS, SimpleNamespace(config=None)
    with variant_held(t, {"ONLY_M": 4096, "SET": {"oracle_triton.moe.ALIGN_PARTS": not before}}):
        assert t.config is None and moe.ALIGN_PARTS == (not before)
    assert moe.ALIGN_PARTS == before
    with variant_held(t, {"BLOCK_M": 64, "SET": {}}):
        assert t.config == {"BLOCK_M": 64}
    assert t.config is None
