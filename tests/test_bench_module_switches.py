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


def test_the_rules_variants_switch_the_siblings_off():
    """R112's 'rules' variants: a MoE entry of SET tuned.SIBLINGS false times the shape rules where a sibling's entry
    is shipped, and a dense entry of RULES 1 lays its keys over the rules' choice, not the layer's."""
    import json
    from types import SimpleNamespace

    from bench_peers import dense_variant_config, variant_held
    from oracle_triton import tuned

    bench = Path(__file__).resolve().parents[1] / "bench" / "configs"
    rules = json.loads((bench / "moe_r112.json").read_text())["deepseek-r1"]["rules"]
    t, one = SimpleNamespace(config=None), ("moe", "w8a8_block", 4096, 7168, 16, 256)   # no H100 entry of its own
    hopper = ((9, 0), 132)
    assert tuned.lookup("NVIDIA H100 80GB HBM3", *one, traits=hopper) == tuned.lookup("NVIDIA H200", *one)
    with variant_held(t, rules):
        assert t.config is None and tuned.lookup("NVIDIA H100 80GB HBM3", *one, traits=hopper) is None
    assert tuned.SIBLINGS
    gemm = SimpleNamespace(rule_config=lambda m, act: {"RULE": m}, config_for=lambda m, act: {"OWN": m})
    spec = json.loads((bench / "dense_r112.json").read_text())["8192x8192"]["rules"]
    assert dense_variant_config(gemm, 16, 0, spec) == {"RULE": 16}
    assert dense_variant_config(gemm, 16, 0, {"BASE": 1, "PDL": 1}) == {"OWN": 16, "PDL": 1}
    assert dense_variant_config(gemm, 16, 0, {"SPLIT_K": 2, "ONLY_M": 16}) == {"SPLIT_K": 2}
