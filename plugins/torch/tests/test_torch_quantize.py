"""The GPU-side activation quantizers, run on the CPU: they must round exactly as the emulation
reference (oracle_emulation.activations) and as hand-computed E4M3/E2M1/E8M0 facts say."""
from __future__ import annotations

import pytest
import torch

from oracle_emulation import activations as ref
from oracle_torch import gemm, quantize

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def _inputs(dtype):
    x = torch.randn(7, 512) * torch.logspace(-3, 3, 7)[:, None]   # rows of very different magnitude
    x[3] = 0.0                                                       # an all-zero token
    x[5, :128] = 0.0                                                 # an all-zero 1x128 group
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fp8_per_tensor_matches_emulation(dtype):
    x = _inputs(dtype)
    q, s = quantize.fp8_per_tensor(x)
    assert q.dtype == torch.float8_e4m3fn and s.shape == ()
    assert torch.equal((q.float() * s).to(dtype), ref.fp8_qdq(x, "tensor"))


def test_fp8_static_scale_matches_emulation():
    x = _inputs(torch.bfloat16)
    scale = torch.tensor(0.37)
    q, s = quantize.fp8_per_tensor(x, scale)
    assert float(s) == pytest.approx(0.37)
    assert torch.equal((q.float() * s).to(x.dtype), ref.fp8_qdq(x, scale=scale))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp8_per_token_matches_emulation(dtype):
    x = _inputs(dtype)
    q, s = quantize.fp8_per_token(x)
    assert s.shape == (7, 1) and float(s[3]) == 1.0                # zero row: scale guarded to 1
    assert torch.equal((q.float() * s).to(dtype), ref.fp8_qdq(x, "token"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp8_per_group_matches_emulation(dtype):
    x = _inputs(dtype)
    q, s = quantize.fp8_per_group(x)
    assert s.shape == (7, 4) and float(s[5, 0]) == 1.0
    deq = (q.float().reshape(7, 4, 128) * s[..., None]).reshape(7, 512)
    assert torch.equal(deq.to(dtype), ref.fp8_qdq(x, "group"))


def test_fp8_saturates_instead_of_nan():
    """A static scale that puts values past 448 must saturate: on the H200 (torch 2.11+cu130) a bare
    cast of 465 or more gives NaN (tools/probe_scaled_mm.py), while this CPU build saturates; clamping
    first makes both devices agree with the emulation."""
    x = torch.tensor([[448.0, 464.0, 465.0, 1000.0, -1e6, 1.0] + [0.0] * 10])
    q, _ = quantize.fp8_per_tensor(x, torch.tensor(1.0))
    assert q.float()[0, :6].tolist() == [448.0, 448.0, 448.0, 448.0, -448.0, 1.0]


def test_fp8_hand_computed_values():
    """amax 896 -> scale 2; 3.3 / 2 = 1.65 rounds to 1.625 (E4M3 spacing 0.125 in [1, 2)); 0.3 / 2 = 0.15
    rounds to 0.15625 (spacing 2**-6 in [0.125, 0.25))."""
    x = torch.tensor([[896.0, 3.3, 0.3] + [0.0] * 13])
    q, s = quantize.fp8_per_tensor(x)
    assert float(s) == 2.0
    assert q.float()[0, :3].tolist() == [448.0, 1.625, 0.15625]


def test_mxfp8_matches_emulation_and_e8m0_facts():
    x = _inputs(torch.bfloat16)
    q, e = quantize.mxfp8(x)
    assert e.dtype == torch.uint8 and e.shape == (7, 16)
    scale = torch.exp2(e.double() - 127).float()                  # E8M0: 2**(byte - 127)
    deq = (q.float().reshape(7, 16, 32) * scale[..., None]).reshape(7, 512)
    assert torch.equal(deq.to(x.dtype), ref.mxfp8_qdq(x))
    assert int(e[3, 0]) == 0                                      # all-zero block: 2**-127
    y = torch.zeros(1, 32)
    y[0, 0] = 448.0 * 3                                           # amax/448 = 3 -> 2**ceil(log2 3) = 4
    assert int(quantize.mxfp8(y)[1][0, 0]) == 127 + 2


@pytest.mark.parametrize("given", [False, True])
def test_nvfp4_matches_emulation(given):
    x = _inputs(torch.bfloat16)
    g = torch.tensor(0.02) if given else None
    packed, bs, gs = quantize.nvfp4(x, g)
    assert packed.shape == (7, 256) and bs.dtype == torch.float8_e4m3fn and bs.shape == (7, 32)
    codes = torch.stack((packed & 15, packed >> 4), -1).flatten(-2).long()
    deq = (E2M1[codes].reshape(7, 32, 16) * (bs.float() * gs)[..., None]).reshape(7, 512)
    expected = ref.nvfp4_qdq(x, g)
    assert torch.equal(deq.to(x.dtype), expected)


def test_e2m1_codes_hand_computed():
    """Block amax 6 with global scale 1 gives block scale 1; then (OCP MX 5.3.3 grid, ties to even code):
    0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 2.5 -> 2, 5 -> 4, 6 -> 6, -1.5 -> -1.5."""
    x = torch.tensor([[0.25, 0.75, 1.25, 2.5, 5.0, 6.0, -1.5] + [0.0] * 9])
    packed, bs, gs = quantize.nvfp4(x, torch.tensor(1.0))
    assert float(bs.float()[0, 0]) == 1.0 and float(gs) == 1.0
    codes = torch.stack((packed & 15, packed >> 4), -1).flatten(-2).long()
    assert codes[0, :7].tolist() == [0, 2, 2, 4, 6, 7, 11]
    assert E2M1[codes][0, :7].tolist() == [0.0, 1.0, 1.0, 2.0, 4.0, 6.0, -1.5]
    assert int(packed[0, 0]) == 0 | (2 << 4)                     # element 0 in the low nibble


def test_swizzle_follows_the_cublas_tile_formula():
    """cuBLAS 1D block-scaling layout: in each 128x4 tile, (r, c) -> (r % 32) * 16 + (r // 32) * 4 + c;
    tiles run along columns first. Checked against that formula, element by element."""
    rows, cols = 200, 6                                 # pads to 256 x 8: 2 x 2 tiles
    src = torch.arange(rows * cols, dtype=torch.int32).reshape(rows, cols) % 251 + 1
    out = gemm.swizzle_128x4(src.to(torch.uint8))
    assert out.numel() == 256 * 8
    col_tiles = 2
    for r in range(rows):
        for c in range(cols):
            tile = (r // 128) * col_tiles + c // 4
            rr, cc = r % 128, c % 4
            pos = tile * 512 + (rr % 32) * 16 + (rr // 32) * 4 + cc
            assert int(out[pos]) == int(src[r, c]), (r, c)
    assert int(out.sum()) == int(src.sum())             # the padding is zeros


def test_block_weight_scale_layouts():
    s = torch.arange(6, dtype=torch.float32).reshape(2, 3)     # [N/128, K/128]
    for layout, stride in (("kblocks", (1, 3)), ("l4", (1, 4))):
        b = gemm.block_weight_scale(s, layout)
        assert b.shape == (3, 2) and b.stride() == stride and torch.equal(b, s.t())
    a = gemm.m_major(torch.arange(8, dtype=torch.float32).reshape(4, 2))
    assert a.stride() == (1, 4) and torch.equal(a, torch.arange(8, dtype=torch.float32).reshape(4, 2))


_INTERPRETED = r"""
import torch
from oracle_torch import quantize as Q, quantize_triton as T
torch.manual_seed(0)
x = (torch.randn(5, 384) * torch.logspace(-3, 3, 5)[:, None]).to(torch.bfloat16)
x[1] = 0
x[2, :3] = torch.tensor([448 * 50.0, -84.0, 1e-3])
for name, args in [("fp8_per_group", ()), ("fp8_per_token", ()), ("fp8_per_tensor", ()),
                   ("fp8_per_tensor", (torch.tensor(0.01),))]:
    q, s = getattr(T, name)(x, *args)
    q2, s2 = getattr(Q, name)(x, *args)
    # values, not bytes: the interpreter's cast drops the sign of a rounded-to-zero value
    assert torch.equal(q.float(), q2.float()), name
    assert torch.equal(s.reshape(s2.shape), s2), name
q, s = T.fp8_per_group(x)
assert s.stride() == (1, 5)
print("ok")
"""


@pytest.mark.slow
def test_fused_triton_quantizers_round_like_the_reference_under_the_interpreter():
    """The CUDA kernels, run by Triton's CPU interpreter, give the reference's values and scales."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", _INTERPRETED], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
