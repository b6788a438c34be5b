"""Hostile tuning files through `oracle explain --measurements` (and ORACLE_MEASUREMENTS, a policy's
measurements.files), in-process.

A good file is written from the live registry (a real layer key and real kernels of
qwen3-30b-a3b-fp8 on a simulated H200); each case damages one thing. Every case: exit 0, 1
or 2 (never 70, never a traceback); a refusal is one `error:` block naming the file and, for
a field, its path (entries.3.median_ms); a file that is accepted holds only values the
schema promises (times finite and > 0, token counts ints), and entries nothing can use are
reported, never dropped silently. Bound: hardening_scale.CASE_BOUND_S per case.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hardening_scale import SCALE, bounded
from oracle.cli import main
from oracle.exitcodes import INPUT, NO_KERNEL, OK
from oracle.models import load_model
from oracle.platform import Platform
from oracle.safeio import MAX_TUNING_BYTES
from oracle.session import get_engine, get_registry
from oracle.tuning import store
from oracle.tuning.measurements import UnusedMeasurementsWarning, load_measurements
from oracle.tuning.metadata import live_metadata
from oracle.tuning.runner import distinct_layers

MODEL = "qwen3-30b-a3b-fp8"
_CASES = {"files": 0, "refused": 0, "accepted": 0, "unusable_reported": 0}


@pytest.fixture(scope="module")
def good() -> dict:
    """A valid tuning file: 2 candidates of every distinct layer, at M = 1 and 16."""
    platform, registry = Platform.preset("h200"), get_registry()
    entries = []
    for g in distinct_layers(load_model(MODEL)):
        for i, (spec, mode) in enumerate(get_engine().viable(g.layer, platform, None, {})[:2]):
            for m in (1, 16):
                entries.append({"layer_key": g.key, "layer": g.layer.name, "kernel": spec.name,
                                "backend": spec.backend, "mode": mode.name, "activation_format": mode.activation,
                                "m": m, "status": "ok", "median_ms": 0.01 * (i + 1) * m, "min_ms": 0.009 * m,
                                "max_ms": 0.02 * (i + 1) * m, "iqr_ms": 0.001, "repeats": 5, "method": "eager",
                                "testing_only": bool(spec.testing_only)})
    meta = json.loads(live_metadata(platform, registry).model_dump_json())
    return {"schema_version": 1, "metadata": meta, "entries": entries, "references": []}


def explain(*extra: str, env: dict | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), bounded():
            code = main(["explain", "--model", MODEL, "--device", "h200", *extra])
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return code, out.getvalue(), err.getvalue()


HOSTILE = st.sampled_from([0, -1, 0.0, -0.5, True, False, "0.5", "1", None, [], {}, "x" * 70, 2 ** 70,
                           math.inf, -math.inf, math.nan, 1e-320, 1.5])
FIELDS = ["m", "median_ms", "min_ms", "max_ms", "iqr_ms", "repeats", "testing_only", "status", "kernel", "mode",
          "layer_key", "activation_format", "method", "unknown_key"]


def _valid(entry: dict) -> bool:
    """What the schema promises for an accepted entry (independent of the code under test)."""
    times = [entry.get(k) for k in ("median_ms", "min_ms", "max_ms") if entry.get(k) is not None]
    return (type(entry["m"]) is int and entry["m"] > 0
            and all(type(t) in (int, float) and 0 < t <= 3_600_000 for t in times)
            and type(entry.get("testing_only", False)) is bool
            and (entry["status"] != "ok" or entry.get("median_ms") is not None))


@settings(max_examples=30 * SCALE, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_entries_are_refused_by_field_or_hold_valid_values(good, tmp_path, data):
    doc = json.loads(json.dumps(good))
    i = data.draw(st.integers(0, len(doc["entries"]) - 1), label="entry")
    field = data.draw(st.sampled_from(FIELDS), label="field")
    value = data.draw(HOSTILE, label="value")
    doc["entries"][i][field] = value
    path = tmp_path / f"t{_CASES['files']}.json"
    path.write_text(json.dumps(doc, allow_nan=True))
    _CASES["files"] += 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code, out, err = explain("--measurements", str(path))
    assert code in (OK, INPUT, NO_KERNEL) and "Traceback" not in err and "internal error" not in err
    if code == INPUT:
        _CASES["refused"] += 1
        assert out == "", "a report was printed after the refusal"
        assert err.startswith(f"error: {path}: ") and "\n" == err[-1] and err.count("error:") == 1, err
        assert f"entries.{i}" in err or "Infinity" in err or "NaN" in err, err
    else:
        _CASES["accepted"] += 1
        assert _valid(doc["entries"][i]), f"accepted {field}={value!r}"
        if field in ("kernel", "mode", "layer_key", "activation_format"):   # nothing can use it: said so
            assert "skipped, nothing here can use them" in err, err


@pytest.mark.parametrize("field, value", [("kernel", "thirdparty.nope"), ("mode", "w0a0"),
                                          ("layer_key", "{\"type\":\"Nope\"}")])
def test_entries_nothing_can_use_are_reported_not_dropped(good, tmp_path, field, value):
    doc = json.loads(json.dumps(good))
    doc["entries"][0][field] = value
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    mset = load_measurements([path])
    with pytest.warns(UnusedMeasurementsWarning, match=f"{path}: skipped, nothing here can use them: 1 entries"):
        table = mset.table(Platform.preset("h200"), get_registry())
    assert any(str(path) in text for text in table.ignored)
    _CASES["unusable_reported"] += 1


@pytest.mark.parametrize("damage, needle", [
    (lambda t: t.replace('"schema_version": 1', '"schema_version": true'), "schema_version: expected 1"),
    (lambda t: "[" * 5000 + "]" * 5000, "nested deeper than"),
    (lambda t: t.replace('"median_ms": 0.01', '"median_ms": Infinity', 1), "Infinity is not JSON"),
    (lambda t: t.replace('"median_ms": 0.01', '"median_ms": NaN', 1), "NaN is not JSON"),
])
def test_whole_file_damage_is_one_error(good, tmp_path, damage, needle):
    path = tmp_path / "t.json"
    path.write_text(damage(json.dumps(good)))
    code, _, err = explain("--measurements", str(path))
    assert code == INPUT and err.startswith(f"error: {path}: ") and needle in err, err


def test_non_utf8_names_the_byte(good, tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(json.dumps(good).encode()[:50] + b"\xff\xfe" + json.dumps(good).encode()[50:])
    code, _, err = explain("--measurements", str(path))
    assert code == INPUT and f"{path}: not UTF-8 text: byte 50" in err, err


def _special_paths(tmp_path: Path) -> list[tuple[str, str]]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(MAX_TUNING_BYTES + 1)   # sparse: no disk used
    return [(str(fifo), "a FIFO"), ("/dev/zero", "a character device"), ("/dev/urandom", "a character device"),
            (str(tmp_path), "a directory"), (str(big), f"over the limit of {MAX_TUNING_BYTES} bytes")]


@pytest.mark.parametrize("how", ["--measurements", "ORACLE_MEASUREMENTS", "policy"])
def test_fifos_devices_folders_and_huge_files_are_refused_at_once(tmp_path, how):
    folder = tmp_path / how
    folder.mkdir()
    for path, what in _special_paths(folder):
        if how == "--measurements":
            code, out, err = explain("--measurements", path)
        elif how == "ORACLE_MEASUREMENTS":
            code, out, err = explain(env={"ORACLE_MEASUREMENTS": path})
        else:
            policy = tmp_path / "p.yaml"
            policy.write_text(f"version: 1\nmeasurements:\n  files: [{json.dumps(path)}]\n")
            code, out, err = explain("--policy", str(policy))
        assert code == INPUT and path in err and what in err and out == "", (how, path, err)
        _CASES["refused"] += 1


@pytest.mark.parametrize("value", ['"yes"', "1", "null", '"true"'])
def test_allow_testing_only_is_strictly_boolean(tmp_path, value):
    policy = tmp_path / "p.yaml"
    policy.write_text(f"version: 1\nmeasurements:\n  allow_testing_only: {value}\n")
    code, _, err = explain("--policy", str(policy))
    assert code == INPUT and "measurements.allow_testing_only" in err and str(policy.name) in err, err


def test_objective_at_an_unmeasured_m_is_stated(good, tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(good))
    code, out, err = explain("--measurements", str(path), "--objective", "4096:1", "--format", "json")
    assert code == OK, err
    layers = [layer for layer in json.loads(out)["layers"] if layer["status"] == "selected"]
    assert layers and all(any("objective 4096:1 names no token count these candidates were measured at (M=1,16)"
                                  in note for note in layer["notes"]) for layer in layers), layers[0]["notes"]


def test_report_size_is_bounded_per_candidate(good, tmp_path):
    """At most MAX_MS token counts per candidate in a file, so a report repeats at most that many."""
    from oracle.tuning.schema import MAX_MS
    doc = json.loads(json.dumps(good))
    first = doc["entries"][0]
    doc["entries"] = [dict(first, m=m) for m in range(1, MAX_MS + 2)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(store.TuningFileError, match=f"{path}: entries: Value error, more than {MAX_MS} token counts for kernel"):
        store.read(path)


def _maximal(good: dict, failed: bool) -> dict:
    """Every viable candidate of every distinct layer at MAX_MS token counts, each figure distinct
    (ok), or every candidate but the last failed with the longest error the schema allows (failed)."""
    from oracle.tuning.schema import MAX_MS
    platform, entries = Platform.preset("h200"), []
    for g in distinct_layers(load_model(MODEL)):
        viable = get_engine().viable(g.layer, platform, None, {})
        for i, (spec, mode) in enumerate(viable):
            base = {"layer_key": g.key, "layer": g.layer.name, "kernel": spec.name, "backend": spec.backend,
                    "mode": mode.name, "activation_format": mode.activation, "repeats": 5,
                    "testing_only": bool(spec.testing_only)}
            if failed and i < len(viable) - 1:
                entries.append(dict(base, m=1, status="failed", error=(f"{spec.name} " + "e" * 2000)[:2000]))
                continue
            entries += [dict(base, m=m, status="ok", median_ms=0.001 * (i + 1) * m + 1e-7 * len(entries),
                             method="graph") for m in range(1, (1 if failed else MAX_MS) + 1)]
    return {**good, "entries": entries}


#: The JSON report's bound for a maximal tuning file (stated in docs/user-guide.md): every measured
#: figure is written once (top-level `measurements`), and what each layer repeats per candidate is
#: bounded (at most ranking.SHOWN figures or token counts and ranking.SHOWN_ERROR characters of an error).
REPORT_BOUND_BYTES = 1 << 20
PER_LAYER_CANDIDATE_BYTES = 1024


@pytest.mark.parametrize("failed", [False, True], ids=["64-figures-each", "2000-character-errors"])
def test_report_of_a_maximal_tuning_file_is_bounded(good, tmp_path, failed):
    """Figures are not repeated per layer: the report grows with distinct signatures, not layers."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_maximal(good, failed)))
    code, plain, err = explain("--format", "json")
    assert code == OK, err
    code, out, err = explain("--measurements", str(path), "--format", "json")
    assert code == OK, err
    report = json.loads(out)
    measured = [c for layer in report["layers"] for c in layer["candidates"] if c["rule"] == str(path)]
    assert len(measured) > 100, "the file was not used"
    growth = len(out) - len(plain)
    assert len(out) < REPORT_BOUND_BYTES, f"{len(out)} bytes"
    assert growth < PER_LAYER_CANDIDATE_BYTES * len(measured) + path.stat().st_size, growth
    if not failed:
        assert len(out) < 4 * path.stat().st_size, (len(out), path.stat().st_size)
        refs = {c["measured_ref"] for c in measured}
        # one table per distinct (signature, candidate), however many layers share it; none dangles
        assert refs == set(report["measurements"]) and len(refs) < len(measured) / 10
        table = report["measurements"][measured[0]["measured_ref"]]
        assert table["kernel"] == measured[0]["kernel"] and len(table["measured"]) == 64
        assert all(isinstance(f["ms"], float) and f["method"] == "graph" for f in table["measured"])
    else:
        errors = [c["reason"] for c in measured if c["reason"].startswith("failed during tuning")]
        assert errors and all(r.endswith("characters; the tuning file holds all of it)") and len(r) < 400
                              for r in errors), errors[0]


@pytest.mark.parametrize("field, size", [("error", 2001), ("kernel", 257), ("layer_key", 8193)])
def test_text_fields_are_bounded(good, tmp_path, field, size):
    """A 1 MB error string would be repeated in the report for every layer that shows the candidate."""
    doc = json.loads(json.dumps(good))
    doc["entries"][0].update({field: "x" * size, **({"status": "failed"} if field == "error" else {})})
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(store.TuningFileError, match=f"{path}: entries.0.{field}: String should have at most"):
        store.read(path)
