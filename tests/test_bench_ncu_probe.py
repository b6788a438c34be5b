"""bench/ncu_probe.py's options, checked on CPU before any profiler run: --config takes JSON launch parameters for
oracle-triton's dense GEMM only (a device round that misspells it fails at once, not after the machine started)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from ncu_probe import main  # noqa: E402


@pytest.mark.parametrize("argv, says", [
    (["--dense", "2048x4096", "--m", "256", "--cand", "gemlite", "--config", '{"BLOCK_M": 64}'], "--config"),
    (["--moe", "deepseek-r1", "--config", '{"BLOCK_M": 64}'], "--config"),
    (["--dense", "2048x4096", "--config", "BLOCK_M=64"], "--config"),
])
def test_config_is_refused_where_it_cannot_apply(argv, says, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and says in capsys.readouterr().err
