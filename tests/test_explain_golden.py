"""Golden output of the text renderer on two shipped models (exact bytes of `oracle explain`).

The text cites policy and kernel YAML lines, so editing those files changes it on
purpose. Review the difference, then regenerate with
`UPDATE_GOLDEN=1 pytest tests/test_explain_golden.py`. The simulated target is stated to
have b12x 1.5.1 (no flashinfer-python) and triton, so the text does not depend on this machine's packages.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"

CASES = {
    # gpt-oss on SM120 with b12x MoE requested: biased, clamped-SwiGLU experts -> no kernel, exit 2
    "explain_gpt-oss-20b_rtx-pro-6000_moe-b12x.txt": (
        ["--model", "gpt-oss-20b", "--device", "rtx-pro-6000", "--moe-backend", "b12x"], 2),
    # DeepSeek-R1 FP8 block on SM120, automatic selection: b12x linear, N=576 and the MoE fall back
    "explain_deepseek-r1_rtx-pro-6000.txt": (["--model", "deepseek-r1", "--device", "rtx-pro-6000"], 0),
}


@pytest.mark.parametrize("golden", sorted(CASES))
def test_text_output_matches_golden(golden):
    argv, code = CASES[golden]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "ORACLE_"))}
    argv = [*argv, "--with-package", "b12x=1.5.1", "--with-package", "flashinfer-python=none",
            "--with-package", "triton=3.6.0"]
    out = subprocess.run([sys.executable, "-m", "oracle.cli", "explain", *argv], cwd=REPO, capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == code, out.stderr
    path = GOLDEN / golden
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(out.stdout)
    assert path.is_file(), f"{path} missing; create it with UPDATE_GOLDEN=1"
    assert out.stdout == path.read_text()
