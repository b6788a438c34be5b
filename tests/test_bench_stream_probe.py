"""bench/stream_probe's read-only kernels read every word of the matrix once (the figures it prints are the
matrix's bytes over the time): stream_probe.self_check, their sums against torch's, in Triton's CPU interpreter
where there is no GPU (a subprocess: the interpreter must be on before Triton is first imported), on the GPU
otherwise; and its --tiles specs."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))


def test_kernels_read_every_word_once():
    if torch.cuda.is_available():
        import stream_probe
        stream_probe.self_check("cuda")
        return
    pytest.importorskip("numpy")                  # the interpreter's
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, str(BENCH / "stream_probe.py"), "--self-check"], env=env, cwd=BENCH,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "every word read once" in out.stdout


def test_tile_specs():
    from stream_probe import TILES, tile_spec

    assert tile_spec("256x128:1:4:8") == (256, 128, 1, 4, 8)
    assert all(len(t) == 5 for t in TILES)
    with pytest.raises(argparse.ArgumentTypeError, match="BNxBK:SPLIT:STAGES:WARPS"):
        tile_spec("256x128:1:4")
