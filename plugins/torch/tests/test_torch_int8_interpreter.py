"""oracle_torch.int8_triton under Triton's CPU interpreter (the CUDA run is test_torch_int8_gpu.py):
the one-launch quantizer gives exactly the codes and scales of the eager reference
(oracle_torch.cpu_int.quantize_per_token: oracle-emulation's int8 rule), ties and an all-zero row
included, with the padding rows zero; the scale epilogue in float32 equals (acc * s_x) * s_w exactly.
Its bf16 output with a bias is compared within one bf16 unit of |acc * s| + |bias| per rounding (two roundings, 2**-6): the interpreter's float-to-bf16 cast truncates
instead of rounding to nearest (on a GPU the test compares it exactly). Runs in a subprocess: the
interpreter is chosen when Triton's kernels are defined, so it must be set before their import.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from oracle_torch import int8_triton
from oracle_torch.cpu_int import quantize_per_token
torch.manual_seed(0)
for m, k, rows in [(3, 96, 32), (17, 1024, 17), (5, 2056, 32)]:
    x = (torch.randn(m, k) * 3).to(torch.bfloat16)
    x[0, :6] = torch.tensor([127.0, 63.5, -63.5, 0.5, 1.5, 2.5])
    x[1] = 0
    q, s = int8_triton.int8_per_token(x, rows)
    rq, rs = quantize_per_token(x)
    assert torch.equal(q[:m], rq) and torch.equal(s[:m], rs), (m, k)
    assert bool((q[m:] == 0).all()) and bool((s[m:] == 1).all())
    assert q[0, :6].tolist() == [127, 64, -64, 0, 2, 2], q[0, :6]
    w = torch.randint(-127, 128, (64, k), dtype=torch.int8)
    sw = torch.rand(64) * 0.01
    acc = torch._int_mm(q, w.t())
    ref = acc[:m].float() * s[:m] * sw[None, :]
    assert torch.equal(int8_triton.scale_epilogue(acc, s, sw, None, m, torch.float32), ref)
    b = torch.randn(64).to(torch.bfloat16)
    y = int8_triton.scale_epilogue(acc, s, sw, b, m, torch.bfloat16).float()
    want = (ref.to(torch.bfloat16) + b).float()
    assert bool(((y - want).abs() <= (ref.abs() + b.float().abs()) * 2.0 ** -6).all())
print("ok")
"""


def test_int8_triton_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
