"""On a real GPU: every torch kernel agrees with the emulation reference, misaligned shapes are
rejected cleanly, and the runtime probe reports refusals instead of crashing.

Tolerance: both sides multiply the same quantized operands (the activation quantizers round
bit for bit alike, tests/test_torch_quantize.py). The emulation rounds each dequantized weight
and activation to bf16 (relative error <= 2**-9 each) and its output to bf16; the torch GEMM
multiplies the exact FP8/FP4 values with fp32 accumulation and rounds once to bf16 (2**-9).
Independent per-element roundings of 2**-9 leave a relative Frobenius error of a few times
2**-9 ~ 0.2-0.6%; the bound used is 1e-2. A wrong layout or scale gives errors of order 1.
All tests here are marked `gpu` and skip cleanly when no CUDA device is present.
"""
from __future__ import annotations

import pytest
from oracle_emulation.formats import codec_for
from oracle_torch import runtime

import torch

from oracle import KernelConfig, LinearLayer, Platform, select_backend
from oracle.errors import TensorError


pytestmark = pytest.mark.gpu
TOLERANCE = 1e-2
EMULATION = KernelConfig(linear_backend="emulation")
M_VALUES = [1, 5, 16, 33, 256]
FP8_SHAPES = {  # (N, K): aligned, unaligned to 128 (but to 16), 3 K-blocks, a DeepSeek-R1 shape
    "fp8_tensor": [(256, 512), (272, 400), (1536, 7168)],
    "fp8_channel": [(256, 512), (272, 400), (1536, 7168)],
    "fp8_block": [(256, 512), (384, 384), (1536, 7168)],
    "mxfp8": [(256, 512), (272, 416)],
    "nvfp4": [(256, 512), (272, 416)],
}


@pytest.fixture(scope="module")
def detected():
    return Platform.detect()


def _capability():
    return torch.cuda.get_device_capability()


def _served_here(fmt):
    major = _capability()[0]
    if fmt in ("mxfp8", "nvfp4"):
        return major == 10
    if fmt == "fp8_block":
        return major in (9, 10)
    return _capability() >= (8, 9) and major < 12


def _block_layout():
    return runtime.block_scale_layout(torch.device("cuda", torch.cuda.current_device()))


def _layer(fmt, n, k, dtype="bfloat16", **more):
    act = "nvfp4" if fmt == "nvfp4" else None
    return LinearLayer(name=f"{fmt}-{n}x{k}", in_features=k, out_features=n, weight_format=fmt,
                       activation_format=act, dtype=dtype, **more)


def _pair(layer, platform, **extra):
    """(torch kernel, emulation kernel) with the same checkpoint tensors processed."""
    w = torch.randn(layer.out_features, layer.in_features, device="cuda") * 0.05
    tensors = {k: v for k, v in codec_for(layer.weight_format).quantize(w, layer.weight_format).items()
               if v is not None}
    tensors.update(extra)
    d = select_backend(layer, platform)
    assert d.backend == "torch", [(c.kernel, c.reason) for c in d.candidates]
    t = d.instantiate(layer)
    e = select_backend(layer, platform, EMULATION).instantiate(layer)
    t.process_weights(**tensors)
    e.process_weights(**tensors)
    return t, e


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("fmt", list(FP8_SHAPES))
def test_every_kernel_agrees_with_emulation_on_the_shape_grid(fmt, detected):
    if not _served_here(fmt):
        pytest.skip(f"{fmt} is not declared for capability {_capability()} (see kernels.yaml)")
    worst = 0.0
    for n, k in FP8_SHAPES[fmt]:
        layer = _layer(fmt, n, k, group_size=128 if fmt == "fp8_block" else None)
        if fmt == "fp8_block" and (k // 128) % 4 and _block_layout() == "l4-only":
            d = select_backend(layer, detected)        # the probe found K/128 % 4 unsupported: rejected
            assert d.backend != "torch" and any("divisible by 4" in c.reason for c in d.candidates)
            continue
        t, e = _pair(layer, detected)
        for m in M_VALUES:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 3
            yt, ye = t.apply(x), e.apply(x)
            assert yt.shape == (m, n) and yt.dtype == torch.bfloat16
            assert torch.isfinite(yt).all()
            err = _rel(yt, ye)
            worst = max(worst, err)
            assert err < TOLERANCE, (fmt, m, n, k, err)
    print(f"{fmt}: worst relative Frobenius error vs emulation {worst:.2e}")


@pytest.mark.parametrize("fmt", ["fp8_tensor", "fp8_channel"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_other_output_dtypes(fmt, dtype, detected):
    if not _served_here(fmt):
        pytest.skip(f"{fmt} is not declared for capability {_capability()}")
    t, e = _pair(_layer(fmt, 256, 512, dtype=dtype), detected)
    x = torch.randn(16, 512, device="cuda", dtype=getattr(torch, dtype))
    yt, ye = t.apply(x), e.apply(x)
    assert yt.dtype == getattr(torch, dtype)
    assert _rel(yt, ye) < TOLERANCE


def test_static_input_scale_bias_and_leading_dims(detected):
    if not _served_here("fp8_tensor"):
        pytest.skip("fp8_tensor is not declared here")
    bias = torch.randn(256, device="cuda")
    t, e = _pair(_layer("fp8_tensor", 256, 512, has_bias=True), detected,
                 input_scale=torch.tensor(0.02, device="cuda"), bias=bias)
    x = torch.randn(2, 3, 512, device="cuda", dtype=torch.bfloat16) * 4   # some values saturate at 448*0.02
    yt, ye = t.apply(x), e.apply(x)
    assert yt.shape == (2, 3, 256)
    assert _rel(yt, ye) < TOLERANCE


def test_block_kernel_with_bias(detected):
    if not _served_here("fp8_block"):
        pytest.skip("fp8_block is not declared here")
    t, e = _pair(_layer("fp8_block", 256, 512, has_bias=True), detected, bias=torch.randn(256, device="cuda"))
    x = torch.randn(7, 512, device="cuda", dtype=torch.bfloat16)
    assert _rel(t.apply(x), e.apply(x)) < TOLERANCE


def test_misaligned_shapes_are_rejected_cleanly_and_served_by_the_next_candidate(detected):
    if not _served_here("fp8_tensor"):
        pytest.skip("fp8_tensor is not declared here")
    from oracle.session import get_registry

    triton_here = "triton.linear.fp8" in get_registry().by_name and (8, 0) <= _capability() < (11, 0)
    expected = "triton" if triton_here else "emulation"
    d = select_backend(_layer("fp8_tensor", 256, 200), detected)
    assert d.backend == expected, d.candidates
    assert any("K divisible by 16" in c.reason for c in d.candidates if c.backend == "torch")
    layer = _layer("fp8_block", 576, 7168, group_size=128)
    d = select_backend(layer, detected)
    assert d.backend == expected, d.candidates
    assert any("multiple of 128" in c.reason for c in d.candidates if c.backend == "torch")
    kernel = d.instantiate(layer)
    w = torch.randn(576, 7168, device="cuda") * 0.05
    kernel.process_weights(**codec_for("fp8_block").quantize(w, "fp8_block"))
    assert torch.isfinite(kernel.apply(torch.randn(3, 7168, device="cuda", dtype=torch.bfloat16))).all()


def test_kernel_bypassing_selection_refuses_unaligned_blocks():
    from oracle.catalog import Mode
    from oracle_torch.linear import TorchBlockFP8Linear

    layer = _layer("fp8_block", 576, 7168)
    k = TorchBlockFP8Linear(layer, Mode(weight="fp8_block", activation="fp8", name="m"), None)
    q = codec_for("fp8_block").quantize(torch.randn(576, 7168, device="cuda"), "fp8_block")
    with pytest.raises(TensorError, match="multiples of 128"):
        k.process_weights(**q)


def test_wrong_device_input_is_named(detected):
    if not _served_here("fp8_tensor"):
        pytest.skip("fp8_tensor is not declared here")
    t, _ = _pair(_layer("fp8_tensor", 256, 512), detected)
    with pytest.raises(TensorError, match="x: expected a tensor on cuda"):
        t.apply(torch.randn(2, 512))


def test_runtime_probe_passes_for_declared_kernels_and_reports_refusals(detected):
    for name in ("torch.linear.fp8_tensor", "torch.linear.fp8_channel", "torch.linear.fp8_block"):
        fmt = name.rsplit(".", 1)[1]
        if _served_here(fmt):
            spec = type("S", (), {"name": name})()
            assert runtime.check(spec, detected) == (True, None), name
    if _capability()[0] != 10:
        ok, detail = runtime.probe_product("mxfp8", 32, 256, 256, torch.device("cuda"))
        assert ok is False and detail                 # refused by the library, reported, no crash
        x = torch.randn(16, 16, device="cuda") @ torch.randn(16, 16, device="cuda")
        assert torch.isfinite(x).all()                # the CUDA context is still healthy
    print("block scale layout:", runtime.block_scale_layout(torch.device("cuda", torch.cuda.current_device())))


# ---- torch's tinygemm INT4 (a peer kernel; the CPU build's numerics are in test_torch_tinygemm.py)

@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "zero-points"])
@pytest.mark.parametrize("n,k,group", [(256, 512, 128), (264, 384, 64), (512, 96, 32), (1024, 2048, 256),
                                       (8192, 8192, 128)])
def test_tinygemm_agrees_with_emulation_and_replays_under_a_graph(n, k, group, symmetric, detected):
    from oracle.catalog import Mode
    from oracle_emulation.linear import EmulationLinear
    from oracle_torch.tinygemm import TorchTinyGemmInt4Linear

    if _capability() < (8, 0) or _capability()[0] >= 12:
        pytest.skip("tinygemm is declared for capability 8.0-10.x")
    layer = LinearLayer(name="int4", in_features=k, out_features=n, weight_format="int4", group_size=group)
    mode = Mode(weight="int4", activation="bf16", name="w4a16_int4")
    w = torch.randn(n, k, device="cuda") * 0.05
    tensors = {a: b for a, b in codec_for("int4").quantize(w, "int4", group_size=group, symmetric=symmetric).items()
               if b is not None}
    t, e = TorchTinyGemmInt4Linear(layer, mode, None), EmulationLinear(layer, mode, None)
    t.process_weights(**tensors)
    e.process_weights(**tensors)
    for m in M_VALUES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        err = _rel(t.apply(x), e.apply(x))
        assert err < TOLERANCE, (n, k, group, m, err)
    x = torch.randn(16, k, device="cuda", dtype=torch.bfloat16)
    eager = t.apply(x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = t.apply(x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)


def test_tinygemm_runtime_probe_and_selection_on_this_device(detected):
    if _capability() < (8, 0) or _capability()[0] >= 12:
        pytest.skip("tinygemm is declared for capability 8.0-10.x")
    spec = type("S", (), {"name": "torch.linear.int4_tinygemm"})()
    assert runtime.check(spec, detected) == (True, None)
    layer = LinearLayer(name="int4", in_features=4096, out_features=4096, weight_format="int4", group_size=128)
    d = select_backend(layer, detected, KernelConfig(linear_backend="torch"))
    assert d.kernel == "torch.linear.int4_tinygemm"


@pytest.mark.parametrize("n,k", [(5120, 2048), (2048, 4096)])    # Qwen3-30B's fused q/k/v and o_proj
def test_block_gemv_agrees_with_cublas_and_replays_under_a_graph(n, k, detected):
    """One row takes the Triton GEMV (oracle_torch.block_gemv; K split in 2 and 4 slices on an H200's
    132 SMs, summed by a second launch; unsplit; the row rounded first, the layer's default, or inside every
    program; the tensor-core variant): same codes and scales as the cuBLASLt blockwise path (the independent
    reference here), exact products, fp32 sums; so they agree to bf16 rounding. The in-launch
    slice sum (arrival counters, back at zero) equals the two-launch one bit for bit (same order);
    captured and replayed in a CUDA graph, the layer gives the eager result."""
    if not _served_here("fp8_block"):
        pytest.skip("fp8_block is not declared here")
    from oracle_torch import block_gemv, gemm, quantize_triton

    t, e = _pair(_layer("fp8_block", n, k, group_size=128), detected)
    for m in (1, 5):                        # one row: the GEMV; five: cuBLASLt
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 3
        pad = torch.nn.functional.pad(x, (0, 0, 0, (-m) % 16))
        xq, sx = quantize_triton.fp8_per_group(pad)
        want = gemm.blockwise(xq, t.w_t, gemm.m_major(sx), t.sw, torch.bfloat16)[:m]
        got = t.apply(x)
        assert _rel(got, want) < 4e-3 and _rel(got, e.apply(x)) < TOLERANCE, m
        if m == 1:
            whole_k = block_gemv.block_gemv(x, t.w_t.t(), t.sw, torch.bfloat16, split=1)
            assert _rel(whole_k, want) < 4e-3
            # the layer's default (PREQUANT: the row rounded by the fused quantizer first) is this call
            pre = block_gemv.block_gemv(x, t.w_t.t(), t.sw, torch.bfloat16, prequant=True)
            assert block_gemv.PREQUANT and torch.equal(pre, got) and _rel(pre, want) < 4e-3
            cnt = block_gemv.counter(n, "cuda")          # the in-launch slice sum: same order, same bits
            assert torch.equal(block_gemv.block_gemv(x, t.w_t.t(), t.sw, torch.bfloat16, counter=cnt,
                                                     prequant=True), pre)
            assert not cnt.any()
            inline = block_gemv.block_gemv(x, t.w_t.t(), t.sw, torch.bfloat16)    # every program rounds its slice
            assert _rel(inline, want) < 4e-3
            assert torch.equal(block_gemv.block_gemv(x, t.w_t.t(), t.sw, torch.bfloat16, counter=cnt), inline)
            assert not cnt.any()
            assert _rel(block_gemv.block_gemv_tc(x, t.w_t.t(), t.sw, torch.bfloat16), want) < 4e-3
        static = x.clone()
        g = torch.cuda.CUDAGraph()
        t.apply(static)
        with torch.cuda.graph(g):
            out = t.forward(static)
        g.replay()
        g.replay()
        assert torch.equal(out, got), m


def test_mla_cache_expansion_is_replayed_from_a_graph_and_equals_the_raw_call(detected):
    """DeepSeek's kv_b_proj (K=512, N=32768) expands the whole static cache every decode step (264 rows
    at batch 1 in bench_decode): narrow enough to be replayed eagerly (EagerGraphs width), equal to the
    raw call on fresh inputs, and the caller's own result outside a decode step."""
    if not _served_here("fp8_block"):
        pytest.skip("fp8_block is not declared here")
    t, e = _pair(_layer("fp8_block", 32768, 512, group_size=128), detected)
    assert t.eager.max_rows >= 264
    xs = [torch.randn(264, 512, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    outs = [t.apply(x) for x in xs]
    assert len(t.eager.graphs) == 1
    for x, y in zip(xs, outs):      # the same launches: equal up to cuBLASLt's choice under capture; a stale
        assert _rel(y, t.forward(x)) < 1e-3    # input or a skipped launch would be off by order 1
    assert _rel(outs[-1], e.apply(xs[-1])) < TOLERANCE
