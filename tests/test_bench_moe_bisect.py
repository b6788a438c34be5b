"""bench/moe_bisect.py builds a "-zp" model's INT4 experts with GPTQ zero points, as bench_peers does: until
the sixteenth pass it quantized every INT4 model symmetrically, so its "qwen3-30b-a3b-int4-zp" rounds (R45)
timed the symmetric experts under the zero-point name."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import moe_bisect  # noqa: E402
import sweep_moe  # noqa: E402


def test_zero_point_models_get_zero_points(monkeypatch):
    monkeypatch.setattr(sweep_moe, "DEVICE", "cpu")
    zp = moe_bisect.tensors_for("qwen3-30b-a3b-int4-zp", experts=2)
    sym = moe_bisect.tensors_for("qwen3-30b-a3b-int4", experts=2)
    for key in ("w13", "w2"):
        assert sym[f"{key}_zero_point"] is None
        z = zp[f"{key}_zero_point"]
        assert z is not None and z.shape[0] == 2          # one set per expert: GPTQ's packed zero points per group
        assert z.shape[1] == zp[f"{key}_scale"].shape[1]
        assert zp[key].shape == sym[key].shape
