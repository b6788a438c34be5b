"""On a real GPU: model-sized shapes against oracle-emulation, the split-K reduction, the
integer FP8 decode (the SM80 path) on this device, CUDA-graph capture and replay of the dense
GEMM and the fused MoE, and the runtime probe. Tolerance as in test_triton_dense (1e-2
relative Frobenius; W8A8 and W4A4 operands are rounded exactly as the reference rounds them)."""
from __future__ import annotations

import pytest
import torch

from helpers import (fp8_hostile_rows, linear_pair, moe_pair, rel, replay_moe, routing, torch_fp8_codes,
                     torch_group_codes, torch_token_codes)
from oracle import MoELayer, Platform, select_backend

pytestmark = pytest.mark.gpu
TOL = 1e-2
TOL_Q = {"bf16": TOL, "fp8": 5e-2, "nvfp4": 8e-2}   # FC2 re-quantization flips, see test_triton_moe


@pytest.mark.parametrize("fmt,mode,act,params", [
    ("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}),
    ("fp8_block", "w8a16_block", "bf16", {}),
    ("fp8_channel", "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"}),
    ("fp8_tensor", "w8a16_fp8_tensor", "bf16", {}),
    ("mxfp4", "w4a16_mx", "bf16", {}),
    ("nvfp4", "w4a16_nvfp4", "bf16", {}),
    ("nvfp4", "w4a4_nvfp4", "nvfp4", {}),
    ("int4", "w4a16_int4", "bf16", {}),
])
def test_dense_model_shapes(fmt, mode, act, params):
    for n, k in ((576, 7168), (5120, 2048), (2048, 1536)):
        t, e = linear_pair(fmt, n, k, mode, act, params, device="cuda", bias=True)
        for m in (1, 16, 100, 300):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            err = rel(t.apply(x), e.apply(x))
            assert err < TOL, (fmt, mode, n, k, m, err)


def test_integer_fp8_decode_path_agrees(monkeypatch):
    monkeypatch.setenv("ORACLE_TRITON_FP8_DECODE", "int")
    t, e = linear_pair("fp8_block", 1536, 7168, "w8a16_block", "bf16", device="cuda")
    assert t.gemm.facts["hw_fp8"] is False
    x = torch.randn(4, 7168, device="cuda", dtype=torch.bfloat16)
    assert rel(t.apply(x), e.apply(x)) < TOL


@pytest.mark.parametrize("fmt,mode,act,params,activation", [
    ("mxfp4", "w4a16_mx", "bf16", {}, "swigluoai"),
    ("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}, "silu"),
    ("nvfp4", "w4a4_nvfp4", "nvfp4", {}, "silu"),
    ("int4", "w4a16_int4", "bf16", {}, "gelu"),
])
def test_moe_model_shapes(fmt, mode, act, params, activation):
    t, ref = moe_pair(fmt, 32, 1024, 768, 4, mode, act, params, activation=activation, bias=True, device="cuda")
    for m in (1, 16, 300):
        x = torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16)
        w, ids = routing(m, 32, 4, "cuda")
        err = rel(t.apply(x, w, ids), ref.apply(x, w, ids))
        assert err < TOL_Q[act], (fmt, m, err)


@pytest.mark.parametrize("group", [32, 128])
def test_asymmetric_int4_moe_on_every_path_and_under_replay(group):
    """Zero points through the word decoder (direct path, M=1 and 16: 4 and 64 pairs over 32 experts),
    the aligned tiles (M=300) and a captured graph."""
    t, ref = moe_pair("int4", 32, 1024, 768, 4, "w4a16_int4", "bf16", activation="silu", bias=True,
                      device="cuda", group=group, symmetric=False)
    for m in (1, 16, 300):
        x = torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16)
        w, ids = routing(m, 32, 4, "cuda")
        err = rel(t.apply(x, w, ids), ref.apply(x, w, ids))
        assert err < TOL, (group, m, err)
    _replay_moe(t, ref, 1, TOL)


def _graph(fn, *static):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(*static)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn(*static)
    return g, out


def _capture_and_replay(call, x, reference, times=2):
    """Capture `call(x)` in a CUDA graph, then refill `x` and replay: each replay near `reference` and bitwise
    what an eager call computes (split-K counters reset between replays)."""
    g, out = _graph(call, x)
    for _ in range(times):
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        assert rel(out, reference(x)) < TOL
        assert torch.equal(out, call(x))


def test_dense_split_k_graph_capture_and_replay():
    t, e = linear_pair("mxfp4", 1024, 8192, "w4a16_mx", "bf16", device="cuda")
    x = torch.randn(1, 8192, device="cuda", dtype=torch.bfloat16)
    _capture_and_replay(t.apply, x, e.apply, times=3)   # split-K sums in a fixed order: bitwise stable


def _replay_moe(t, ref, m, tol):
    """Capture t.apply for m tokens (32 experts, top 4), then replay it on new tokens and routing
    (helpers.replay_moe)."""
    x = torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16)
    w, ids = routing(m, 32, 4, "cuda")
    replay_moe(t.apply, ref.apply, x, w, ids, 32, tol)


def test_moe_graph_capture_and_replay():
    t, ref = moe_pair("fp8_block", 32, 1024, 768, 4, "w8a8_block", "fp8", {"activation_granularity": "group"},
                      device="cuda")
    _replay_moe(t, ref, 16, TOL_Q["fp8"])


def test_runtime_probe_and_detected_selection():
    platform = Platform.detect()
    d = select_backend(MoELayer(name="e", num_experts=32, top_k=4, hidden_size=2880, intermediate_size=2880,
                                weight_format="mxfp4", activation="swigluoai"), platform)
    major = torch.cuda.get_device_capability()[0]
    if 8 <= major <= 10:
        assert d.backend == "triton", [(c.kernel, c.reason) for c in d.candidates]


@pytest.mark.parametrize("fmt,mode", [("mxfp4", "w4a16_mx"), ("nvfp4", "w4a16_nvfp4"), ("nvfp4", "w4a4_nvfp4")])
@pytest.mark.parametrize("decode", [0, 1, 2, 3])
def test_gemv_e2m1_decoders_agree(fmt, mode, decode, monkeypatch):
    """The E2M1 decoders of gemv.tile_compute on the checkpoint layout [N, K/2] (integer, E4M3 bits
    converted by hardware, fp16 bits, whole words by inline PTX) give the reference's values (W4A4
    has no word path; the MoE's direct path reads this layout)."""
    if decode == 3 and mode == "w4a4_nvfp4":
        pytest.skip("the word decoder serves layer-dtype activations only")
    import oracle_triton.linear
    from oracle_triton.launch import gemv_config

    monkeypatch.setattr(oracle_triton.linear, "WORD_LAYOUT", False)

    act = "nvfp4" if mode == "w4a4_nvfp4" else "bf16"
    t, e = linear_pair(fmt, 2048, 4096, mode, act, device="cuda")
    for _ in range(2):
        x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
        cfg = {**gemv_config(2048, 4096, t.gemm.facts["sms"], t.gemm.layout.elem, t.gemm.layout.group), "DECODE": decode}
        scale = None
        if t.act:
            from oracle_triton.linear import dynamic_tensor_scale
            scale = dynamic_tensor_scale(x, t.act)
        assert rel(t.gemm(x, t.act, scale, torch.bfloat16, cfg), e.apply(x)) < TOL, decode


def test_moe_aligned_path_graph_capture_and_replay():
    """Above moe.use_direct's bound the sorted, block-aligned grouped GEMM runs: captured and replayed too."""
    t, ref = moe_pair("mxfp4", 32, 1024, 768, 4, "w4a16_mx", "bf16", device="cuda")
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    w, ids = routing(64, 32, 4, "cuda")
    g, out = _graph(t.apply, x, w, ids)
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        assert rel(out, ref.apply(x, w, ids)) < TOL


def test_moe_direct_path_graph_capture_and_replay():
    """A few tokens on 4-bit experts take moe_gemv's two launches: captured, replayed, stable."""
    t, ref = moe_pair("mxfp4", 32, 1024, 768, 4, "w4a16_mx", "bf16", device="cuda", bias=True)
    _replay_moe(t, ref, 2, TOL)


@pytest.mark.parametrize("extra", [{"HX": 1}, {"HX": 2}, {"HX": 2, "PAIRS": 3}])
def test_moe_direct_f16_products_match_emulation(extra):
    """HX 1 (E2M1 words times f16 activations, 4 packed FMAs per word, gemv._E2M1_HX_PTX) and HX 2 (one
    packed sum per MX group) on the direct path (the shipped tiles), also with both K loops two tiles per
    iteration (PAIRS 3), against oracle-emulation: one and two tokens, a K tail (hidden 1056 is not a
    multiple of the K tile), bias, activations up to 1000 and down to 1e-3."""
    from oracle_triton.moe import moe_gemv_config

    t, ref = moe_pair("mxfp4", 32, 1056, 768, 4, "w4a16_mx", "bf16", activation="swigluoai", bias=True,
                      device="cuda")
    t.config = dict(moe_gemv_config(1, t.w13.layout.elem, t.w13.layout.group, words=True), **extra)
    for m in (1, 2):
        x = torch.randn(m, 1056, device="cuda", dtype=torch.bfloat16)
        x[0, :8] = torch.tensor([1000.0, -999.0, 1e-3, -1e-3, 0.0, 300.0, -0.5, 64.0])
        w, ids = routing(m, 32, 4, "cuda")
        y = t.apply(x, w, ids)
        err = rel(y, ref.apply(x, w, ids))
        assert err < TOL, (extra, m, err)


@pytest.mark.parametrize("extra", [{}, {"PAIRS": 3}])
def test_moe_direct_f16_overflow_is_recomputed_in_fp32(extra):
    """An activation of 1e5 (above f16's 65504) on the shipped one-row MXFP4 kernels (HX 2): FC1's f16
    products overflow, and so do FC2's (silu without a clamp makes its inputs ~1e7); the guard (GUARD, on by
    default) redoes those tiles in fp32, so the result matches oracle-emulation. Without the guard the
    same call gives infinities or NaNs (what the test would miss if the guard did nothing)."""
    from oracle_triton.moe import moe_gemv_config

    t, ref = moe_pair("mxfp4", 32, 1056, 768, 4, "w4a16_mx", "bf16", activation="silu", device="cuda")
    cfg = dict(moe_gemv_config(1, t.w13.layout.elem, t.w13.layout.group, words=True), **extra)
    x = torch.randn(1, 1056, device="cuda", dtype=torch.bfloat16)
    x[0, :4] = torch.tensor([1e5, -7e4, 3e4, 1.0])
    w, ids = routing(1, 32, 4, "cuda")
    t.config = dict(cfg, GUARD=0)
    assert not torch.isfinite(t.apply(x, w, ids)).all()
    t.config = cfg
    y = t.apply(x, w, ids)
    assert torch.isfinite(y).all() and rel(y, ref.apply(x, w, ids)) < TOL, extra


@pytest.mark.parametrize("fmt,mode,group,symmetric", [
    ("fp8_block", "w8a16_block", 128, True), ("fp8_channel", "w8a16_fp8_channel", 128, True),
    ("fp8_tensor", "w8a16_fp8_tensor", 128, True), ("int4", "w4a16_int4", 128, True),
    ("int4", "w4a16_int4", 32, False), ("int4", "w4a16_int4", 64, False), ("mxfp4", "w4a16_mx", 128, True),
])
def test_gemv_word_decoders_match_emulation(fmt, mode, group, symmetric):
    """DECODE 3 (inline PTX on 32-bit words: E4M3 pairs, GPTQ nibbles with fp16 zero-point pairs,
    E2M1 via E4M3) against the reference, with a K tail, split-K and both paths of the launcher."""
    from oracle_triton.formats import is_words
    from oracle_triton.launch import gemv_config

    t, e = linear_pair(fmt, 1536, 7168 - 128, mode, "bf16", device="cuda", group=group, symmetric=symmetric,
                       bias=True)
    k = t.k
    for split in (1, 4):
        cfg = {**gemv_config(1536, k, t.gemm.facts["sms"], t.gemm.layout.elem, t.gemm.layout.group, words=True,
                             kn=is_words(t.gemm.layout)), "SPLIT_K": split}
        assert cfg["DECODE"] == 3
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        assert rel(t.gemm(x, 0, None, torch.bfloat16, cfg), e.apply(x)) < TOL, (fmt, group, split)
    assert rel(t.apply(x), e.apply(x)) < TOL


@pytest.mark.parametrize("fmt,symmetric,dtype", [
    ("int4", True, torch.bfloat16), ("int4", False, torch.bfloat16), ("int4", False, torch.float16),
    ("mxfp4", True, torch.bfloat16), ("nvfp4", True, torch.float16),
])
def test_swap_kernel_matches_emulation_and_replays(fmt, symmetric, dtype):
    """gemm.w4_swap_kernel (4-bit weights as the MMA's A operand): INT4 with both decoders (inline
    PTX packed subtraction and the fp32 bit trick), MXFP4 / NVFP4, split-K and a bias, M = 1..32,
    against the reference; then captured in a CUDA graph and replayed on new activations (bitwise
    equal to an eager call: split-K sums in a fixed order)."""
    from oracle import LinearLayer
    from oracle.catalog import Mode
    from helpers import quantize
    from oracle_emulation.linear import EmulationLinear
    from oracle_triton.linear import TritonLinear

    n, k = 1536, 4096
    mode_name = {"int4": "w4a16_int4", "mxfp4": "w4a16_mx", "nvfp4": "w4a16_nvfp4"}[fmt]
    layer = LinearLayer(name="swap", in_features=k, out_features=n, weight_format=fmt,
                        group_size=128 if fmt == "int4" else None, has_bias=True,
                        dtype="float16" if dtype == torch.float16 else "bfloat16")
    tensors = quantize(fmt, torch.randn(n, k, device="cuda") * 0.05, 128, symmetric)
    tensors["bias"] = torch.randn(n, device="cuda")
    mode = Mode(weight=fmt, activation="bf16", name=mode_name)
    t, e = TritonLinear(layer, mode, None), EmulationLinear(layer, mode, None)
    t.process_weights(**tensors)
    e.process_weights(**tensors)
    assert t.gemm.swap_ok(0)
    for m, bm in ((1, 16), (16, 16), (29, 32)):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        for decode in ((3, 0) if fmt == "int4" else (4, 0)):
            for bn, split, warps in ((128, 1, 4), (256, 2, 8)):
                cfg = {"SWAP": 1, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "SPLIT_K": split, "DECODE": decode,
                       "num_warps": warps, "num_stages": 1}
                y = t.gemm(x, 0, None, dtype, cfg)
                assert y.dtype == dtype and rel(y, e.apply(x)) < TOL, (m, decode, bn, split)
    cfg = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "SPLIT_K": 4,
           "DECODE": 3 if fmt == "int4" else 4, "num_warps": 4, "num_stages": 1}
    x = torch.randn(16, k, device="cuda", dtype=dtype)
    _capture_and_replay(lambda xx: t.gemm(xx, 0, None, dtype, cfg), x, e.apply)


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4", "int4"])
def test_swap_pair_order_and_fused_decoder_match_and_replay(fmt):
    """The few-row swap kernel's whole-tile join in the word decoders' pair order (PERM, the activations
    read in that order) and the fused E2M1 decoder (DECODE 5: one packed multiply by 2**126 x scale):
    N = 1000, a row tail, a bias, split-K 2, against the reference; DECODE 5 bitwise equal to the
    two-step decoder (DECODE 4) in both loop forms, and to it again where the layer's scales are
    declared out of the fused range (the launch falls back); the joined tile loaded two K tiles ahead
    bitwise equal to one; captured and replayed."""
    mode = {"mxfp4": "w4a16_mx", "nvfp4": "w4a16_nvfp4", "int4": "w4a16_int4"}[fmt]
    t, e = linear_pair(fmt, 1000, 3072, mode, "bf16", device="cuda", bias=True, symmetric=False)
    dec = 3 if fmt == "int4" else 5
    cfg = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "SPLIT_K": 2, "DECODE": dec, "FULL_TILE": 1,
           "PERM": 1, "num_warps": 8, "num_stages": 1}
    x = torch.randn(20, 3072, device="cuda", dtype=torch.bfloat16)
    y = t.gemm(x, 0, None, torch.bfloat16, cfg)
    assert rel(y, e.apply(x)) < TOL
    assert torch.equal(y, t.gemm(x, 0, None, torch.bfloat16, {**cfg, "PREFETCH": 2}))     # two K tiles ahead
    if fmt != "int4":
        assert t.gemm.fused_ok
        assert torch.equal(y, t.gemm(x, 0, None, torch.bfloat16, {**cfg, "DECODE": 4}))
        plain = {**cfg, "FULL_TILE": 0, "PERM": 0}
        assert torch.equal(t.gemm(x, 0, None, torch.bfloat16, plain), t.gemm(x, 0, None, torch.bfloat16,
                                                                              {**plain, "DECODE": 4}))
        t.gemm.fused_ok = False
        assert torch.equal(y, t.gemm(x, 0, None, torch.bfloat16, cfg))
        t.gemm.fused_ok = True
    _capture_and_replay(lambda xx: t.gemm(xx, 0, None, torch.bfloat16, cfg), x, e.apply)


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4", "int4"])
def test_rega_kernel_matches_emulation_and_replays(fmt):
    """w4_rega (Gluon, sm_90: the decoded words as wgmma's register A operand) through the engine's REGA path:
    N = 1000 (a tile tail), K = 3072, a bias, INT4 zero points, 20 rows (a second row program), split-K
    with a short last split, one and two K tiles ahead, activations in chunks of 4 and 8 tiles, and every K
    tile of a program loaded up front (PF 0: 6 x 4 and 12 x 2 tiles; a split that does not give each program
    exactly XT tiles refused), against the reference; captured and replayed."""
    mode = {"mxfp4": "w4a16_mx", "nvfp4": "w4a16_nvfp4", "int4": "w4a16_int4"}[fmt]
    t, e = linear_pair(fmt, 1000, 3072, mode, "bf16", device="cuda", bias=True, symmetric=False)
    if not t.gemm.rega_ok(0):
        pytest.skip("w4_rega needs an sm_90 GPU (wgmma) and, for E2M1, scales inside the fused decoder's range")
    x = torch.randn(20, 3072, device="cuda", dtype=torch.bfloat16)
    ref = e.apply(x)
    kn = {} if fmt == "int4" else {"KN": 1}
    for warps, split, xt, pf in ((8, 5, 4, 2), (4, 2, 8, 1), (4, 12, 2, 0), (8, 6, 4, 0)):
        cfg = {"REGA": 1, "SPLIT_K": split, "XT": xt, "PF": pf, "num_warps": warps, **kn}
        assert rel(t.gemm(x, 0, None, torch.bfloat16, cfg), ref) < TOL, (warps, split, xt, pf)
    assert not t.gemm.serves({**cfg, "SPLIT_K": 5}, 20, 0)
    with pytest.raises(ValueError, match="PF 0 needs SPLIT_K x XT = K / 128"):
        t.gemm(x, 0, None, torch.bfloat16, {**cfg, "SPLIT_K": 5})
    _capture_and_replay(lambda xx: t.gemm(xx, 0, None, torch.bfloat16, cfg), x, e.apply)


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4", "int4"])
def test_ws_kernel_matches_emulation_and_replays(fmt):
    """w4_ws (Gluon, sm_90: decode warps feeding a shared-memory ring to the MMA warps) through the engine's WS
    path: 300 rows (a row tail at 64 / 128 rows a program), N = 1000 (a weight-row tail), K = 3072, a bias, INT4
    zero points; 8 and 4 MMA warps, 4, 8 and 16 decode warps, 64-256 activation rows a program, rings of 3-6
    slots (the ring wraps many times), the activations through registers and by cp.async 1-3 tiles ahead (XCP),
    the words 2-4 tiles ahead (WPF), slots handed back after the next MMA or their own (MW), K tiles of 64 and
    128 (BK), the proxy fence on either side (PFENCE), the activations by TMA from the MMA or the decode warps
    (XTMA 1 / 2: the row tail zero-filled by the TMA unit), two MMA warpgroups on their own (PP), the decode
    warps as 2 or 4 partitions on every 2nd / 4th K tile (DP; 4 partitions sharing 6 slots), the words by TMA into
    rings of 6-16 slots (WT; 48 K tiles wrap each several times, the weight-row tail zero-filled); against the
    reference, and captured and replayed (XTMA, PP, DP and WT too)."""
    mode = {"mxfp4": "w4a16_mx", "nvfp4": "w4a16_nvfp4", "int4": "w4a16_int4"}[fmt]
    t, e = linear_pair(fmt, 1000, 3072, mode, "bf16", device="cuda", bias=True, symmetric=False)
    if not t.gemm.ws_ok(0):
        pytest.skip("w4_ws needs an sm_90 GPU (wgmma, warp specialization) and, for E2M1, scales inside the fused "
                    "decoder's range")
    x = torch.randn(300, 3072, device="cuda", dtype=torch.bfloat16)
    ref = e.apply(x)
    kn = {} if fmt == "int4" else {"KN": 1}
    cfgs = [dict(num_warps=8, BM=128, STAGES=4, DW=8, DREGS=128, MAXNREG=128),
            dict(num_warps=8, BM=64, STAGES=6, DW=4, DREGS=200, MAXNREG=168),
            dict(num_warps=4, BM=128, STAGES=3, DW=4, DREGS=168, MAXNREG=168),
            dict(num_warps=8, BM=128, STAGES=6, DW=8, DREGS=128, MAXNREG=128, XCP=3),
            dict(num_warps=8, BM=128, STAGES=3, DW=8, DREGS=128, MAXNREG=128, XCP=1, BK=128),
            dict(num_warps=8, BM=128, STAGES=3, DW=8, DREGS=128, MAXNREG=128, XCP=1, BK=128, WPF=3, MW=0),
            dict(num_warps=8, BM=128, STAGES=3, DW=8, DREGS=128, MAXNREG=128, XCP=1, BK=128, WPF=4, MW=0),
            dict(num_warps=4, BM=256, STAGES=4, DW=8, DREGS=104, MAXNREG=168, XCP=1),
            dict(num_warps=4, BM=256, STAGES=5, DW=8, DREGS=104, MAXNREG=168, XCP=3, WPF=4, MW=0),
            dict(num_warps=4, BM=128, STAGES=4, DW=16, DREGS=72, MAXNREG=96, XCP=1, BK=128),
            dict(num_warps=8, BM=128, STAGES=3, DW=8, DREGS=128, MAXNREG=128, XTMA=1, BK=128, WPF=3, MW=0),
            dict(num_warps=4, BM=256, STAGES=4, DW=8, DREGS=104, MAXNREG=168, XTMA=1),
            dict(num_warps=8, BM=64, STAGES=6, DW=4, DREGS=168, MAXNREG=168, XTMA=1, WPF=4),
            dict(num_warps=4, BM=128, STAGES=4, DW=4, DREGS=168, MAXNREG=168, XTMA=2, WPF=3),
            dict(num_warps=8, BM=64, STAGES=6, DW=4, DREGS=168, MAXNREG=168, XTMA=2, WPF=2, PP=1),
            dict(num_warps=8, BM=128, STAGES=3, DW=8, DREGS=128, MAXNREG=128, XTMA=2, BK=128, WPF=3, MW=0, PP=1),
            dict(num_warps=4, BM=256, STAGES=4, DW=8, DREGS=104, MAXNREG=168, XTMA=1, DP=4),
            dict(num_warps=8, BM=128, STAGES=4, DW=8, DREGS=128, MAXNREG=128, XTMA=2, DP=2, MW=0),
            dict(num_warps=4, BM=128, STAGES=6, DW=8, DREGS=104, MAXNREG=168, XTMA=2, DP=4, WPF=3)]
    wt = [dict(num_warps=4, BM=256, STAGES=4, DW=8, DREGS=104, MAXNREG=168, XTMA=1, DP=2, WT=10),
          dict(num_warps=4, BM=256, STAGES=4, DW=8, DREGS=104, MAXNREG=168, XTMA=1, DP=4, WT=16, MW=0),
          dict(num_warps=4, BM=128, STAGES=3, DW=8, DREGS=104, MAXNREG=168, XTMA=1, BK=128, WPF=3, WT=6),
          dict(num_warps=8, BM=64, STAGES=6, DW=4, DREGS=168, MAXNREG=168, XTMA=1, WPF=4, WT=7)]
    for c in cfgs + wt:
        cfg = {"WS": 1, **c, **kn}
        assert t.gemm.serves(cfg, 300, 0), cfg
        assert rel(t.gemm(x, 0, None, torch.bfloat16, cfg), ref) < TOL, cfg
    cfg = {"WS": 1, **cfgs[0], **kn}
    assert rel(t.gemm(x, 0, None, torch.bfloat16, {**cfg, "PFENCE": 1}), ref) < TOL      # the decode warps' fence
    _capture_and_replay(lambda xx: t.gemm(xx, 0, None, torch.bfloat16, cfg), x, e.apply)
    for c in (cfgs[-9], cfgs[-4], cfgs[-3], wt[0]):     # XTMA, PP, DP, WT: the TMA descriptor is built per call
        _capture_and_replay(lambda xx, c=c: t.gemm(xx, 0, None, torch.bfloat16, {"WS": 1, **c, **kn}), x, e.apply)

@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4", "int4"])
def test_ws_persistent_programs_match_the_one_tile_grid(fmt, monkeypatch):
    """PT 1 (w4_ws: a persistent program an SM, the ring and its barriers' phases running on across the program's
    output tiles, the next tile's slots filled while the previous one is written) through the engine's WS path:
    300 rows (a row tail), N = 1000 (a weight-row tail), K of 45 K tiles for E2M1 (odd: with 2 decode partitions a
    partition's first K tile changes from one output tile to the next) and 48 for INT4 with zero points; one and
    two decode partitions, 128- and 256-row blocks; one program an SM, and 1 and 5 programs (each taking many
    tiles); PT 2 (the decode loop unrolled by two trips; 45 K tiles in 2 partitions: one partition's trip count
    odd, its last unrolled trip decoded and not stored): the same bits as the one-tile grid, within the
    reference's tolerance, captured and replayed."""
    from oracle_triton import launch

    mode = {"mxfp4": "w4a16_mx", "nvfp4": "w4a16_nvfp4", "int4": "w4a16_int4"}[fmt]
    k = 3072 if fmt == "int4" else 2880
    t, e = linear_pair(fmt, 1000, k, mode, "bf16", device="cuda", bias=True, symmetric=False)
    if not t.gemm.ws_ok(0):
        pytest.skip("w4_ws needs an sm_90 GPU (wgmma, warp specialization) and, for E2M1, scales inside the fused "
                    "decoder's range")
    x = torch.randn(300, k, device="cuda", dtype=torch.bfloat16)
    ref = e.apply(x)
    kn = {} if fmt == "int4" else {"KN": 1}
    for c in (dict(num_warps=4, BM=256, STAGES=4, DW=8, DREGS=104, MAXNREG=168, XTMA=1, DP=2),
              dict(num_warps=4, BM=128, STAGES=4, DW=8, DREGS=104, MAXNREG=168, XTMA=1, DP=1, WPF=3)):
        cfg = {"WS": 1, **c, **kn}
        one = t.gemm(x, 0, None, torch.bfloat16, cfg)
        for pt in (1, 2) if cfg.get("WPF", 2) == 2 else (1,):
            for programs in (None, 1, 5):
                monkeypatch.setattr(launch, "PT_PROGRAMS", programs)
                y = t.gemm(x, 0, None, torch.bfloat16, {**cfg, "PT": pt})
                assert torch.equal(y, one), (cfg, pt, programs)
                assert rel(y, ref) < TOL, (cfg, pt, programs)
    monkeypatch.setattr(launch, "PT_PROGRAMS", 5)
    for pt in (1, 2):
        cfg = {"WS": 1, "num_warps": 4, "BM": 256, "STAGES": 4, "DW": 8, "DREGS": 104, "MAXNREG": 168, "XTMA": 1,
               "DP": 2, "PT": pt, **kn}
        _capture_and_replay(lambda xx, cfg=cfg: t.gemm(xx, 0, None, torch.bfloat16, cfg), x, e.apply)



def _runs_h200_entries(gemm, m: int) -> bool:
    """The tuned table serves this device the H200's entry for the layer at M rows: the H200's own, or a sibling's
    (tuned.find: an H100 SXM shares the H200's capability and SM count)."""
    from oracle_triton import tuned
    from oracle_triton.launch import device_traits

    return tuned.find(gemm.facts["name"], "dense", gemm.mode, gemm.n, gemm.k, m,
                      traits=device_traits(gemm.facts))[1] == "NVIDIA H200"


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4", "int4"])
def test_tuned_ws_entry_serves_the_whole_layer_call(fmt, monkeypatch):
    """The H200's shipped 256-row entry of an 8192x8192 4-bit layer selects w4_ws through the public call:
    TritonLinear.apply on 256 rows (config_for's tuned lookup, the launch plan's recording call) runs DenseGemm.ws
    and matches the reference, and so does the second call (other activations): the plan's replay, or, for an
    entry whose activations go by TMA (XTMA: the descriptor holds the call's x), the ordinary path again."""
    from oracle_triton.launch import DenseGemm

    mode = {"mxfp4": "w4a16_mx", "nvfp4": "w4a16_nvfp4", "int4": "w4a16_int4"}[fmt]
    t, e = linear_pair(fmt, 8192, 8192, mode, "bf16", device="cuda")
    if not _runs_h200_entries(t.gemm, 256) or not t.gemm.ws_ok(0):
        pytest.skip("the WS entries are the H200's and its siblings' (sm_90, E2M1 scales inside the fused decoder's "
                    "range)")
    cfg = t.gemm.config_for(256, t.act)
    assert cfg.get("WS")
    ran = []
    ws = DenseGemm.ws
    monkeypatch.setattr(DenseGemm, "ws", lambda self, x, cfg: ran.append(cfg) or ws(self, x, cfg))
    x = torch.randn(256, 8192, device="cuda", dtype=torch.bfloat16)
    assert rel(t.apply(x), e.apply(x)) < TOL and len(ran) == 1
    x2 = torch.randn_like(x)
    assert rel(t.apply(x2), e.apply(x2)) < TOL
    assert len(ran) == (2 if cfg.get("XTMA") else 1)    # a TMA descriptor of x: no launch plan, the ordinary path


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4", "int4"])
def test_tuned_rega_entry_serves_the_whole_layer_call(fmt, monkeypatch):
    """The H200's shipped M = 16 entry of an 8192x8192 4-bit layer selects the register-A kernel through the
    public call: TritonLinear.apply on 16 rows (config_for's tuned lookup, the launch plan's recording call)
    runs DenseGemm.rega and matches the reference, and so does the plan's replay (the second call); fp16
    activations and output (w4_rega: bf16 only) run the swap entry the REGA entry carries (rega_swap)."""
    from oracle_triton.formats import rega_swap
    from oracle_triton.launch import DenseGemm

    mode = {"mxfp4": "w4a16_mx", "nvfp4": "w4a16_nvfp4", "int4": "w4a16_int4"}[fmt]
    t, e = linear_pair(fmt, 8192, 8192, mode, "bf16", device="cuda")
    if not _runs_h200_entries(t.gemm, 16) or not t.gemm.rega_ok(0):
        pytest.skip("the REGA entries are the H200's and its siblings' (sm_90, E2M1 scales inside the fused "
                    "decoder's range)")
    assert t.gemm.config_for(16, t.act).get("REGA")
    ran = []
    rega = DenseGemm.rega
    monkeypatch.setattr(DenseGemm, "rega", lambda self, x, cfg: ran.append(cfg) or rega(self, x, cfg))
    x = torch.randn(16, 8192, device="cuda", dtype=torch.bfloat16)
    assert rel(t.apply(x), e.apply(x)) < TOL and len(ran) == 1
    x2 = torch.randn_like(x)
    assert rel(t.apply(x2), e.apply(x2)) < TOL
    swaps = []
    swap = DenseGemm.swap
    monkeypatch.setattr(DenseGemm, "swap", lambda self, xx, out, cfg: swaps.append(cfg) or swap(self, xx, out, cfg))
    y16 = t.gemm(x.half(), 0, None, torch.float16)
    cfg = t.gemm.config_for(16, t.act)
    assert y16.dtype == torch.float16 and rel(y16, e.apply(x)) < TOL and len(ran) == 1
    assert swaps == [rega_swap(cfg)] and rega_swap(cfg) is not None


@pytest.mark.parametrize("fmt,dtype", [("mxfp4", torch.bfloat16), ("nvfp4", torch.bfloat16), ("int4", torch.bfloat16)])
def test_words_full_tile_gemm_matches_emulation_and_replays(fmt, dtype):
    """The large-M 4-bit GEMM with whole tiles decoded by words (FULL_TILE 2: E2M1 bit placement,
    GPTQ packed subtraction with zero points) against the reference, with a bias and a row tail,
    then captured in a CUDA graph and replayed."""
    mode = {"mxfp4": "w4a16_mx", "nvfp4": "w4a16_nvfp4", "int4": "w4a16_int4"}[fmt]
    t, e = linear_pair(fmt, 1024, 2048, mode, "bf16", device="cuda", bias=True, symmetric=False)
    cfg = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128 if fmt == "int4" else 64, "SPLIT_K": 1, "GROUP_M": 8,
           "FULL_TILE": 2, "num_warps": 8, "num_stages": 3}
    x = torch.randn(200, 2048, device="cuda", dtype=dtype)
    ref = e.apply(x)
    assert rel(t.gemm(x, 0, None, dtype, cfg), ref) < TOL
    g, out = _graph(lambda xx: t.gemm(xx, 0, None, dtype, cfg), x)
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    assert rel(out, e.apply(x)) < TOL


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4", "int4"])
def test_wgmma_words_gemm_matches_emulation_and_replays(fmt):
    """The many-row 4-bit kernel (w4_wgmma: the decoded word tile as wgmma's register A operand) on
    the [K/8, N] words (E2M1 repacked at load; INT4 with zero points), a partial N tile (N = 1000),
    a row tail, a bias and split-K 2, against the reference; then captured in a CUDA graph and
    replayed (the split-K counters reset; bitwise equal to an eager call)."""
    mode = {"mxfp4": "w4a16_mx", "nvfp4": "w4a16_nvfp4", "int4": "w4a16_int4"}[fmt]
    t, e = linear_pair(fmt, 1000, 3072, mode, "bf16", device="cuda", bias=True, symmetric=False)
    cfg = {"WG": 1, "BLOCK_M": 256, "BLOCK_N": 64, "BLOCK_K": 64, "SPLIT_K": 2, "GROUP_M": 8, "num_warps": 4,
           "num_stages": 3}
    x = torch.randn(200, 3072, device="cuda", dtype=torch.bfloat16)
    assert rel(t.gemm(x, 0, None, torch.bfloat16, cfg), e.apply(x)) < TOL
    _capture_and_replay(lambda xx: t.gemm(xx, 0, None, torch.bfloat16, cfg), x, e.apply)


@pytest.mark.parametrize("fmt,dtype", [("mxfp4", torch.bfloat16), ("nvfp4", torch.bfloat16),
                                       ("mxfp4", torch.float16)])
def test_e2m1_bit_placement_decoder_exact(fmt, dtype):
    """gemm.e2m1_word_ptx (E2M1 bits placed in a bf16/fp16, times 2**126 / 2**14, times the group
    scale) against oracle-emulation's dequantized weight, every code pair at many scales: MXFP4
    (powers of two) bit for bit, E8M0 bytes 100-140 included (scales above 2, where value x 2**126
    x scale would overflow if folded into one factor); NVFP4 (scale E4M3 x global rounded to the
    16-bit type first) within one rounding of the reference."""
    from helpers import quantize
    from oracle import LinearLayer
    from oracle.catalog import Mode
    from oracle_emulation.weights import dequantize_weight
    from oracle_triton.linear import TritonLinear

    n, k = 256, 1024
    tensors = quantize(fmt, torch.randn(n, k, device="cuda") * 0.05)
    idx = torch.arange(n * k // 2, device="cuda", dtype=torch.int64)
    tensors["weight"] = ((idx * 7 + (idx >> 3)) & 255).to(torch.uint8).reshape(n, k // 2)     # all 256 code pairs
    if fmt == "mxfp4":
        sidx = torch.arange(tensors["weight_scale"].numel(), device="cuda")
        tensors["weight_scale"] = (100 + sidx % 41).to(torch.uint8).reshape(tensors["weight_scale"].shape)
    layer = LinearLayer(name="exact", in_features=k, out_features=n, weight_format=fmt, has_bias=False,
                        dtype="float16" if dtype == torch.float16 else "bfloat16")
    t = TritonLinear(layer, Mode(weight=fmt, activation="bf16", name="w4a16_mx" if fmt == "mxfp4" else "w4a16_nvfp4"),
                     None)
    t.process_weights(**tensors)
    names = {"weight": "weight", "scale": "weight_scale", "global": "weight_global_scale"}
    roles = {"weight": "weight", "weight_scale": "scale", "weight_global_scale": "global"}
    ref = dequantize_weight(fmt, {roles[kk]: v for kk, v in tensors.items()}, names, [], n, k).to(dtype)
    got = t.gemm.dequantized(dtype)
    if fmt == "mxfp4":
        assert torch.equal(got, ref)
    else:
        assert ((got.float() - ref.float()).abs() <= ref.float().abs() * 2.0 ** -7).all()


@pytest.mark.parametrize("fmt,mode,gran", [("fp8_channel", "w8a8_fp8_channel", "token"),
                                           ("fp8_tensor", "w8a8_fp8_tensor", "tensor")])
def test_fp8_swap_kernel_matches_emulation_and_replays(fmt, mode, gran):
    """gemm.fp8_swap_kernel on float8 tensor cores: M = 1..256 with 16- to 128-row tiles, K tiles of
    128 and 256, split-K, a bias, against the reference; captured and replayed (bitwise equal to an
    eager call)."""
    from oracle_triton.linear import dynamic_tensor_scale

    t, e = linear_pair(fmt, 1536, 4096, mode, "fp8", {"activation_granularity": gran}, device="cuda", bias=True)
    assert t.gemm.swap_ok(t.act)
    for m, bm in ((1, 16), (16, 16), (29, 32), (256, 64), (200, 128)):
        x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        scale = dynamic_tensor_scale(x) if gran == "tensor" else None
        for bn, bk, split, warps in ((128, 128, 1, 4), (256, 128, 2, 8), (64, 256, 4, 4)):
            cfg = {"SWAP": 1, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": warps,
                   "num_stages": 3}
            assert rel(t.gemm(x, t.act, scale, torch.bfloat16, cfg), e.apply(x)) < TOL, (m, bm, bn, bk, split)
            if m == 1:      # the row rounded inside the GEMM (QUANT_IN, the default at M = 1): the quantizer's codes
                assert torch.equal(t.gemm(x, t.act, scale, torch.bfloat16, cfg),
                                   t.gemm(x, t.act, scale, torch.bfloat16, {**cfg, "QUANT_IN": 0}))
            elif split == 1 and m in (16, 29):     # each program rounds its own rows (QUANT_IN 1): the
                # quantizer's codes, bit for bit
                assert torch.equal(t.gemm(x, t.act, scale, torch.bfloat16, {**cfg, "QUANT_IN": 1}),
                                   t.gemm(x, t.act, scale, torch.bfloat16, {**cfg, "QUANT_IN": 0})), (m, bm, bn, split)
            if m == 16 and gran == "token" and split == 1:   # the rows quantized by the GEMM's programs
                assert t.gemm.coop_ok(x, t.act, {**cfg, "COOP": 1})   # (COOP 1, waiters sleeping on acquire
                assert torch.equal(t.gemm(x, t.act, scale, torch.bfloat16, {**cfg, "COOP": 1}),   # loads): the
                                   t.gemm(x, t.act, scale, torch.bfloat16, cfg))                  # quantizer's codes
    cfg = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "SPLIT_K": 4, "num_warps": 4, "num_stages": 4}
    x1 = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    g, out = _graph(lambda xx: t.gemm(xx, t.act, dynamic_tensor_scale(xx) if gran == "tensor" else None,
                                      torch.bfloat16, cfg), x1)
    x1.copy_(torch.randn_like(x1))
    g.replay()
    torch.cuda.synchronize()
    assert rel(out, e.apply(x1)) < TOL
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    g, out = _graph(lambda xx: t.gemm(xx, t.act, dynamic_tensor_scale(xx) if gran == "tensor" else None,
                                      torch.bfloat16, cfg), x)
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        assert rel(out, e.apply(x)) < TOL
        assert torch.equal(out, t.gemm(x, t.act, dynamic_tensor_scale(x) if gran == "tensor" else None,
                                       torch.bfloat16, cfg))
    g, out = _graph(lambda xx: t.gemm(xx, t.act, dynamic_tensor_scale(xx) if gran == "tensor" else None,   # QUANT_IN
                                      torch.bfloat16, {**cfg, "QUANT_IN": 1}), x)                           # replayed
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, t.gemm(x, t.act, dynamic_tensor_scale(x) if gran == "tensor" else None, torch.bfloat16,
                                   {**cfg, "QUANT_IN": 0}))
    if gran == "token":         # COOP in a launch plan (the second eager call replays it) and replayed in a
        t.gemm._configs[(16, t.act)] = {**cfg, "COOP": 1}       # graph: the quantizer's bits
        t.apply(x)
        assert torch.equal(t.apply(x), t.gemm(x, t.act, None, torch.bfloat16, cfg))
        g, out = _graph(lambda xx: t.gemm(xx, t.act, None, torch.bfloat16, {**cfg, "COOP": 1}), x)
        for _ in range(2):
            x.copy_(torch.randn_like(x))
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, t.gemm(x, t.act, None, torch.bfloat16, cfg))


def test_fp8_swap_with_programmatic_dependent_launch_gives_the_same_bits():
    """FP8 W8A8 per token, 16 rows, PDL 1 (the quantizer lets the GEMM start at once; the GEMM
    prefetches its weights, then waits for the codes): bit for bit the two ordinary launches, eagerly,
    in a launch plan and under graph replay. One row with PF_L2 1 (the prefetch alone, the row rounded
    inside the GEMM): the same bits, eagerly and planned."""
    t, e = linear_pair("fp8_channel", 1536, 4096, "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
                       device="cuda", bias=True)
    for m, split in ((1, 2), (16, 4)):      # (few compiles: the GPU check's time is Triton compiling)
        cfg = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": split,
               "num_warps": 4, "num_stages": 4, "PDL": 0}        # the two ordinary launches
        x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        want = t.gemm(x, t.act, None, torch.bfloat16, cfg)
        assert rel(want, e.apply(x)) < TOL
        other = {**cfg, "PF_L2": 1} if m == 1 else {**cfg, "PDL": 1}
        assert torch.equal(t.gemm(x, t.act, None, torch.bfloat16, other), want), m
    t.gemm._configs[(16, t.act)] = {**cfg, "BLOCK_M": 16, "SPLIT_K": 4, "PDL": 1}
    t.gemm._configs[(1, t.act)] = {**cfg, "BLOCK_M": 16, "SPLIT_K": 2, "PF_L2": 1}
    x1 = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    t.apply(x1)
    assert torch.equal(t.apply(x1), t.gemm(x1, t.act, None, torch.bfloat16, {**cfg, "BLOCK_M": 16, "SPLIT_K": 2}))
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    want = t.gemm(x, t.act, None, torch.bfloat16, {**cfg, "BLOCK_M": 16, "SPLIT_K": 4})
    t.apply(x)
    assert torch.equal(t.apply(x), want)            # the second call replays the plan
    g, out = _graph(lambda xx: t.gemm(xx, t.act, None, torch.bfloat16), x)
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, t.gemm(x, t.act, None, torch.bfloat16, {**cfg, "BLOCK_M": 16, "SPLIT_K": 4}))


def test_gemlite_fp8_peer_matches_emulation_and_replays():
    """The gemlite peer (triton.linear.gemlite_fp8) on FP8 per-channel weights with a bias, 1 and 16
    rows, against oracle-emulation's W8A8 per-token numerics; captured and replayed. gemlite's
    autotuning is set to its default configurations here (a test times nothing; its numerics do not
    depend on the tile)."""
    pytest.importorskip("gemlite")
    from gemlite.triton_kernels.config import AUTOTUNE, set_autotune
    from oracle_triton.gemlite_peer import GemliteFP8ChannelLinear

    before = {key: getattr(AUTOTUNE, key) for key in ("GEMV", "GEMV_REVSPLITK", "GEMV_SPLITK", "GEMM_SPLITK", "GEMM")}
    set_autotune("default")
    try:
        t, e = linear_pair("fp8_channel", 1536, 4096, "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
                           device="cuda", bias=True, kernel=GemliteFP8ChannelLinear)
        for m in (1, 16):
            x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
            assert rel(t.apply(x), e.apply(x)) < TOL, m
        g, out = _graph(t.apply, x)
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        assert rel(out, e.apply(x)) < TOL
    finally:
        set_autotune(before)


def _replay_agrees(run, x, ref):
    """Capture run(x), replay it on new activations: bitwise what an eager call gives, and close to
    the reference."""
    g, out = _graph(run, x)
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, run(x)) and rel(out, ref.apply(x)) < TOL


@pytest.mark.parametrize("fmt,mode,gran", [("fp8_channel", "w8a8_fp8_channel", "token"),
                                           ("fp8_tensor", "w8a8_fp8_tensor", "tensor")])
def test_scaled_mm_hand_off_matches_emulation_and_replays(fmt, mode, gran):
    """SCALED_MM (our activation codes, torch._scaled_mm rowwise, bias fused) at M = 1..300 against
    the reference, and captured / replayed."""
    from oracle_triton.linear import dynamic_tensor_scale

    t, e = linear_pair(fmt, 1536, 4096, mode, "fp8", {"activation_granularity": gran}, device="cuda", bias=True)

    def run(x):
        return t.gemm(x, t.act, dynamic_tensor_scale(x) if gran == "tensor" else None, torch.bfloat16,
                      {"SCALED_MM": 1})
    for m in (1, 16, 256, 300):
        x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        assert rel(run(x), e.apply(x)) < TOL, m
    _replay_agrees(run, torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16), e)


@pytest.mark.parametrize("fmt,mode", [("int4", "w4a16_int4"), ("mxfp4", "w4a16_mx"), ("nvfp4", "w4a16_nvfp4"),
                                      ("fp8_block", "w8a16_block"), ("fp8_channel", "w8a16_fp8_channel")])
def test_dequant_mm_matches_emulation_and_replays(fmt, mode):
    """DEQUANT_MM at M = 256 / 300 (model-sized N and K, a partial last N tile), and captured /
    replayed (the transient weight buffer is the graph's own)."""
    t, e = linear_pair(fmt, 2112, 7168, mode, "bf16", device="cuda", bias=True)

    def run(x):
        return t.gemm(x, 0, None, torch.bfloat16, {"DEQUANT_MM": 1})
    for m in (256, 300):
        x = torch.randn(m, 7168, device="cuda", dtype=torch.bfloat16)
        assert rel(run(x), e.apply(x)) < TOL, m
    _replay_agrees(run, torch.randn(256, 7168, device="cuda", dtype=torch.bfloat16), e)


@pytest.mark.parametrize("fmt,mode", [("mxfp4", "w4a16_mx"), ("nvfp4", "w4a16_nvfp4"), ("int4", "w4a16_int4")])
def test_fp4_rows_gemv_and_joined_swap_match_emulation_and_replay(fmt, mode, monkeypatch):
    """fp4_gemv.fp4_rows_kernel with the PTX word decoder (E2M1, M = 1: a partial row block, three
    K chunks, split-K and bias) and the swap-AB kernel's JOIN (one dot per K tile, M = 16, both word
    decoders) and PREFETCH 2 (E2M1) against the reference; then the row GEMV captured in a CUDA graph
    and replayed on new activations (bitwise equal to an eager call: the chunks are summed in a fixed
    order). E2M1 in the checkpoint layout (the row GEMV reads only that; linear.WORD_LAYOUT)."""
    import oracle_triton.linear

    monkeypatch.setattr(oracle_triton.linear, "WORD_LAYOUT", False)
    n, k = 1000, 3072
    t, e = linear_pair(fmt, n, k, mode, "bf16", {}, device="cuda", bias=True)
    x16 = torch.randn(16, k, device="cuda", dtype=torch.bfloat16)
    join = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "SPLIT_K": 4, "DECODE": 3 if fmt == "int4" else 4,
            "num_warps": 8, "num_stages": 1, "FULL_TILE": 1}
    assert rel(t.gemm(x16, 0, None, torch.bfloat16, join), e.apply(x16)) < TOL
    if fmt == "int4":
        return
    ahead = {**join, "FULL_TILE": 0, "PREFETCH": 2}       # the swap kernel loading two K tiles ahead
    assert rel(t.gemm(x16, 0, None, torch.bfloat16, ahead), e.apply(x16)) < TOL
    rows = {"ROWS": 256, "BLOCK_N": 32, "BLOCK_K": 1024, "SPLIT_K": 3, "DECODE": 3, "num_warps": 4, "num_stages": 1}
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    assert rel(t.gemm(x, 0, None, torch.bfloat16, rows), e.apply(x)) < TOL
    _capture_and_replay(lambda xx: t.gemm(xx, 0, None, torch.bfloat16, rows), x, e.apply)


@pytest.mark.parametrize("fmt,mode,act,params", [
    ("int4", "w4a16_int4", "bf16", {}),
    ("mxfp4", "w4a16_mx", "bf16", {}),
    ("fp8_channel", "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"}),
    ("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}),
    ("fp8_tensor", "w8a8_fp8_tensor", "fp8", {"activation_granularity": "tensor"}),
    ("nvfp4", "w4a4_nvfp4", "nvfp4", {}),
])
def test_planned_eager_calls_equal_the_ordinary_launches(fmt, mode, act, params):
    """fastlaunch: from the second eager call of a shape on, `apply` replays the recorded launches
    with Triton's launcher directly; the outputs are bit for bit those of the ordinary launches, for
    new activations, a [1, 1, K] input, an input not 16-byte aligned (INT4: its own plan) and under a
    caller's CUDA-graph capture; one to three launches per call (FP8 at 16 rows: quantizer + GEMM).
    Dynamic per-tensor scales (FP8, NVFP4 W4A4) come from one Triton program (launch.tensor_scale),
    or at one FP8 row from the GEMM itself: equal to the call with torch's dynamic_tensor_scale."""
    from oracle_triton.linear import dynamic_tensor_scale

    t, e = linear_pair(fmt, 1536, 4096, mode, act, params, device="cuda", bias=True)

    def ordinary(x):
        x2 = x.reshape(-1, 4096)
        scale = dynamic_tensor_scale(x2, t.act) if mode in ("w8a8_fp8_tensor", "w4a4_nvfp4") else None
        return t.gemm(x2, t.act, scale, torch.bfloat16).reshape(*x.shape[:-1], 1536)
    for m in (1, 16):
        for trial in range(3):
            x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
            got = t.apply(x)
            assert torch.equal(got, ordinary(x)), (m, trial)
            assert rel(got, e.apply(x)) < TOL_Q[act]
        assert t.gemm._plans.get((m, torch.bfloat16, True)), (m, t.gemm._plans)       # the call was planned
    x3 = torch.randn(1, 1, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):
        y3 = t.apply(x3)
    assert y3.shape == (1, 1, 1536) and torch.equal(y3, ordinary(x3))
    if fmt == "int4":       # an input 2 bytes off 16-byte alignment gets its own plan (another compile)
        odd = torch.randn(4097, device="cuda", dtype=torch.bfloat16)[1:].view(1, 4096)
        for _ in range(2):
            assert torch.equal(t.apply(odd), ordinary(odd))
    xs = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    g, out = _graph(t.apply, xs)
    xs.copy_(torch.randn_like(xs))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, ordinary(xs))


@pytest.mark.parametrize("k", [4096, 7168, 18432])
@pytest.mark.parametrize("quantizer", ["shipped", "act_qdq", "act_qdq fast", "division", "chunks"])
def test_per_token_codes_are_torchs_float8_cast(k, quantizer, monkeypatch):
    """The per-token quantizer (shipped: fp8_rowgemv.row_codes_kernel up to K = 16384 with the quotients from the
    scale's reciprocal, launch.FAST_CODES_DIV; act_qdq_kernel, TOKEN_ROW_CODES off, with and without
    ACT_QDQ_FAST_CODES; row_codes with the division;
    chunks: split_codes_kernel's 2048-wide programs above 16384) on 64 bf16 rows whose scales span 2**-70..2**70
    (inside and outside the reciprocal's range), with values next to E4M3's rounding ties, -0 and +0 and a zero
    row (helpers.fp8_hostile_rows): the scales are amax / 448 (1 for the zero row) and the codes torch's
    float8_e4m3fn cast of x / scale, bit for bit."""
    from oracle_triton import launch
    from oracle_triton.formats import ACT_TOKEN

    if quantizer.startswith("act_qdq"):
        monkeypatch.setattr(launch, "TOKEN_ROW_CODES", False)
        monkeypatch.setattr(launch, "ACT_QDQ_FAST_CODES", quantizer.endswith("fast"))
    elif quantizer == "division":
        monkeypatch.setattr(launch, "FAST_CODES_DIV", False)
    elif quantizer == "chunks":
        monkeypatch.setattr(launch, "TOKEN_SPLIT_CHUNK", 2048)
    x = fp8_hostile_rows(64, k, k, seed=k).cuda()
    codes, scales = launch.quantize_activation_codes(x, ACT_TOKEN, None, launch.device_facts(x.device))
    ref, ref_s = torch_token_codes(x)
    assert torch.equal(scales, ref_s)
    assert torch.equal(codes.view(torch.uint8), ref)


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("act_name", ["group", "tensor"])
def test_group_and_tensor_codes_are_torchs_float8_cast(act_name, fast, monkeypatch):
    """act_qdq_kernel's 1x128-group and per-tensor codes with and without launch.ACT_QDQ_FAST_CODES (the hardware
    conversion; per group the reciprocal's quotients) on 64 bf16 rows of K = 7168 whose groups' scales span
    2**-70..2**70, with values next to E4M3's ties, -0, +0 and a zero group: scales amax / 448 (1 for the zero
    group) and codes torch's float8_e4m3fn cast of x / scale, bit for bit; per tensor a static scale that saturates
    the larger rows at +-448."""
    from oracle_triton import launch
    from oracle_triton.formats import ACT_GROUP, ACT_TENSOR

    monkeypatch.setattr(launch, "ACT_QDQ_FAST_CODES", fast)
    m, k = 64, 7168
    x = fp8_hostile_rows(m, k, 128, seed=11).cuda()
    facts = launch.device_facts(x.device)
    if act_name == "group":
        codes, scales = launch.quantize_activation_codes(x, ACT_GROUP, None, facts)
        ref, ref_s = torch_group_codes(x, 128)
        assert torch.equal(scales, ref_s.T)
    else:
        g = torch.Generator().manual_seed(11)
        xt = (torch.randn(m, k, generator=g) * 3).to(torch.bfloat16).cuda()
        scale = torch.tensor([0.004], device="cuda")
        codes, scales = launch.quantize_activation_codes(xt, ACT_TENSOR, scale, facts)
        assert scales is scale
        ref = torch_fp8_codes(xt, scale)
    assert torch.equal(codes.view(torch.uint8), ref)


@pytest.mark.parametrize("fmt,mode", [("mxfp4", "w4a16_mx"), ("nvfp4", "w4a16_nvfp4")])
def test_word_layout_paths_match_emulation_and_replay(fmt, mode):
    """W4A16 E2M1 repacked into GPTQ's [K/8, N] words (weights.repack_words), every path of the
    linear on it: the one-row GEMV (INT4's structure with the E2M1 word decoder; split-K, a partial
    N tile, bias), the few-row swap kernel, the tiled GEMM's default, the dequantizing pass, against
    the reference (the tiled GEMM's whole-tile word decode needs N a multiple of 16: refused here,
    timed by test_words_full_tile_gemm_matches_emulation_and_replays); then the one-row call captured
    in a CUDA graph and replayed."""
    from oracle_triton.formats import is_words

    n, k = 1000, 3072
    t, e = linear_pair(fmt, n, k, mode, "bf16", {}, device="cuda", bias=True)
    assert is_words(t.gemm.layout) and t.packed.weight.shape == (k // 8, n)
    for m, cfg in ((1, None), (1, {"BLOCK_N": 64, "BLOCK_K": 256, "SPLIT_K": 3, "DECODE": 3, "num_warps": 4,
                                   "num_stages": 3}),
                   (16, None), (64, None), (64, {"DEQUANT_MM": 1})):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        assert rel(t.gemm(x, 0, None, torch.bfloat16, cfg), e.apply(x)) < TOL, (m, cfg)
    with pytest.raises(ValueError, match="multiple of 16"):     # N = 1000: refused before Triton fails to compile it
        t.gemm(x, 0, None, torch.bfloat16, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1,
                                            "FULL_TILE": 2, "num_warps": 4, "num_stages": 3})
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    g, out = _graph(lambda xx: t.apply(xx), x)
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        assert rel(out, e.apply(x)) < TOL
        assert torch.equal(out, t.apply(x))
