"""bench/bench_peers.py --moe-rounds: the MoE table's interleaved rounds (interleaved_rounds), GPU-free.

Why: the GPU's clocks and power state drift between candidates (Qwen3-235B's BF16 mode 3103.6 vs 3566.0 us on
the same H200 in two processes, R108a / R108c), so a cell where ours and the BF16 mode are within noise is settled
by timing them in alternating order (ABBA...) in one process and reading each round's ratio; these tests pin the
order, the ratio arithmetic and the failure handling with a fake timer, and the option's wiring."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_peers  # noqa: E402
from bench_peers import interleaved_rounds, rounds_lines  # noqa: E402

NAMES = ["oracle", "oracle:tail", "oracle-bf16"]


def _fake(table: dict[str, list[float]], fail: dict[str, int] | None = None):
    """time_one over per-name figures in the order asked; `fail`: name -> the call (0-based) that raises."""
    calls: list[str] = []
    seen: dict[str, int] = {}

    def time_one(name: str) -> float:
        k = seen.get(name, 0)
        seen[name] = k + 1
        calls.append(name)
        if fail and fail.get(name) == k:
            raise RuntimeError(f"{name} broke")
        return table[name][k]
    return time_one, calls


def test_order_flips_every_round_abba():
    time_one, calls = _fake({n: [1.0] * 4 for n in NAMES})
    res = interleaved_rounds(NAMES, time_one, 4)
    rev = NAMES[::-1]
    assert res["order"] == [NAMES, rev, NAMES, rev]
    assert calls == NAMES + rev + NAMES + rev
    assert res["errors"] == {}


def test_per_round_ratios_median_and_worst_against_the_bf16_mode():
    table = {"oracle": [110.0, 95.0, 100.0], "oracle:tail": [90.0, 99.0, 120.0], "oracle-bf16": [100.0, 100.0, 80.0]}
    time_one, _ = _fake(table)
    res = interleaved_rounds(NAMES, time_one, 3)
    assert res["times"] == table
    ratios = res["ratio_vs_bf16_mode"]
    assert set(ratios) == {"oracle", "oracle:tail"}           # the baseline has no ratio to itself
    assert ratios["oracle"] == pytest.approx([1.10, 0.95, 1.25])
    assert ratios["oracle:tail"] == pytest.approx([0.90, 0.99, 1.50])
    assert res["median_ratio"]["oracle"] == pytest.approx(1.10)
    assert res["worst_ratio"]["oracle"] == pytest.approx(1.25)    # worst: ours slowest against the BF16 mode
    assert res["median_ratio"]["oracle:tail"] == pytest.approx(0.99)
    assert res["worst_ratio"]["oracle:tail"] == pytest.approx(1.50)


def test_even_round_count_median_is_the_mean_of_the_middle_two():
    time_one, _ = _fake({"oracle": [1.0, 2.0, 3.0, 4.0], "oracle-bf16": [1.0] * 4})
    res = interleaved_rounds(["oracle", "oracle-bf16"], time_one, 4)
    assert res["median_ratio"]["oracle"] == pytest.approx(statistics.median([1.0, 2.0, 3.0, 4.0]))


def test_a_candidate_that_raises_is_recorded_left_out_later_and_never_fatal():
    table = {"oracle": [100.0, 100.0, 100.0], "oracle:tail": [50.0, 50.0, 50.0], "oracle-bf16": [100.0, 200.0, 50.0]}
    time_one, calls = _fake(table, fail={"oracle:tail": 1})      # fails in the second round
    res = interleaved_rounds(NAMES, time_one, 3)
    assert res["errors"] == {"oracle:tail": "RuntimeError: oracle:tail broke"}
    assert res["times"]["oracle:tail"] == [50.0]
    assert res["order"][2] == ["oracle", "oracle-bf16"]          # not tried again
    assert calls.count("oracle:tail") == 2
    assert res["ratio_vs_bf16_mode"]["oracle:tail"] == pytest.approx([0.5])    # paired with the BF16 mode's round 1
    assert res["ratio_vs_bf16_mode"]["oracle"] == pytest.approx([1.0, 0.5, 2.0])


@pytest.mark.parametrize("bf16", ["missing", "raises"])
def test_without_the_bf16_mode_the_others_are_timed_and_no_ratio_fields(bf16):
    names = ["oracle", "oracle:tail"] + (["oracle-bf16"] if bf16 == "raises" else [])
    table = {n: [1.0, 2.0] for n in names}
    time_one, _ = _fake(table, fail={"oracle-bf16": 0})
    res = interleaved_rounds(names, time_one, 2)
    assert res["times"]["oracle"] == [1.0, 2.0] and res["times"]["oracle:tail"] == [1.0, 2.0]
    assert not {"ratio_vs_bf16_mode", "median_ratio", "worst_ratio"} & set(res)
    assert ("oracle-bf16" in res["errors"]) == (bf16 == "raises")


def test_rounds_lines_print_one_line_per_candidate():
    row = {"shape": "qwen3-235b-a22b-nvfp4", "peers": {
        "oracle": {"rounds": [3000.0, 3100.0]}, "oracle:tail": {"rounds": [2900.0], "rounds_error": "RuntimeError: x"},
        "oracle-bf16": {"rounds": [3103.6, 3000.0]}}}
    time_one, _ = _fake({n: row["peers"][n]["rounds"] for n in NAMES}, fail={"oracle:tail": 1})
    res = interleaved_rounds(NAMES, time_one, 2)
    res.pop("times"), res.pop("errors")
    row["rounds"] = res
    lines = rounds_lines(row)
    assert len(lines) == 3
    assert lines[0] == ("    qwen3-235b-a22b-nvfp4 oracle interleaved rounds (graph us): 3000.0, 3100.0; vs the BF16 "
                        "mode: 0.967, 1.033 (median 1.000x, worst 1.033x)")
    assert lines[1].endswith("(median 0.934x, worst 0.934x); error: RuntimeError: x")
    assert lines[2] == "    qwen3-235b-a22b-nvfp4 oracle-bf16 interleaved rounds (graph us): 3103.6, 3000.0"
    assert rounds_lines({"shape": "x", "peers": {}}) == []


def test_moe_rounds_option_is_wired(monkeypatch):
    """main() stores --moe-rounds in MOE_ROUNDS (default 1: no rounds), before it needs a device:
    --precompile-only with no CUDA device returns 2 right after the options are applied."""
    monkeypatch.setattr(bench_peers, "MOE_ROUNDS", [1])          # put back after the test
    monkeypatch.setattr(bench_peers.torch.cuda, "is_available", lambda: False)
    assert bench_peers.main(["--only", "moe", "--precompile-only"]) == 2
    assert bench_peers.MOE_ROUNDS[0] == 1
    assert bench_peers.main(["--only", "moe", "--precompile-only", "--moe-rounds", "5"]) == 2
    assert bench_peers.MOE_ROUNDS[0] == 5
    assert bench_peers.main(["--only", "moe", "--precompile-only", "--moe-rounds", "0"]) == 2
    assert bench_peers.MOE_ROUNDS[0] == 1                       # at least 1: no rounds


class _FakeMoE:
    """A fused MoE's surface the rounds touch: apply(x, weights, ids) and the config a variant sets."""

    def __init__(self, name: str):
        self.name, self.config = name, None

    def apply(self, x, w, ids):
        return self.name


def test_bench_moe_rounds_hold_each_variant_and_fill_the_row(monkeypatch):
    """_round_candidates / _moe_rounds as bench_moe calls them, with measure() faked: each variant is timed under
    its config and SET switches (put back after), a variant or BF16 mode that failed its first pass is left out,
    and the row gets per-candidate "rounds" and the ratios."""
    from oracle_triton import moe

    t, own = _FakeMoE("ours"), _FakeMoE("bf16 mode")
    variants = {"narrow": {"BLOCK_N": 8, "ONLY_M": 1, "SET": {"oracle_triton.moe.ALIGN_WIDE": not moe.ALIGN_WIDE}},
                "broken": {"BLOCK_N": 16}}
    monkeypatch.setattr(bench_peers, "MOE_VARIANTS", {"m": variants})
    monkeypatch.setattr(bench_peers, "MOE_ROUNDS", [3])
    monkeypatch.setattr(bench_peers, "MOE_WARM", [0.3])
    seen, warmed = [], []
    figures = {("ours", None): 100.0, ("ours", 8): 90.0, ("bf16 mode", None): 80.0}

    def fake_measure(calls, m):
        owner = calls[0]()
        cfg = (t if owner == "ours" else own).config
        seen.append((owner, cfg, moe.ALIGN_WIDE))
        return {"graph": figures[owner, cfg and cfg["BLOCK_N"]]}
    monkeypatch.setattr(bench_peers, "measure", fake_measure)
    monkeypatch.setattr(bench_peers, "warm_calls", lambda calls, s: warmed.append(s))
    row = {"shape": "m", "peers": {"oracle": {"graph": 1.0}, "oracle:narrow": {"graph": 1.0},
                                   "oracle:broken": {"error": "x"}, "oracle-bf16": {"graph": 1.0}}}
    cands = bench_peers._round_candidates(t, own, "m", row)
    assert list(cands) == ["oracle", "oracle:narrow", "oracle-bf16"]
    before = moe.ALIGN_WIDE
    bench_peers._moe_rounds(row, cands, "x", [(None, None)] * 2, 1)
    assert moe.ALIGN_WIDE == before and t.config is None and own.config is None
    assert ("ours", {"BLOCK_N": 8}, not before) in seen and ("ours", None, before) in seen
    assert len(seen) == len(warmed) == 9 and set(warmed) == {0.3}
    assert row["peers"]["oracle"]["rounds"] == [100.0] * 3 and row["peers"]["oracle:narrow"]["rounds"] == [90.0] * 3
    assert row["rounds"]["order"][1] == ["oracle-bf16", "oracle:narrow", "oracle"]
    assert row["rounds"]["median_ratio"] == pytest.approx({"oracle": 1.25, "oracle:narrow": 1.125})
    assert "rounds" not in row["peers"]["oracle:broken"]
    row["peers"]["oracle-bf16"] = {"error": "x"}            # the BF16 mode failed its first pass: no baseline
    assert list(bench_peers._round_candidates(t, own, "m", row)) == ["oracle", "oracle:narrow"]
    assert list(bench_peers._round_candidates(t, None, "m", row)) == ["oracle", "oracle:narrow"]


def test_a_variant_that_fails_in_a_round_is_put_back_and_recorded(monkeypatch):
    t = _FakeMoE("ours")
    monkeypatch.setattr(bench_peers, "MOE_VARIANTS", {"m": {"v": {"BLOCK_N": 8}}})
    monkeypatch.setattr(bench_peers, "MOE_ROUNDS", [2])
    monkeypatch.setattr(bench_peers, "MOE_WARM", [0.0])

    def fake_measure(calls, m):
        if t.config:
            raise RuntimeError("capture failed")
        return {"graph": 10.0}
    monkeypatch.setattr(bench_peers, "measure", fake_measure)
    monkeypatch.setattr(bench_peers, "warm_calls", lambda calls, s: pytest.fail("warmed with --moe-warm-s 0"))
    row = {"shape": "m", "peers": {"oracle": {"graph": 1.0}, "oracle:v": {"graph": 1.0}}}
    bench_peers._moe_rounds(row, bench_peers._round_candidates(t, None, "m", row), "x", [(None, None)], 1)
    assert t.config is None
    assert row["peers"]["oracle:v"] == {"graph": 1.0, "rounds": [], "rounds_error": "RuntimeError: capture failed"}
    assert row["peers"]["oracle"]["rounds"] == [10.0, 10.0] and "ratio_vs_bf16_mode" not in row["rounds"]
