"""`oracle explain --detect` on a real CUDA device: the detected platform, not a preset."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _cuda_capability() -> tuple[tuple[int, int], str] | None:
    if importlib.util.find_spec("torch") is None:
        return None
    import torch  # only here: the engine itself never imports torch

    if not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability()), torch.cuda.get_device_name()


pytestmark = pytest.mark.gpu


def test_detect_reports_the_real_device():
    found = _cuda_capability()
    if found is None:
        pytest.skip("needs a CUDA device (torch is missing or torch.cuda.is_available() is False)")
    capability, device_name = found
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "ORACLE_"))}
    out = subprocess.run([sys.executable, "-m", "oracle.cli", "explain", "--model", "deepseek-r1", "--detect",
                          "--format", "json"], cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode in (0, 2), out.stderr
    data = json.loads(out.stdout)
    platform = data["platform"]
    assert platform["simulated"] is False
    assert tuple(platform["capability"]) == capability and platform["device_name"] == device_name
    if capability[0] != 12:  # b12x needs SM12x: no layer may end on it, and the trace says why
        for entry in data["layers"]:
            assert entry["backend"] != "b12x"
            for c in entry["candidates"]:
                if c["backend"] == "b12x" and c["stage"] == "platform":
                    assert c["rule"].split(":")[0].endswith("kernels.yaml")
