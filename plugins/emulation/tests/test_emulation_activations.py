"""Activation quantize-dequantize: values land on the format's grid with the scales a kernel uses."""
from __future__ import annotations

import pytest
from oracle_emulation import activations as act
from oracle_emulation.formats import e2m1

import torch

from oracle.errors import TensorError


E2M1_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def _x(m: int = 16, k: int = 256, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    return (torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-6, 7, (m, 1), generator=g).float())).to(dtype)


def _on_e4m3(v: torch.Tensor) -> bool:
    return torch.equal(v, v.to(torch.float8_e4m3fn).float())


def test_fp8_per_tensor_matches_the_definition():
    x = _x()
    s = x.abs().max() / 448
    expected = (x / s).to(torch.float8_e4m3fn).float() * s            # torch's own E4M3 cast
    assert torch.equal(act.fp8_qdq(x, "tensor"), expected)


def test_fp8_static_scale_saturates():
    x = torch.tensor([[1.0, -1000.0, 3.0]])
    out = act.fp8_qdq(x, scale=torch.tensor(0.5))
    assert out.tolist() == [[1.0, -224.0, 3.0]]                       # -2000 saturates to -448 * 0.5


def test_fp8_per_token_scales_each_row():
    x = _x()
    out = act.fp8_qdq(x, "token")
    s = x.abs().amax(dim=1, keepdim=True) / 448
    assert torch.equal(out, (x / s).to(torch.float8_e4m3fn).float() * s)
    assert torch.allclose(out.abs().amax(dim=1), x.abs().amax(dim=1), rtol=1e-6)   # 448 is on the grid


def test_fp8_group_128_handles_a_ragged_last_group():
    x = _x(4, 200)
    out = act.fp8_qdq(x, "group")
    for lo, hi in ((0, 128), (128, 200)):
        s = x[:, lo:hi].abs().amax(dim=1, keepdim=True) / 448
        assert torch.allclose(out[:, lo:hi], (x[:, lo:hi] / s).to(torch.float8_e4m3fn).float() * s, rtol=0, atol=0)


@pytest.mark.parametrize("fmt, element_max", [("mxfp8", 448.0), ("mxfp4", 6.0)])
def test_mx_activation_scales_are_pow2_ceil(fmt, element_max):
    x = _x()
    out = act.quantize_dequantize(x, fmt)
    blocks, oblocks = x.unflatten(1, (-1, 32)), out.unflatten(1, (-1, 32))
    amax = blocks.abs().amax(-1, keepdim=True)
    s = torch.exp2(torch.ceil(torch.log2(amax / element_max)))
    v = oblocks / s
    if fmt == "mxfp8":
        assert _on_e4m3(v)
    else:
        assert bool(torch.isin(v.abs(), E2M1_GRID).all())
    assert bool((v.abs() <= element_max).all())
    # the nearest grid value: recompute from x with torch's own cast (mxfp8) or the E2M1 grid by hand
    ref = (blocks / s).to(torch.float8_e4m3fn).float() if fmt == "mxfp8" else e2m1.round_to_e2m1(blocks / s)
    assert torch.equal(v, ref)


def test_nvfp4_activation_block_by_hand():
    x = torch.zeros(1, 16)
    x[0, :3] = torch.tensor([6.0, -2.9, 0.2])
    out = act.nvfp4_qdq(x, global_scale=torch.tensor(1.0))           # block scale e4m3(6/6) = 1
    assert out[0, :3].tolist() == [6.0, -3.0, 0.0]                    # -2.9 -> -3, 0.2 -> 0
    out = act.nvfp4_qdq(x, global_scale=torch.tensor(0.25))          # scale e4m3(4) = 4, times 0.25 = 1
    assert out[0, :3].tolist() == [6.0, -3.0, 0.0]


def test_nvfp4_dynamic_global_scale():
    x = _x()
    g = x.abs().max() / (6 * 448)
    assert torch.equal(act.nvfp4_qdq(x), act.nvfp4_qdq(x, global_scale=g))


def test_bf16_in_bf16_out_and_a16_is_identity():
    x = _x(dtype=torch.bfloat16)
    for fmt in ("fp8", "mxfp8", "mxfp4", "nvfp4"):
        out = act.quantize_dequantize(x, fmt)
        assert out.dtype == torch.bfloat16 and out.shape == x.shape
    assert act.quantize_dequantize(x, "bf16") is x


def test_mx_activations_need_whole_blocks():
    with pytest.raises(TensorError, match=r"x: expected last dimension divisible by 32 \(mxfp4 activation blocks\)"):
        act.quantize_dequantize(torch.zeros(2, 40), "mxfp4")


def test_zero_rows_stay_zero():
    x = torch.zeros(2, 64)
    for fmt in ("fp8", "mxfp8", "mxfp4", "nvfp4"):
        assert torch.equal(act.quantize_dequantize(x, fmt), x)


@pytest.mark.slow
def test_triton_kernels_match_eager_under_the_interpreter():
    # The CUDA kernels (activations_triton) run on the CPU with TRITON_INTERPRET=1; float32
    # keeps the interpreter's own bf16 store conversion out of the comparison.
    import os
    import subprocess
    import sys

    code = """
import torch
from oracle_emulation import activations as act
g = torch.Generator().manual_seed(0)
x = torch.randn(8, 1024, generator=g) * torch.exp2(torch.randint(-8, 9, (8, 1), generator=g).float())
x[0, :64] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 8)
x[1, :32] = torch.tensor([1e-40, -3e-39, 0.0, -0.0] * 8)
cases = [("fp8", {"granularity": "tensor"}), ("fp8", {"granularity": "token"}), ("fp8", {"granularity": "group"}),
         ("fp8", {"scale": torch.tensor(0.01)}), ("mxfp8", {}), ("mxfp4", {}), ("nvfp4", {}),
         ("nvfp4", {"global_scale": torch.tensor(0.003)})]
bad = [f"{f} {p}" for f, p in cases if not torch.equal(act._triton(x, f, p), act._EAGER[f](x, **p))]
ragged = torch.randn(5, 200, generator=g)
if not torch.equal(act._triton(ragged, "fp8", {"granularity": "group"}), act.fp8_qdq(ragged, "group")):
    bad.append("ragged group")
print("BAD", bad)
"""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "BAD []"
