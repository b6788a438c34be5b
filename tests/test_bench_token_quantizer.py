"""bench/token_quantizer.py --smoke: the quantizer A/B's bit check (every variant's codes and scales against torch's
float8 cast, per token and per 1x128 group, a row chunked above ONE_TILE_MAX_K) runs end to end in Triton's CPU
interpreter, so the GPU round's script cannot break unnoticed; and a wrong byte makes it exit 1."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")
BENCH = Path(__file__).resolve().parents[1] / "bench"


def _run(extra_code: str = "") -> subprocess.CompletedProcess:
    code = ("import sys; sys.argv = ['token_quantizer.py', '--smoke']; import token_quantizer as tq; " + extra_code +
            "sys.exit(tq.main())")
    return subprocess.run([sys.executable, "-c", code], cwd=BENCH, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRITON_INTERPRET": "1"})


@pytest.mark.slow
def test_the_smoke_run_checks_every_variant_and_passes():
    out = _run()
    assert out.returncode == 0, out.stderr[-2000:]
    assert "codes and scales: all equal to torch's cast" in out.stdout
    assert out.stdout.count("MISMATCH") == 0 and "chunks 4096" in out.stdout and "groups, hardware + reciprocal" in out.stdout


@pytest.mark.slow
def test_a_wrong_byte_is_a_mismatch_and_exit_1():
    """The per-token reference's bytes with their last bit flipped: every per-token variant disagrees."""
    out = _run("real = tq.reference; tq.reference = lambda x: (lambda c, s: (c ^ 1, s))(*real(x)); ")
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    assert "MISMATCH" in out.stdout
