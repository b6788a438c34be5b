"""oracle_torch.block_gemv (FP8 block W8A8 at decode sizes, one launch) run by Triton's CPU interpreter.

Reference, independent of the kernel: the activation codes and 1x128 scales of oracle-emulation's
rounding (checked here against oracle_emulation.activations) times the weight codes and their
128x128 block scales, summed per group in float64. The kernel's fp32 output must agree to fp32
rounding (its products are exact; only the summation order differs), for one row with an all-zero
group, an all-zero row, tiles of 8 to 128 output rows, N not a multiple of 128, 1 to 8 groups per load (K of
one, two or more chunks) and K split in 1, 2 or 4 slices, the row rounded inside or by the fused quantizer
first (prequant), summed in order by a second launch or by the
last program to arrive (arrival counters, back at zero after each call); the tensor-core variant
(block_gemv_tc: 32 to 128 output rows per program, K whole or split) against the same reference."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

_SCRIPT = r"""
import torch
from oracle_emulation import activations as ref
from oracle_torch import block_gemv as B, gemm, quantize as Q
torch.manual_seed(0)
cnt = B.counter(384, "cpu")
for m, n, k, bn, groups, split, ticket in [
        (1, 256, 384, 16, 4, 1, 0), (1, 128, 256, 128, 2, 1, 0), (1, 384, 1024, 8, 4, 1, 0), (1, 128, 256, 16, 1, 1, 0),
        (1, 256, 1024, 32, 8, 1, 0), (1, 256, 1024, 8, 2, 4, 0), (1, 136, 512, 8, 4, 2, 0), (1, 128, 256, 16, 1, 2, 0),
        (1, 256, 1024, 8, 2, 4, 1), (1, 136, 512, 4, 4, 2, 1), (1, 136, 512, 4, 4, 2, 1)]:
    x = (torch.randn(m, k) * torch.logspace(-2, 2, m)[:, None]).to(torch.bfloat16)
    if k == 1024:
        x[0, :128] = 0                     # an all-zero group: scale 1
    if n == 128 and bn == 16:
        x[0] = 0                           # an all-zero row
    w = (torch.randn(n, k) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    ws = torch.rand(-(-n // 128), k // 128) + 0.01
    y = B.block_gemv(x, w, gemm.block_weight_scale(ws, "kblocks"), torch.float32, block_n=bn, groups=groups,
                     split=split, counter=cnt if ticket else None)
    assert not cnt.any(), "arrival counters not reset"
    xq, sx = Q.fp8_per_group(x)
    deq = (xq.float().reshape(m, k // 128, 128) * sx[..., None]).reshape(m, k)
    assert torch.equal(deq.to(torch.bfloat16), ref.fp8_qdq(x, "group")), "codes differ from emulation's"
    want = torch.zeros(m, n, dtype=torch.float64)
    for g in range(k // 128):
        cols = slice(128 * g, 128 * g + 128)
        want += (xq[:, cols].double() @ w[:, cols].double().T) * sx[:, g:g + 1].double() \
            * ws[:, g].repeat_interleave(128)[None, :n].double()
    err = ((y.double() - want).abs().max() / want.abs().max()).item()
    assert y.shape == (m, n) and (err < 1e-6 or want.abs().max() == 0 and not y.any()), (m, n, k, err)
    yp = B.block_gemv(x, w, gemm.block_weight_scale(ws, "kblocks"), torch.float32, block_n=bn, groups=groups,
                      split=split, counter=cnt if ticket else None, prequant=True)    # the row rounded first
    errp = ((yp.double() - want).abs().max() / want.abs().max()).item()
    assert errp < 1e-6 or want.abs().max() == 0 and not yp.any(), ("prequant", m, n, k, errp)
    if n % 128 == 0 and bn == 8:      # the tensor-core variant against the same reference (K whole and split)
        for tbn, tsplit in ((64, None), (128, 1), (32, 2)):
            yt = B.block_gemv_tc(x, w, gemm.block_weight_scale(ws, "kblocks"), torch.float32, block_n=tbn, split=tsplit)
            err = ((yt.double() - want).abs().max() / want.abs().max()).item()
            assert yt.shape == (m, n) and err < 1e-6, ("tc", n, k, tbn, err)
try:
    B.block_gemv_tc(torch.zeros(1, 256), torch.zeros(96, 256).to(torch.float8_e4m3fn),
                    gemm.block_weight_scale(torch.ones(1, 2), "kblocks"), torch.float32)
except ValueError as exc:
    assert "N % BLOCK_N" in str(exc)
else:
    raise AssertionError("N not a multiple of BLOCK_N accepted by the tensor-core variant")
try:
    B.block_gemv(torch.zeros(B.MAX_ROWS + 1, 128), w[:, :128].contiguous(), gemm.block_weight_scale(ws[:, :1], "kblocks"),
                 torch.float32)
except ValueError as exc:
    assert "M <=" in str(exc)
else:
    raise AssertionError("too many rows accepted")
try:
    B.block_gemv(torch.zeros(1, 384), (torch.zeros(128, 384)).to(torch.float8_e4m3fn),
                 gemm.block_weight_scale(torch.ones(1, 3), "kblocks"), torch.float32, split=2)
except ValueError as exc:
    assert "split 2" in str(exc)
else:
    raise AssertionError("a split that does not divide K/128 accepted")
print("ok")
"""


def test_block_gemv_matches_the_codes_times_scales_reference_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_plan_splits_k_until_every_sm_has_several_programs():
    from oracle_torch import block_gemv as B

    for n, k in [(5120, 2048), (2048, 4096), (7168, 16384), (32768, 512), (24576, 1536), (128, 128)]:
        p = B.plan(n, k, 132)
        slice_groups = k // 128 // p.split
        assert (k // 128) % p.split == 0 and slice_groups % p.groups == 0, (n, k, p)
        tiles = -(-n // p.block_n)
        # either enough programs, or K cannot be halved any further into whole loads
        assert tiles * p.split >= B.PROGRAMS_PER_SM * 132 or slice_groups % (2 * p.groups), (n, k, p)
    assert B.plan(5120, 2048, 132, split=1).split == 1


def test_one_row_takes_the_gemv_only_on_layers_where_it_led_cublas(monkeypatch):
    """r6 (H200): the GEMV led cuBLASLt on Qwen3-30B's q/k/v and o_proj and trailed it ~2x on
    DeepSeek-R1's q_b and o_proj, so the layer picks it by weight count, not by row count alone."""
    from oracle_torch import block_gemv as B, linear

    class OneCudaRow:                      # what the choice reads of an activation; no GPU needed
        is_cuda, shape = True, (1, 0)

    monkeypatch.delenv(linear.QUANT_ENV, raising=False)
    monkeypatch.delenv(B.ENV, raising=False)
    layer = linear.TorchBlockFP8Linear.__new__(linear.TorchBlockFP8Linear)
    for (n, k), want in {(5120, 2048): True, (2048, 4096): True, (24576, 1536): False, (7168, 16384): False}.items():
        layer.n, layer.k = n, k
        assert layer._gemv_serves(OneCudaRow()) is want, (n, k)
    OneCudaRow.shape = (2, 0)
    layer.n, layer.k = 5120, 2048
    assert not layer._gemv_serves(OneCudaRow())
    monkeypatch.setenv(B.ENV, "0")
    OneCudaRow.shape = (1, 0)
    assert not layer._gemv_serves(OneCudaRow())
    monkeypatch.setenv(B.ENV, "prequant")
    assert B.prequant() and layer._gemv_serves(OneCudaRow())
    monkeypatch.setenv(B.ENV, "inline")
    assert not B.prequant() and layer._gemv_serves(OneCudaRow())
    monkeypatch.delenv(B.ENV)
    assert B.prequant() is B.PREQUANT is True      # r9: the row rounded first was 0.9 us faster on both shapes
    monkeypatch.setenv(B.ENV, "fast")
    with pytest.raises(ValueError, match="expected one of 0, 1, prequant, inline"):
        B.prequant()
