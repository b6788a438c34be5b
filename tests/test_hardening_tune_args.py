"""Hostile `oracle tune` arguments, in-process: every input is checked before the first timing.

The runner's `tune` is replaced by a stand-in that records that timing began and returns
no figures, so a case costs milliseconds. Each case makes one argument hostile (--m,
--repeats, --device, --out, --plot, the lock beside --out): exit 1 (bad value) or 64
(malformed option) per the documented table, one `error:` line naming the option, timing
never started, and the output folder holds exactly what it held before (no file written,
no partial or temporary file left). A case with nothing hostile exits 0 and writes the file.
Bound: hardening_scale.CASE_BOUND_S per case.
"""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hardening_scale import SCALE, bounded
from oracle.cli import main
from oracle.exitcodes import INPUT, OK, USAGE
from oracle.tuning.runner import Runner, TuneResult
from oracle.tuning.schema import MAX_M, MAX_MS

MODEL = "qwen3-30b-a3b-fp8"
_CASES = {"cases": 0, "exit_0": 0, "exit_1": 0, "exit_64": 0}


@pytest.fixture(scope="module", autouse=True)
def warm(tmp_path_factory):
    """One untimed run first: importing torch and reading the model once is not what a case measures."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Runner, "tune", lambda self, groups, candidates, ms, progress=None: TuneResult(list(groups)))
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(["tune", "--model", MODEL, "--m", "1", "--out", str(tmp_path_factory.mktemp("warm") / "t.json")])


@pytest.fixture
def no_timing(monkeypatch):
    started = []

    def tune(self, groups, candidates, ms, progress=None):
        started.append(list(ms))
        return TuneResult(list(groups))
    monkeypatch.setattr(Runner, "tune", tune)
    return started


def run(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), bounded():
        try:
            code = main(["tune", "--model", MODEL, *args])
        except SystemExit as exc:     # argparse usage errors
            code = exc.code
    return code, err.getvalue()


M_TEXT = st.one_of(
    st.lists(st.integers(-5, MAX_M + 5), min_size=1, max_size=4).map(lambda v: ",".join(map(str, v))),
    st.sampled_from(["", ",", "1,,2", "1e3", "0x10", "1.5", " 1 ", "१", "99999999999999999999", "100000000",
                     ",".join(map(str, range(1, MAX_MS + 2))), str(MAX_M), "1,16"]),
    st.text(max_size=12))
REPEATS = st.one_of(st.integers(-3, 20_000).map(str), st.sampled_from(["", "x", "1.5", "0", "-1", "1e9"]))
DEVICE = st.sampled_from(["", " ", "banana", "h200", "cpu", "CPU"])


def _m_values(text: str) -> set[int] | None:
    """The token counts --m names when it is well formed (whole numbers 1..MAX_M, at most MAX_MS), else None."""
    items = [t.strip() for t in text.split(",")]
    if not all(t.isascii() and t.isdigit() for t in items):
        return None
    values = {int(t) for t in items}
    return values if all(1 <= v <= MAX_M for v in values) and len(values) <= MAX_MS else None


def _folder_state(folder: Path) -> dict:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


@settings(max_examples=60 * SCALE, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["--m", "--repeats", "--device"]), m=M_TEXT, repeats=REPEATS, device=DEVICE)
def test_hostile_values_are_refused_before_timing(no_timing, tmp_path_factory, which, m, repeats, device):
    folder = tmp_path_factory.mktemp("tune")
    out = folder / "t.json"
    args = ["--out", str(out), "--objective", "balanced"]
    args += {"--m": [f"--m={m}"], "--repeats": ["--m", "1", f"--repeats={repeats}"],
             "--device": ["--m", "1", f"--device={device}"]}[which]
    before = _folder_state(folder)
    no_timing.clear()
    code, err = run(args)
    _CASES["cases"] += 1
    _CASES[f"exit_{code}"] = _CASES.get(f"exit_{code}", 0) + 1
    assert "Traceback" not in err and "internal error" not in err, err
    if which == "--m":
        values = _m_values(m)
        expected = {INPUT} if values is None else {OK} if max(values) <= 4096 else {OK, INPUT}  # INPUT: memory
    elif which == "--repeats":
        expected = {OK} if repeats.isdigit() and 1 <= int(repeats) <= 10_000 else {USAGE}
    else:
        expected = {OK} if device.strip().lower() == "cpu" else {INPUT}
    assert code in expected, (which, m, repeats, device, code, err)
    if code == OK:
        assert no_timing and out.is_file()
        return
    assert not no_timing, "timing started before the refusal"
    assert _folder_state(folder) == before, "something was written"
    if code == INPUT:
        assert err.startswith("error: ") and which in err, err
        if which == "--m" and values is not None:
            assert "needs about" in err and "GiB" in err, err
    else:
        assert "usage error" in err and which in err, err


def _targets(tmp_path: Path) -> list[tuple[list[str], str, Path]]:
    """(args, expected text, folder that must stay untouched) for hostile output paths."""
    locked_dir = tmp_path / "lockdir"
    locked_dir.mkdir()
    (locked_dir / "t.json.lock").mkdir()          # the lock path is a folder
    fifo_dir = tmp_path / "fifo"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "t.json")
    plot_dir = tmp_path / "p.png"
    plot_dir.mkdir()
    return [
        (["--out", str(tmp_path)], "is a directory", tmp_path),
        (["--out", "/dev/zero"], "is a character device", tmp_path),
        (["--out", str(fifo_dir / "t.json")], "is a FIFO", fifo_dir),
        (["--out", str(locked_dir / "t.json")], "lock (FILE.lock)", locked_dir),
        (["--out", str(tmp_path / "ok.json"), "--plot", str(tmp_path / "missing" / "p.png")],
         "folder", tmp_path),
        (["--out", str(tmp_path / "ok.json"), "--plot", str(plot_dir)], "is a directory", tmp_path),
        (["--out", ""], "empty path", tmp_path),
    ]


def test_output_lock_and_plot_paths_are_checked_before_timing(no_timing, tmp_path):
    pytest.importorskip("matplotlib")
    for args, needle, folder in _targets(tmp_path):
        before = _folder_state(folder)
        code, err = run(["--m", "1", *args])
        _CASES["cases"] += 1
        assert code == INPUT and needle in err and ("--out" in err or "--plot" in err), (args, err)
        assert not no_timing, args
        assert _folder_state(folder) == before, args


def test_plot_is_written_whole_and_its_format_checked_first(no_timing, tmp_path):
    pytest.importorskip("matplotlib")
    code, err = run(["--m", "1", "--out", str(tmp_path / "t.json"), "--plot", str(tmp_path / "p.xyz")])
    assert code == INPUT and "--plot" in err and "expected a file name ending in one of" in err and not no_timing
    code, err = run(["--m", "1", "--out", str(tmp_path / "t.json"), "--plot", str(tmp_path / "p.png")])
    assert code == OK, err
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.png", "t.json", "t.json.lock"]   # no temporary file


def test_unwritable_folder_is_refused_before_timing(no_timing):
    """/proc takes no new file, for root too (a permission check would pass for root)."""
    code, err = run(["--m", "1", "--out", "/proc/oracle-tuning.json"])
    assert code == INPUT and "--out: cannot write in folder '/proc'" in err and not no_timing, err
    assert not Path("/proc/oracle-tuning.json").exists()


def test_huge_m_is_refused_with_a_memory_estimate_before_timing(no_timing, tmp_path):
    code, err = run(["--m", str(MAX_M), "--out", str(tmp_path / "t.json")])
    assert code == INPUT and "--m: M=1048576 needs about" in err and "GiB" in err and not no_timing, err
    code, err = run(["--m", str(MAX_M + 1), "--out", str(tmp_path / "t.json")])
    assert code == INPUT and f"token counts must be from 1 to {MAX_M}" in err


def test_device_empty_means_the_same_as_in_explain(no_timing, tmp_path):
    code, err = run(["--device", "", "--out", str(tmp_path / "t.json")])
    assert code == INPUT and "--device: empty device name" in err
    out = io.StringIO()
    with contextlib.redirect_stderr(out):
        assert main(["explain", "--model", MODEL, "--device", ""]) == INPUT
    assert "--device: empty device name" in out.getvalue()
