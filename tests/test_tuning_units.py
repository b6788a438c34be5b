"""The pieces of measured selection without torch: objectives, ranking, the file store, bad input."""
from __future__ import annotations

import json
import math
import multiprocessing
import sys

import pytest
from hypothesis import given, strategies as st

from oracle.cli import main
from oracle.errors import InputError
from oracle.objective import parse_objective, rank, score
from oracle.tuning import store
from oracle.tuning.schema import Entry, Metadata, TuningFile

META = dict(vendor="cpu", device_name="CPU", oracle="0.1.0", created="2026-01-01T00:00:00+00:00",
            updated="2026-01-01T00:00:00+00:00")


def entry(kernel: str, m: int, ms: float = 1.0, layer: str = "L") -> Entry:
    return Entry(layer_key=layer, kernel=kernel, backend="b", mode="x", activation_format="fp8", m=m,
                 status="ok", median_ms=ms, method="eager")


def test_named_objectives_pick_their_token_counts():
    assert parse_objective("decode").weights_for([4096, 1, 16]) == {1: 1.0}
    assert parse_objective("prefill").weights_for([4096, 1, 16]) == {4096: 1.0}
    assert parse_objective("balanced").weights_for([1, 16]) == {1: 1.0, 16: 1.0}
    assert parse_objective("1:0.7, 4096:0.3").weights_for([1, 16, 4096]) == {1: 0.7, 4096: 0.3}
    assert parse_objective("8:1").weights_for([1, 16]) == {}


@pytest.mark.parametrize("text, message", [
    ("fast", "is not decode, prefill, balanced or M:weight"), ("0:1", "M must be a positive"),
    ("-4:1", "M must be a positive"), ("1:-1", "weights must be finite and >= 0"), ("1:0", "names no M"),
])
def test_bad_objectives_are_named(text, message):
    with pytest.raises(InputError, match=message) as info:
        parse_objective(text)
    assert "--objective" in str(info.value)


def test_score_is_the_weighted_geometric_mean():
    assert score({1: 2.0, 16: 8.0}, {1: 1.0, 16: 1.0}) == pytest.approx(4.0)  # sqrt(2 * 8), by hand
    assert score({1: 2.0}, {1: 1.0, 16: 1.0}) is None


def test_rank_measured_first_then_policy_order_then_failed():
    order = ["a", "b", "c", "d", "e"]
    times = {"b": {1: 3.0}, "d": {1: 1.0}, "e": {1: 0.1}}
    ranked = rank(order, times, failed=["e"], weights={1: 1.0})
    assert [c for c, _ in ranked] == ["d", "b", "a", "c", "e"]
    assert [s for _, s in ranked] == [1.0, 3.0, None, None, None]


@given(st.lists(st.floats(min_value=1e-3, max_value=1e3), min_size=1, max_size=8))
def test_rank_orders_measured_candidates_by_time(values):
    names = [f"k{i}" for i in range(len(values))]
    ranked = rank(names, {n: {1: v} for n, v in zip(names, values)}, [], {1: 1.0})
    scores = [s for _, s in ranked]
    assert scores == sorted(scores)
    ties = [c for c, s in ranked if s == min(values)]
    assert ties == [n for n, v in zip(names, values) if v == min(values)]  # ties keep policy order


def test_merge_replaces_per_key_and_keeps_the_rest(tmp_path):
    path = tmp_path / "t.json"
    store.merge_into(path, TuningFile(metadata=Metadata(**META), entries=[entry("a", 1, 5.0), entry("b", 1)]))
    newer = dict(META, created="2026-02-01T00:00:00+00:00", updated="2026-02-01T00:00:00+00:00")
    merged = store.merge_into(path, TuningFile(metadata=Metadata(**newer), entries=[entry("a", 1, 2.0)]))
    assert {(e.kernel, e.median_ms) for e in merged.entries} == {("a", 2.0), ("b", 1.0)}
    assert merged.metadata.created == META["created"] and merged.metadata.updated == newer["updated"]
    assert store.read(path) == merged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "t.json.lock"]  # no temp file left


def _writer(path: str, kernel: str, count: int) -> None:
    for m in range(1, count + 1):
        store.merge_into(path, TuningFile(metadata=Metadata(**META), entries=[entry(kernel, m)]))


def test_concurrent_merges_lose_nothing(tmp_path):
    path = str(tmp_path / "t.json")
    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    procs = [ctx.Process(target=_writer, args=(path, k, 25)) for k in ("a", "b", "c")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(store.read(path).entries) == 75


def test_schema_command_prints_the_tuning_schema(capsys):
    assert main(["schema", "tuning"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "TuningFile" and "entries" in schema["properties"]
    assert schema["properties"]["schema_version"]["const"] == 1


@pytest.mark.parametrize("args, message", [
    (["--model", "no-such-model"], "--model: no such file, folder or shipped example"),
    (["--model", "qwen3-8b", "--m", "1,0"], "--m: token counts must be from 1 to 1048576, got 0"),
    (["--model", "qwen3-8b", "--m", "1,x"], "--m: expected whole token counts from 1 to 1048576"),
    (["--model", "qwen3-8b", "--m", "1,16", "--objective", "4096:1"], "--objective: 4096:1 names no M of --m (1,16)"),
    (["--model", "qwen3-8b", "--objective", "soon"], "--objective: 'soon' is not decode"),
    (["--model", "qwen3-8b", "--device", "h200"], "--device: 'h200' is not the detected device"),
    (["--model", "qwen3-8b", "--backend", "nosuch"], "--backend"),
])
def test_tune_bad_input_is_one_line_exit_1(args, message, capsys, tmp_path):
    out = tmp_path / "t.json"
    assert main(["tune", "--out", str(out), *args]) == 1
    err = capsys.readouterr().err
    assert message in err and err.startswith("error: ") and "Traceback" not in err
    assert not out.exists()


def test_objective_without_measurements_is_an_error(capsys):
    assert main(["explain", "--model", "qwen3-8b", "--objective", "decode"]) == 1
    assert "--objective: needs --measurements FILE" in capsys.readouterr().err


def test_policy_objective_is_validated(tmp_path):
    from oracle.policy import load_policy
    from oracle.errors import PolicyError
    bad = tmp_path / "p.yaml"
    bad.write_text("measurements:\n  objective: 0:1\n")
    with pytest.raises(PolicyError, match="objective"):
        load_policy([bad])


def test_plot_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra (scripts/dev-setup installs it)")
    from types import SimpleNamespace

    from oracle.cli.plot import plot
    from oracle.tuning.runner import LayerGroup, TuneResult
    from oracle.tuning.schema import Reference
    group = LayerGroup(SimpleNamespace(role="qkv_proj"), 2, "L")
    result = TuneResult([group], [entry("a", 1, 0.1), entry("a", 16, 0.2), entry("b", 1, 0.3), entry("b", 16, 0.1)],
                        [Reference(layer_key="L", m=1, bf16_ms=0.05, hbm_ms=0.01),
                         Reference(layer_key="L", m=16, bf16_ms=0.06, hbm_ms=0.01)])
    out = tmp_path / "p.png"
    plot(result, parse_objective("decode"), str(out), "CPU")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_progress_bar_only_on_a_terminal():
    from oracle.tuning.runner import progress_bar
    assert progress_bar(10, enabled=False) is None
    pytest.importorskip("tqdm", reason="the tune extra (scripts/dev-setup installs it)")
    bar = progress_bar(10, enabled=True)
    assert bar is not None and bar.total == 10
    bar.close()


def test_synthetic_weights_come_from_a_quantize_weight_hook():
    """The core names no plugin: `oracle tune` hands the runner the registry's quantize_weight hook
    (oracle-emulation's reference codecs); without one, the error says what is missing."""
    torch = pytest.importorskip("torch")
    from oracle import LinearLayer
    from oracle.registry import Registry
    from oracle.tuning import synthetic
    import oracle_emulation.plugin as emulation

    layer = LinearLayer(name="q", in_features=256, out_features=128, weight_format="fp8_channel")
    with pytest.raises(RuntimeError, match="no plugin quantizes fp8_channel weights"):
        synthetic.weights(layer, torch.device("cpu"), lambda **kwargs: None)
    hook = Registry.from_plugins([("emulation", emulation)]).pm.hook.quantize_weight
    tensors = synthetic.weights(layer, torch.device("cpu"), hook)
    assert tensors["weight"].dtype == torch.float8_e4m3fn and list(tensors["weight"].shape) == [128, 256]
    assert list(tensors["weight_scale"].shape) in ([128], [128, 1])    # one scale per output channel


def test_ranking_returns_an_order_and_every_reason_without_touching_a_trace():
    """ranking.order is pure: passing candidates and their figures in, the winner's index and why
    each won or lost out (the engine writes those into the trace)."""
    from types import SimpleNamespace as NS

    from oracle.objective import Objective
    from oracle.ranking import order
    from oracle.tuning.measurements import CandidateTimes, MeasurementSet

    def pair(name, testing_only=False):
        return NS(name=name, testing_only=testing_only), NS(name="m", activation="bf16")

    passing = [pair("slow"), pair("fast"), pair("broken"), pair("unmeasured"), pair("reference", True)]
    table = {("slow", "m", "bf16"): CandidateTimes({1: 2.0}, {1: "graph"}),
             ("fast", "m", "bf16"): CandidateTimes({1: 0.5}, {1: "graph"}),
             ("broken", "m", "bf16"): CandidateTimes(error="apply: RuntimeError"),
             ("reference", "m", "bf16"): CandidateTimes({1: 0.1}, {1: "eager"}, testing_only=True)}
    ranked = order(passing, table, MeasurementSet([], Objective("decode")))
    assert (ranked.winner, ranked.by_measurement) == (1, True)
    reasons = [reason for reason, _ in ranked.verdicts]
    assert reasons[1].startswith("0.5 ms @M=1 (graph)") and "fastest measured of 2" in reasons[1]
    assert reasons[0].startswith("measured slower: 2 ms against 0.5 ms for fast")
    assert reasons[2] == "failed during tuning, never chosen by measurement: apply: RuntimeError"
    assert reasons[3].startswith("not measured at the objective's token counts")
    assert reasons[4].startswith("testing-only kernel")          # 0.1 ms, yet held back
    nothing = order(passing[:2], {}, MeasurementSet([], Objective("decode")))
    assert (nothing.winner, nothing.by_measurement, nothing.verdicts) == (0, False, ())
