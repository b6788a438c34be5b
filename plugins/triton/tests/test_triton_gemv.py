"""The small-batch paths in Triton's interpreter on CPU (compiled on a GPU machine): the dense
GEMV at M = 1 (every format, split-K, both CPU-runnable E2M1 decoders, K tails) and the direct
two-launch MoE (every format and activation mode, bias, weight on input, out-of-range ids),
against oracle-emulation. Tolerances: 1e-2 relative Frobenius (W8A8 / W4A4 modes round weights
and activations exactly as the reference, so they agree to the last bf16 rounding; W4A16 / W8A16
scale per-group partial sums instead of rounding each dequantized weight to bf16, a relative
2**-9 per weight, which stays near 5e-3 even after a gated activation and FC2).

On a GPU the direct MoE's reference runs on the CPU. Its W8A8 / W4A4 modes re-round FC1's bf16
output to FP8 / FP4 as FC2's input, and cuBLAS's bf16 batched products (the emulation on the GPU)
differ from fp32-accumulated ones in the last bit often enough to cross a rounding boundary: in
R39 (bench/requant_flips.py, 16 seeds) emulation-on-GPU against emulation-on-CPU differed by up to
2.9e-2 (FP8) and 4.8e-2 (FP4), exactly what oracle-triton differed from the GPU emulation by,
while oracle-triton against the CPU emulation differed by at most 9e-5."""
from __future__ import annotations

import pytest
import torch

from helpers import MODES, linear_pair, moe_pair, rel, routing, sm90_declared_cases

TOL = 1e-2
DEV = "cuda" if torch.cuda.is_available() else "cpu"
FORMATS = MODES + [("int4", "w4a16_int4", "bf16", {})]


@pytest.mark.slow
@pytest.mark.parametrize("fmt,mode,act,params", FORMATS)
@pytest.mark.parametrize("split", [1, 4])
def test_dense_gemv_matches_emulation(fmt, mode, act, params, split):
    """N = 96 (three 32-row tiles), K = 640 (a partial 256-wide K tile), split-K 1 and 4."""
    from oracle_triton.launch import gemv_config
    from oracle_triton.linear import dynamic_tensor_scale

    n, k = 96, 640
    t, e = linear_pair(fmt, n, k, mode, act, params, bias=True, device=DEV, symmetric=False)
    cfg = {**gemv_config(n, k, 8, t.gemm.layout.elem, t.gemm.layout.group), "SPLIT_K": split}
    x = torch.randn(1, k, dtype=torch.bfloat16, device=DEV) * 3
    scale = dynamic_tensor_scale(x, t.act) if t.act in (3, 4) else None
    y = t.gemm(x, t.act, scale, torch.bfloat16, cfg)
    assert rel(y, e.apply(x)) < TOL
    assert torch.equal(t.apply(x), t.gemm(x, t.act, scale, torch.bfloat16, t.gemm.config_for(1, t.act)))


@pytest.mark.slow
@pytest.mark.parametrize("fmt,mode", [("mxfp4", "w4a16_mx"), ("nvfp4", "w4a16_nvfp4")])
def test_gemv_e2m1_decoders_agree_on_cpu(fmt, mode):
    """Integer decode (0) and the fp16-bit-placement decode (2) give the same products (the E4M3
    one, 1, needs a GPU's fp8 conversion: test_triton_gpu)."""
    from oracle_triton.launch import gemv_config

    t, e = linear_pair(fmt, 64, 512, mode, "bf16", device=DEV)
    x = torch.randn(1, 512, dtype=torch.bfloat16, device=DEV)
    base = gemv_config(64, 512, 8, t.gemm.layout.elem, t.gemm.layout.group)
    y0 = t.gemm(x, 0, None, torch.bfloat16, {**base, "DECODE": 0})
    y2 = t.gemm(x, 0, None, torch.bfloat16, {**base, "DECODE": 2})
    assert rel(y0, e.apply(x)) < TOL and rel(y2, y0) < 1e-6


def test_dispatch_rules():
    """Measured on an H200 (bench/sweep_gemv.py): 4-bit dense M=1 always on the GEMV, FP8 only
    when small; the direct MoE for 4-bit experts while pairs <= experts / 2 (2 x experts with the
    word decoders)."""
    from oracle_triton.formats import E2M1_MX, FP8, INT4
    from oracle_triton.launch import use_gemv
    from oracle_triton.moe import use_direct

    assert use_gemv(1, 8192, 8192, E2M1_MX) and use_gemv(1, 8192, 8192, INT4)
    assert use_gemv(1, 5120, 2048, FP8) and not use_gemv(1, 8192, 8192, FP8)
    assert not use_gemv(2, 576, 7168, E2M1_MX)
    assert use_direct(4, 4, 32, E2M1_MX) and not use_direct(16, 4, 32, E2M1_MX)
    assert use_direct(16, 4, 32, E2M1_MX, words=True) and not use_direct(17, 4, 32, E2M1_MX, words=True)
    assert not use_direct(1, 8, 256, FP8) and not use_direct(1, 8, 256, FP8, words=True)


E, H, I, K = 16, 256, 128, 2


@pytest.mark.slow
@pytest.mark.parametrize("fmt,mode,act,params", FORMATS)
def test_direct_moe_matches_emulation(fmt, mode, act, params):
    t, ref = moe_pair(fmt, E, H, I, K, mode, act, params, bias=True, device=DEV, ref_device="cpu")
    for m in (1, 3):
        x = torch.randn(m, H, dtype=torch.bfloat16, device=DEV)
        w, ids = routing(m, E, K, DEV)
        y = t.apply_direct(x, w.reshape(-1).float(), ids.reshape(-1), m, K)
        assert y.shape == (m, H) and y.dtype == torch.bfloat16
        assert rel(y.cpu(), ref.apply(x.cpu(), w.cpu(), ids.cpu())) < TOL, (fmt, mode, m)


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["swigluoai", "relu2", "situ"])
def test_direct_moe_activations_and_weight_on_input(activation):
    t, ref = moe_pair("mxfp4", E, H, I, 1, "w4a16_mx", "bf16", activation=activation, bias=True,
                      router_on_input=True, device=DEV)
    x = torch.randn(2, H, dtype=torch.bfloat16, device=DEV) * 4
    w, ids = routing(2, E, 1, DEV)
    assert rel(t.apply_direct(x, w.reshape(-1).float(), ids.reshape(-1), 2, 1), ref.apply(x, w, ids)) < TOL


@pytest.mark.slow
def test_direct_moe_drops_out_of_range_pairs():
    """Under graph capture the eager id check is skipped: a pair whose id is out of range reads no
    memory and adds nothing (as if its router weight were zero)."""
    t, ref = moe_pair("mxfp4", E, H, I, K, "w4a16_mx", "bf16", device=DEV)
    x = torch.randn(1, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(1, E, K, DEV)
    bad = ids.clone()
    bad[0, 1] = E + 3
    y = t.apply_direct(x, w.reshape(-1).float(), bad.reshape(-1), 1, K)
    w0 = w.clone()
    w0[0, 1] = 0.0
    assert rel(y, ref.apply(x, w0, ids)) < TOL


@pytest.mark.slow
def test_small_batch_kernels_compile_for_sm90_without_spills():
    """The one-row kernels as shipped, inline PTX word decoders included (the interpreter cannot run
    PTX), compiled for sm_90 by Triton's own ptxas (sm90_compile.py small): no register spills."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("sm90_compile.py")), "small"],
                         capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(("ok", "FAIL"))]
    declared = sm90_declared_cases("small_batch_cases")
    assert out.returncode == 0 and len(lines) == declared, out.stdout + out.stderr[-3000:]
    assert all(" 0 B spilled" in ln for ln in lines), out.stdout


@pytest.mark.parametrize("fmt,mode", [("mxfp4", "w4a16_mx"), ("nvfp4", "w4a16_nvfp4")])
@pytest.mark.parametrize("k,bk,rows,bn", [(640, 256, 64, 16), (512, 512, 32, 32)])
def test_fp4_rows_gemv_matches_emulation(fmt, mode, k, bk, rows, bn, monkeypatch):
    """fp4_gemv.fp4_rows_kernel (integer decode: the interpreter has no PTX): N = 80 (a partial row
    block), K = 640 (three 256-wide chunks, the last partial: split-K with the ordered sum) or one
    512-wide chunk (no split); bias; and twice in a row (the split counters reset)."""
    import oracle_triton.linear

    monkeypatch.setattr(oracle_triton.linear, "WORD_LAYOUT", False)      # rows walks the checkpoint layout
    n = 80
    t, e = linear_pair(fmt, n, k, mode, "bf16", {}, bias=True, device=DEV)
    cfg = {"ROWS": rows, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": -(-k // bk), "DECODE": 0, "num_warps": 4,
           "num_stages": 1}
    x = torch.randn(1, k, dtype=torch.bfloat16, device=DEV) * 3
    y = t.gemm(x, 0, None, torch.bfloat16, cfg)
    assert rel(y, e.apply(x)) < TOL
    assert torch.equal(y, t.gemm(x, 0, None, torch.bfloat16, cfg))
