"""The large-M paths, in Triton's interpreter on CPU (compiled on a GPU machine):

- W8A8 activations as E4M3 codes plus fp32 scales (gemm.act_qdq_kernel, CODES): the bytes are
  those of torch's float8_e4m3fn cast of x / scale and the scales amax / 448, as oracle-emulation
  rounds them; codes x scales are the values the value-writing pass gives.
- The code product (float8 tensor cores on a GPU; here the decoded codes in fp32): the scales
  multiply the fp32 product per K tile (block weights, 1x128 groups) or once (token/tensor).
  The reference rounds dequantized weights and activations to bf16 first; the kernel's exact
  code products differ from it by those 2**-9 roundings, far below the tolerances (1e-2 dense,
  5e-2 MoE with FC2 re-quantization, as in test_triton_dense / test_triton_moe).
- 4-bit weights decoded to whole tiles (FULL_TILE): the same values as the per-nibble path,
  so both agree to fp32 rounding; a wrong nibble order or group index gives errors of order 1.
- GROUP_M program order, BLOCK_K 64, split-K and the gated FC1's own BLOCK_N1, chosen through
  the config overrides the benchmark sweep uses.
"""
from __future__ import annotations

import pytest
import torch

from helpers import linear_pair, moe_pair, rel, routing, sm90_declared_cases, torch_fp8_codes

TOL = 1e-2
TOL_Q = {"bf16": TOL, "fp8": 5e-2, "nvfp4": 8e-2}
DEV = "cuda" if torch.cuda.is_available() else "cpu"
# two summation orders of the same values: identical sums in the interpreter's exact fp32 here; on a GPU
# the bf16 rounding of an output can flip (2**-8 each) where the MMA's fp32 sums differ in the last bit
SAME = 1e-5 if DEV == "cpu" else 2e-3
W8A8 = {"group": ("fp8_block", "w8a8_block"), "token": ("fp8_channel", "w8a8_fp8_channel"),
        "tensor": ("fp8_tensor", "w8a8_fp8_tensor")}


def _facts():
    from oracle_triton.launch import device_facts
    return device_facts(torch.device(DEV))


@pytest.mark.slow
@pytest.mark.parametrize("granularity", ["group", "token", "tensor", "static"])
@pytest.mark.parametrize("m", [21, 1, 3])
def test_activation_codes_and_scales_match_torchs_float8_cast(granularity, m):
    """m = 21: a partial 16-row block; 1 and 3: the 1-row and 4-row tiles a few rows of 1x128 groups take."""
    from oracle_triton.formats import ACT_CODES, ACT_TENSOR
    from oracle_triton.launch import quantize_activation_codes, quantize_activations
    from oracle_triton.linear import dynamic_tensor_scale

    k = 320                                                  # a partial last 1x128 group
    x = (torch.randn(m, k) * torch.logspace(-3, 2, m)[:, None]).to(torch.bfloat16).to(DEV)
    act = ACT_TENSOR if granularity == "static" else ACT_CODES[granularity]
    scale = None
    if granularity == "tensor":
        scale = dynamic_tensor_scale(x)
    elif granularity == "static":
        scale = torch.tensor([0.004], device=DEV)           # saturates the larger rows at +-448
    codes, scales = quantize_activation_codes(x, act, scale, _facts())
    codes = codes.view(torch.uint8).cpu()
    xf = x.float().cpu()
    if granularity == "group":
        assert tuple(scales.shape) == (3, m)                    # [ceil(K/128), M]
        groups = torch.nn.functional.pad(xf, (0, 64)).view(m, 3, 128)
        expect_s = (groups.abs().amax(-1) / torch.tensor(448.0)).T          # IEEE division
        assert torch.equal(scales.cpu(), expect_s)
        expect = torch_fp8_codes(xf, scales.cpu().T.repeat_interleave(128, 1)[:, :k])
    elif granularity == "token":
        expect_s = xf.abs().amax(-1) / torch.tensor(448.0)
        assert torch.equal(scales.cpu(), expect_s)
        expect = torch_fp8_codes(xf, expect_s[:, None])
    else:
        assert scales is scale
        expect = torch_fp8_codes(xf, scale.cpu())
    assert torch.equal(codes, expect)
    # the value-writing pass (W4A4, small M) rounds to the same codes x scales
    values = quantize_activations(x, act, scale, _facts()).float().cpu()
    deq = codes.view(torch.float8_e4m3fn).float()
    if granularity == "group":
        deq = deq * scales.cpu().T.repeat_interleave(128, 1)[:, :k]
    elif granularity == "token":
        deq = deq * scales.cpu()[:, None]
    else:
        deq = deq * scale.cpu()
    assert torch.equal(values, deq.to(torch.bfloat16).float())


@pytest.mark.slow
def test_every_e4m3_byte_encodes_to_itself():
    """Values on the E4M3 grid (all 254 non-NaN bytes, subnormals and -0 included) come back as
    their own byte through a per-tensor scale of 1."""
    from oracle_triton.formats import ACT_TENSOR
    from oracle_triton.launch import quantize_activation_codes

    bytes_ = torch.tensor([b for b in range(256) if b & 0x7F != 0x7F], dtype=torch.uint8)
    values = bytes_.view(torch.float8_e4m3fn).float().to(torch.bfloat16)      # exact in bf16
    x = torch.nn.functional.pad(values, (0, 256 - values.numel())).view(2, 128).to(DEV)
    codes, _ = quantize_activation_codes(x, ACT_TENSOR, torch.ones(1, device=DEV), _facts())
    assert torch.equal(codes.view(torch.uint8).cpu().flatten()[: bytes_.numel()], bytes_)


@pytest.mark.slow
@pytest.mark.parametrize("granularity", ["group", "token", "tensor"])
@pytest.mark.parametrize("cfg", [
    {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "SPLIT_K": 1, "GROUP_M": 2},     # scales per 64-wide tile
    {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 2, "GROUP_M": 1},    # split-K partials
])
def test_dense_w8a8_code_product(granularity, cfg):
    fmt, mode = W8A8[granularity]
    n, k = 96, 320
    t, e = linear_pair(fmt, n, k, mode, "fp8", {"activation_granularity": granularity}, bias=True, device=DEV)
    x = torch.randn(40, k, dtype=torch.bfloat16, device=DEV) * 3
    y = t.gemm(x, t.act, _tensor_scale(t, x), t.dtype, config={**cfg, "num_warps": 4, "num_stages": 2})
    assert rel(y, e.apply(x)) < TOL, (granularity, cfg, rel(y, e.apply(x)))


def _tensor_scale(t, x):
    from oracle_triton.formats import ACT_TENSOR
    from oracle_triton.linear import dynamic_tensor_scale
    return dynamic_tensor_scale(x) if t.act == ACT_TENSOR else None


FOUR_BIT = [("mxfp4", "w4a16_mx", "bf16", {}), ("nvfp4", "w4a16_nvfp4", "bf16", {}),
            ("nvfp4", "w4a4_nvfp4", "nvfp4", {})]


@pytest.mark.slow
@pytest.mark.parametrize("fmt,mode,act,params", FOUR_BIT + [("int4", "w4a16_int4", "bf16", {})])
def test_dense_whole_tile_decode_equals_the_per_nibble_path(fmt, mode, act, params):
    from oracle_triton.linear import dynamic_tensor_scale

    n, k = 96, 384
    t, e = linear_pair(fmt, n, k, mode, act, params, bias=True, device=DEV, group=64)
    x = torch.randn(40, k, dtype=torch.bfloat16, device=DEV)
    scale = dynamic_tensor_scale(x, t.act) if act == "nvfp4" else None
    base = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4, "num_stages": 2}
    per_nibble = t.gemm(x, t.act, scale, t.dtype, config={**base, "FULL_TILE": 0})
    whole = t.gemm(x, t.act, scale, t.dtype, config={**base, "FULL_TILE": 1, "GROUP_M": 3})
    assert rel(whole, per_nibble) < SAME                     # same values; fp32 summation order only
    assert rel(whole, e.apply(x)) < TOL


@pytest.mark.slow
@pytest.mark.parametrize("symmetric", [False, True])
def test_dense_whole_tile_int4_zero_points(symmetric):
    t, e = linear_pair("int4", 64, 256, "w4a16_int4", "bf16", group=32, symmetric=symmetric, device=DEV)
    x = torch.randn(20, 256, dtype=torch.bfloat16, device=DEV)
    cfg = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 128, "SPLIT_K": 2, "FULL_TILE": 1, "num_warps": 4,
           "num_stages": 2}
    assert rel(t.gemm(x, t.act, None, t.dtype, config=cfg), e.apply(x)) < TOL


E, H, I, K = 8, 256, 128, 2
MOE_CFG = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_N1": 32, "BLOCK_K": 128, "num_warps": 4, "num_stages": 2}


@pytest.mark.slow
@pytest.mark.parametrize("fmt,mode,act,params,block_k", [
    ("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}, 64),
    ("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}, 128),
    ("fp8_channel", "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"}, 128),
    ("fp8_tensor", "w8a8_fp8_tensor", "fp8", {"activation_granularity": "tensor"}, 64),
    ("mxfp4", "w4a16_mx", "bf16", {}, 64),
    ("nvfp4", "w4a4_nvfp4", "nvfp4", {}, 128),
    ("int4", "w4a16_int4", "bf16", {}, 64),
])
def test_moe_large_m_paths_through_the_config_override(fmt, mode, act, params, block_k):
    t, ref = moe_pair(fmt, E, H, I, K, mode, act, params, bias=True, device=DEV, group=32)
    t.config = {**MOE_CFG, "BLOCK_K": block_k, "FULL_TILE": 1}
    x = torch.randn(24, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(24, E, K, DEV)
    err = rel(t.apply(x, w, ids), ref.apply(x, w, ids))
    assert err < TOL_Q[act], (fmt, block_k, err)


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["swigluoai", "silu"])     # interleaved / stacked gate and up rows
def test_moe_whole_tile_and_fused_gate_up_equal_the_per_nibble_path(activation):
    t, _ = moe_pair("mxfp4", E, H, I, K, "w4a16_mx", "bf16", activation=activation, bias=True, device=DEV)
    x = torch.randn(24, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(24, E, K, DEV)
    t.config = {**MOE_CFG, "FULL_TILE": 0}
    per_nibble = t.apply(x, w, ids)
    for more in ({"FULL_TILE": 1}, {"FULL_TILE": 1, "FUSE_GU": 1}, {"FULL_TILE": 0, "FUSE_GU": 1}):
        t.config = {**MOE_CFG, **more}
        assert rel(t.apply(x, w, ids), per_nibble) < 5 * SAME, more   # bf16 rounding of FC1's output may flip


@pytest.mark.slow
@pytest.mark.parametrize("fmt,mode,params", [
    ("fp8_block", "w8a8_block", {"activation_granularity": "group"}),
    ("fp8_channel", "w8a8_fp8_channel", {"activation_granularity": "token"}),
])
def test_moe_w8a8_fused_gate_up(fmt, mode, params):
    """Stacked gate/up rows: the weight scales are gathered per column (they span two blocks)."""
    t, ref = moe_pair(fmt, E, H, I, K, mode, "fp8", params, bias=True, device=DEV)
    t.config = {**MOE_CFG, "FUSE_GU": 1}
    x = torch.randn(24, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(24, E, K, DEV)
    assert rel(t.apply(x, w, ids), ref.apply(x, w, ids)) < TOL_Q["fp8"]


def test_large_m_configs_keep_the_tile_rules():
    """What the kernels assume of any configuration moe_config/dense_config return: FP8 K tiles
    inside one 128-wide scale block, 4-bit K tiles whole groups; whole-tile decode only for 4-bit."""
    from oracle_triton.launch import dense_config
    from oracle_triton.moe import moe_config

    for pack in (1, 2, 8):
        for m in (1, 16, 64, 256, 4096):
            d = dense_config(m, 8192, 8192, 132, pack)
            assert 128 % d["BLOCK_K"] == 0 and (d["FULL_TILE"] == 0 or pack > 1)
            c = moe_config(m, 8, 128, pack)
            assert 128 % c["BLOCK_K"] == 0 and (c["FULL_TILE"] == 0 or pack > 1)
    assert dense_config(4096, 8192, 8192, 132, 2)["FULL_TILE"] == 1
    assert moe_config(4096, 8, 128, 1)["BLOCK_N1"] == 64


def test_a_config_that_breaks_the_tile_rules_is_refused_by_name():
    from oracle_triton.formats import layout_for
    from oracle_triton.launch import check_config

    check_config({"BLOCK_K": 64}, layout_for("fp8_block", 256, 256))
    with pytest.raises(ValueError, match="BLOCK_K=256 .*fp8_block"):
        check_config({"BLOCK_K": 256}, layout_for("fp8_block", 256, 256), "fp8_block")
    with pytest.raises(ValueError, match="BLOCK_K=64 .*group of 128"):
        check_config({"BLOCK_K": 64}, layout_for("int4", 256, 256, 128), "int4")
    from oracle_triton.formats import words_layout     # E2M1 words decoded whole: N a multiple of 16
    check_config({"BLOCK_K": 128, "FULL_TILE": 2}, words_layout("mxfp4", 256, 256))
    with pytest.raises(ValueError, match="FULL_TILE=2 .*nvfp4.*multiple of 16, not 1000"):
        check_config({"BLOCK_K": 64, "FULL_TILE": 2}, words_layout("nvfp4", 1000, 256), "nvfp4")
    check_config({"BLOCK_K": 64, "FULL_TILE": 1}, words_layout("nvfp4", 1000, 256))
    check_config({"BLOCK_K": 128, "FULL_TILE": 2}, layout_for("mxfp4", 1000, 256))     # the checkpoint layout's
    wg = {"WG": 1, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}      # the wgmma kernel: words, K tiles in a group
    check_config(wg, words_layout("nvfp4", 1000, 256))
    check_config(dict(wg, BLOCK_K=128), layout_for("int4", 256, 256, 128))
    with pytest.raises(ValueError, match="WG .*mxfp4.*GPTQ's \\[K/8, N\\] layout"):
        check_config(wg, layout_for("mxfp4", 256, 256), "mxfp4")
    with pytest.raises(ValueError, match="BLOCK_K=128 .*int4.*group of 64"):
        check_config(dict(wg, BLOCK_K=128), layout_for("int4", 256, 256, 64), "int4")
    with pytest.raises(ValueError, match="BLOCK_M/BLOCK_N"):
        check_config(dict(wg, BLOCK_N=32), words_layout("mxfp4", 256, 256))
    sw = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "DECODE": 5, "FULL_TILE": 1, "PERM": 1}
    check_config(sw, words_layout("nvfp4", 1000, 256))     # the fused decoder on E2M1 words, pair order
    with pytest.raises(ValueError, match="DECODE=5 .*mxfp4.*word layout"):
        check_config(sw, layout_for("mxfp4", 256, 256), "mxfp4")
    with pytest.raises(ValueError, match="PERM .*FULL_TILE"):
        check_config(dict(sw, FULL_TILE=0), words_layout("mxfp4", 256, 256))


def test_fused_decoder_needs_scales_up_to_two():
    """DECODE 5 multiplies by 2**126 x scale in bf16: finite and exact for scales <= 2 only, checked on the
    layer's own scales (E8M0 byte 128 is 2; NVFP4's E4M3 scale times its global scale)."""
    from oracle_triton.formats import fused_scales_ok, layout_for, words_layout

    mx, nv = words_layout("mxfp4", 64, 256), words_layout("nvfp4", 64, 256)
    assert fused_scales_ok(mx, torch.tensor([0, 120, 128], dtype=torch.uint8), None)
    assert not fused_scales_ok(mx, torch.tensor([0, 129], dtype=torch.uint8), None)
    e4m3 = torch.tensor([1.0, 448.0]).to(torch.float8_e4m3fn).view(torch.uint8)
    assert fused_scales_ok(nv, e4m3, torch.tensor([2.0 / 448]))
    assert not fused_scales_ok(nv, e4m3, torch.tensor([2.5 / 448]))
    assert not fused_scales_ok(layout_for("mxfp4", 64, 256), torch.tensor([1], dtype=torch.uint8), None)


@pytest.mark.slow
def test_default_large_m_kernels_compile_for_sm90_without_spills():
    """The shipped large-M configurations compiled for sm_90 by Triton's own ptxas (no GPU needed;
    sm90_compile.py): the W8A8 kernels multiply on float8 MMA, nothing spills registers, every
    tile is fed by asynchronous copies (pipelined)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("sm90_compile.py"))], capture_output=True,
                         text=True, env=env, timeout=600)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(("ok", "FAIL"))]
    declared = sm90_declared_cases("default_cases")
    assert out.returncode == 0 and len(lines) == declared, out.stdout + out.stderr[-3000:]
    for ln in lines:
        assert " 0 B spilled" in ln, ln
        assert ("float8 MMA True" in ln) == ("W8A8" in ln), ln
        assert "cp.async True" in ln or "act codes" in ln, ln


@pytest.mark.slow
@pytest.mark.parametrize("inter,activation", [(192, "silu"), (128, "swigluoai"), (128, "silu")])
def test_moe_w8a8_block_scales_per_tile_uniform_or_gathered(inter, activation):
    """Block-FP8 FC1 tiles whose gate and up rows each sit in one 128-row scale block read one
    scalar scale (I = 128, interleaved or stacked halves); I = 192 puts up rows across blocks
    (gathered per column)."""
    t, ref = moe_pair("fp8_block", E, H, inter, K, "w8a8_block", "fp8", {"activation_granularity": "group"},
                      activation=activation, bias=True, device=DEV)
    t.config = {**MOE_CFG, "BLOCK_K": 64}
    x = torch.randn(24, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(24, E, K, DEV)
    assert rel(t.apply(x, w, ids), ref.apply(x, w, ids)) < TOL_Q["fp8"]

