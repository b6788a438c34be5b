"""The dense kernel's index and packing arithmetic, run in Triton's interpreter on CPU
(on a GPU machine the same tests run compiled): every format against oracle-emulation.

Tolerance (relative Frobenius error): both sides multiply the same quantized weights; the
reference rounds each dequantized weight (and W8A8 activation) to bf16 and its output to
bf16, the kernel multiplies exact FP8/FP4 values (FP8 scales applied to the fp32 product)
with fp32 accumulation (fp32 here: the interpreter has no bf16 dot). Independent 2**-9
roundings give a few times 1e-3; the bound is 1e-2. A wrong nibble, stride or scale index
gives errors of order 1.
"""
from __future__ import annotations

import pytest
import torch

from helpers import MODES, linear_pair, rel, sm90_declared_cases

pytestmark = pytest.mark.slow   # every case runs the kernels in Triton's CPU interpreter (seconds each)

TOL = 1e-2
DEV = "cuda" if torch.cuda.is_available() else "cpu"   # compiled on a GPU machine
GRAN = {"tensor": "w8a8_fp8_tensor", "token": "w8a8_fp8_channel", "group": "w8a8_block"}
CASES = MODES


@pytest.mark.parametrize("fmt,mode,act,params", CASES)
def test_dense_formats_match_emulation(fmt, mode, act, params):
    n, k = 96, 320                               # partial N and K tiles, 3 K tiles, split-K 2
    t, e = linear_pair(fmt, n, k, mode, act, params, bias=True, device=DEV)
    for m in (1, 5):
        x = torch.randn(m, k, dtype=torch.bfloat16, device=DEV) * 3
        yt, ye = t.apply(x), e.apply(x)
        assert yt.shape == (m, n) and yt.dtype == torch.bfloat16
        assert rel(yt, ye) < TOL, (fmt, mode, m, rel(yt, ye))


@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("symmetric", [False, True])
def test_int4_groups_and_zero_points(group, symmetric):
    t, e = linear_pair("int4", 64, 256, "w4a16_int4", "bf16", group=group, symmetric=symmetric, device=DEV)
    x = torch.randn(3, 256, dtype=torch.bfloat16, device=DEV)
    assert rel(t.apply(x), e.apply(x)) < TOL


def test_static_input_scale_saturates_like_emulation():
    t, e = linear_pair("fp8_tensor", 64, 256, "w8a8_fp8_tensor", "fp8", {"activation_granularity": "tensor"},
                       input_scale=torch.tensor(0.01, device=DEV), device=DEV)
    x = torch.randn(4, 256, dtype=torch.bfloat16, device=DEV) * 8                  # many values beyond 448 * 0.01
    assert rel(t.apply(x), e.apply(x)) < TOL


def test_weights_stay_packed():
    t, _ = linear_pair("mxfp4", 64, 256, "w4a16_mx", "bf16", device=DEV)
    # W4A16 E2M1 is repacked into GPTQ's [K/8, N] int32 words (weights.repack_words): the same bytes
    assert t.packed.weight.dtype == torch.int32 and tuple(t.packed.weight.shape) == (32, 64)
    assert t.packed.nbytes() == 64 * 128 + 64 * 8          # codes + one E8M0 byte per 32


def test_nvfp4_w4a4_with_a_static_global_scale():
    from helpers import quantize
    from oracle import LinearLayer
    from oracle.catalog import Mode
    from oracle_emulation.linear import EmulationLinear
    from oracle_triton.linear import TritonLinear

    layer = LinearLayer(name="nv", in_features=256, out_features=64, weight_format="nvfp4", activation_format="nvfp4")
    tensors = quantize("nvfp4", torch.randn(64, 256, device=DEV) * 0.05)
    tensors["input_global_scale"] = torch.tensor(0.5 / 448, device=DEV)
    mode = Mode(weight="nvfp4", activation="nvfp4", name="w4a4_nvfp4")
    t, e = TritonLinear(layer, mode, None), EmulationLinear(layer, mode, None)
    t.process_weights(**tensors)
    e.process_weights(**tensors)
    x = torch.randn(3, 256, dtype=torch.bfloat16, device=DEV) * 2
    assert rel(t.apply(x), e.apply(x)) < TOL


@pytest.mark.parametrize("fmt,mode,symmetric", [("int4", "w4a16_int4", False), ("int4", "w4a16_int4", True),
                                              ("mxfp4", "w4a16_mx", True), ("nvfp4", "w4a16_nvfp4", True)])
def test_swap_kernel_matches_emulation(fmt, mode, symmetric):
    """gemm.w4_swap_kernel (few-row 4-bit, weights as the MMA's A operand): partial row and column
    tiles, split-K, a bias, the portable INT4 decoder (DECODE 0; the PTX one is compiled only and
    checked by the GPU test), E2M1 K tiles of 128 and 256."""
    t, e = linear_pair(fmt, 96, 512, mode, "bf16", symmetric=symmetric, bias=True, device=DEV)
    assert t.gemm.swap_ok(0)
    for m, bk in ((1, 128), (5, 256), (20, 128)):
        x = torch.randn(m, 512, dtype=torch.bfloat16, device=DEV) * 3
        cfg = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": bk, "SPLIT_K": 2, "DECODE": 0, "num_warps": 4,
               "num_stages": 1}
        assert rel(t.gemm(x, 0, None, torch.bfloat16, cfg), e.apply(x)) < TOL, (m, symmetric)
        if fmt == "int4":       # one dot per K tile on the interleaved whole tile (E2M1 joins PTX-decoded words only)
            assert rel(t.gemm(x, 0, None, torch.bfloat16, {**cfg, "FULL_TILE": 1}), e.apply(x)) < TOL, (m, symmetric)
            # the whole tile in the word decoders' pair order, the activations read in that order (PERM)
            perm = {**cfg, "FULL_TILE": 1, "PERM": 1}
            assert rel(t.gemm(x, 0, None, torch.bfloat16, perm), e.apply(x)) < TOL, (m, symmetric)
            assert torch.equal(t.gemm(x, 0, None, torch.bfloat16, {**perm, "PREFETCH": 2}),
                               t.gemm(x, 0, None, torch.bfloat16, perm)), (m, symmetric)
        # loads two K tiles ahead: the same products
        assert torch.equal(t.gemm(x, 0, None, torch.bfloat16, {**cfg, "PREFETCH": 2}),
                           t.gemm(x, 0, None, torch.bfloat16, cfg)), (m, symmetric)


@pytest.mark.parametrize("fmt,mode,gran", [("fp8_channel", "w8a8_fp8_channel", "token"),
                                           ("fp8_tensor", "w8a8_fp8_tensor", "tensor")])
def test_fp8_swap_kernel_matches_emulation(fmt, mode, gran):
    """gemm.fp8_swap_kernel (few-row W8A8, weights as the float8 MMA's A operand): a partial K tile,
    split-K, a bias, per-token and per-tensor activation codes (dynamic per-tensor scale)."""
    from oracle_triton.linear import dynamic_tensor_scale

    t, e = linear_pair(fmt, 96, 320, mode, "fp8", {"activation_granularity": gran}, bias=True, device=DEV)
    assert t.gemm.swap_ok(t.act)
    for m in (1, 5, 20):
        x = torch.randn(m, 320, dtype=torch.bfloat16, device=DEV) * 3
        cfg = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 2, "num_warps": 4, "num_stages": 3}
        scale = dynamic_tensor_scale(x) if gran == "tensor" else None
        y = t.gemm(x, t.act, scale, torch.bfloat16, cfg)
        assert rel(y, e.apply(x)) < TOL, (fmt, m)
        if m == 1:      # the row rounded inside the GEMM (QUANT_IN, the default) = the quantizer's codes
            assert torch.equal(y, t.gemm(x, t.act, scale, torch.bfloat16, {**cfg, "QUANT_IN": 0}))
        else:                   # each program rounds its own rows (QUANT_IN 1) = the quantizer's codes; at
            # one warp on both sides: the warps change the MMA instruction and, on a GPU, its rounding (R38)
            on, off = {**cfg, "QUANT_IN": 1, "num_warps": 1}, {**cfg, "QUANT_IN": 0, "num_warps": 1}  # one warp the amax
            assert t.gemm.quant_in(x, t.act, on) == 2 and t.gemm.quant_in_args(2, on)["AMAX_K"] == 64   # takes 5 chunks
            assert torch.equal(t.gemm(x, t.act, scale, torch.bfloat16, on), t.gemm(x, t.act, scale, torch.bfloat16, off))
        if m > 1 and gran == "token":   # the rows quantized by the GEMM's programs (COOP 1) = the quantizer's
            assert t.gemm.coop_ok(x, t.act, {**cfg, "COOP": 1})
            assert torch.equal(y, t.gemm(x, t.act, scale, torch.bfloat16, {**cfg, "COOP": 1}))
    if gran == "token":         # coop_token_codes left its counters at zero (a graph replay relies on it)
        assert not t.gemm.counters(3, 0).any()


def test_tiled_gemm_quantizing_the_rows_itself_gives_the_quantizers_bits():
    """wgemm_kernel COOP (a tuned entry's option for per-token W8A8 at many rows): its programs write
    the codes and scales the quantizer launch would, so the product is bit for bit the two launches'."""
    t, e = linear_pair("fp8_channel", 96, 320, "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
                       bias=True, device=DEV)
    cfg = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 128, "SPLIT_K": 2, "GROUP_M": 1, "FULL_TILE": 0,
           "num_warps": 4, "num_stages": 2, "COOP": 1}
    x = torch.randn(37, 320, dtype=torch.bfloat16, device=DEV) * 3
    y = t.gemm(x, t.act, None, torch.bfloat16, cfg)
    assert rel(y, e.apply(x)) < TOL
    assert torch.equal(y, t.gemm(x, t.act, None, torch.bfloat16, {**cfg, "COOP": 0}))
    assert not t.gemm.counters(3, 0).any()


@pytest.mark.parametrize("fmt,mode,gran", [("fp8_channel", "w8a8_fp8_channel", "token"),
                                           ("fp8_tensor", "w8a8_fp8_tensor", "tensor")])
def test_scaled_mm_hand_off_matches_emulation(fmt, mode, gran):
    """SCALED_MM: our activation codes and scales, the product by torch._scaled_mm with rowwise
    scales (a per-tensor scale expanded), the bias fused; fp16 layers keep the tiles."""
    from oracle_triton.linear import dynamic_tensor_scale

    t, e = linear_pair(fmt, 96, 320, mode, "fp8", {"activation_granularity": gran}, bias=True, device=DEV)
    assert t.gemm.scaled_mm_ok(t.act)
    for m in (1, 5):
        x = torch.randn(m, 320, dtype=torch.bfloat16, device=DEV) * 3
        scale = dynamic_tensor_scale(x) if gran == "tensor" else None
        y = t.gemm(x, t.act, scale, torch.bfloat16, {"SCALED_MM": 1})
        assert y.dtype == torch.bfloat16 and rel(y, e.apply(x)) < TOL, (fmt, m)


@pytest.mark.parametrize("fmt,mode,symmetric", [("fp8_tensor", "w8a16_fp8_tensor", True),
                                                ("fp8_channel", "w8a16_fp8_channel", True),
                                                ("fp8_block", "w8a16_block", True), ("mxfp4", "w4a16_mx", True),
                                                ("nvfp4", "w4a16_nvfp4", True), ("int4", "w4a16_int4", False)])
def test_dequant_mm_matches_emulation(fmt, mode, symmetric):
    """DEQUANT_MM (many rows): gemm.dequant_kernel writes the reference's dequantized weight (value
    x scale rounded to the layer dtype; partial N and K tiles), then one product with the bias."""
    t, e = linear_pair(fmt, 96, 384, mode, "bf16", symmetric=symmetric, bias=True, device=DEV)
    x = torch.randn(5, 384, dtype=torch.bfloat16, device=DEV) * 3
    assert rel(t.gemm(x, 0, None, torch.bfloat16, {"DEQUANT_MM": 1}), e.apply(x)) < TOL


@pytest.mark.parametrize("shape", [(1, 320), (5, 320), (3, 2100)])
def test_tensor_scale_is_the_dynamic_per_tensor_scale(shape):
    """launch.tensor_scale (one Triton program, so a launch plan can repeat it) gives
    dynamic_tensor_scale's value bit for bit: amax / 448 (FP8), amax / (6 * 448) (NVFP4 global), 1 for
    all zeros; over several 1024-wide steps and a partial one."""
    from oracle_triton.formats import ACT_NVFP4, ACT_TENSOR
    from oracle_triton.launch import tensor_scale
    from oracle_triton.linear import dynamic_tensor_scale

    x = torch.randn(*shape, dtype=torch.bfloat16, device=DEV) * 3
    for act, div in ((ACT_TENSOR, 448.0), (ACT_NVFP4, 6 * 448.0)):
        assert torch.equal(tensor_scale(x, div), dynamic_tensor_scale(x, act)), act
    assert tensor_scale(torch.zeros(*shape, dtype=torch.bfloat16, device=DEV), 448.0).tolist() == [1.0]


def _gluon_sm90_lines(group: str) -> list[str]:
    """sm90_compile.py `group` (a Gluon kernel's cases) run in a subprocess outside the interpreter: its ok / FAIL
    lines, one per declared case, every one compiled."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton.backends.nvidia")
    pytest.importorskip("triton.experimental.gluon")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("sm90_compile.py")), group],
                         capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(("ok", "FAIL"))]
    assert out.returncode == 0 and len(lines) == sm90_declared_cases(f"{group}_cases"), out.stdout + out.stderr[-3000:]
    return lines


@pytest.mark.slow
def test_rega_kernel_keeps_the_decoded_words_in_registers_on_sm90():
    """w4_rega (Gluon) compiled for sm_90 by Triton's ptxas (sm90_compile.py rega), each format: no register
    spills, and its K loop (the innermost loop with a wgmma) issues 8 wgmma with the decoded weights from
    registers and waits once: no shared-memory load or store and no barrier in it (the shared round trip
    and the per-MMA waits of the tl.dot swap kernel are what it removes), except where a chunk holds one K tile (XT 1:
    the grouped MoE mode's gpt-oss entry), whose K loop is the chunk loop with its activation copy and barriers."""
    for ln in _gluon_sm90_lines("rega"):
        assert " 0 B spilled" in ln and "/ 8 wgmma / 1 wgmma waits / " in ln, ln
        if " xt 1 " not in ln:      # one K tile a chunk: the chunk loop (its copy, its barriers) is the K loop
            assert " 0 barriers / " in ln and "/ 0 shared-memory ops" in ln, ln


@pytest.mark.slow
def test_ws_kernel_compiles_for_sm90_without_spills():
    """w4_ws (Gluon, warp_specialize: decode warps and MMA warps with their own register budgets) compiled for
    sm_90 by Triton's ptxas (sm90_compile.py ws), each format at the shipped entries' configurations and the other
    forms' (XTMA, PP, the words by TMA: WT; the MoE modes, INT4 experts in GPTQ's layout among them): at most a few
    spilled bytes under the launch's MAXNREG (none with Triton 3.7; 12 B for INT4 with zero points in the two-
    warpgroup form, words two tiles ahead, with the H200's Triton 3.6, R57: three ahead spill 40 B there, R72 / R73,
    a form no entry ships since R71), and an MMA loop issuing wgmma from shared memory."""
    for ln in _gluon_sm90_lines("ws"):
        spilled = int(ln.split(" B spilled")[0].rsplit(" ", 1)[1])
        assert spilled <= 16 and " wgmma / " in ln and "/ 0 wgmma /" not in ln, ln
