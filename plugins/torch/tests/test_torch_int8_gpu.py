"""torch.linear.int8 (oracle_torch.int8, W8A8 on CUDA through torch._int_mm) on a real GPU.

- The activation codes and scales of its one-launch quantizer are those of oracle-emulation's int8
  rule (activations.int8_qdq, dequantized values compared bit for bit) and of the eager reference
  (oracle_torch.cpu_int.quantize_per_token), ties and all-zero rows included.
- Its output is compared with float64 products of the same int8 operands: the int32 sum is exact,
  the epilogue rounds once to bf16 (2**-9 relative per value), bound 4e-3. Against oracle-emulation
  (which rounds dequantized activations and weights to bf16 before multiplying) bound 1e-2, as for
  the CPU kernel (test_torch_cpu_int.py). A wrong layout or scale axis gives errors of order 1.
- The Triton epilogue gives exactly the eager torch epilogue's values on the same int32 products.
- Few rows (M <= 16, padded to 32 for cuBLASLt) and many; a bias; capture and replay in a CUDA graph.
- Selection on this device, the runtime probe, and misaligned N refused at selection and at load.
Skips cleanly without a CUDA device (marked `gpu`).
"""
from __future__ import annotations

import pytest
import torch

from oracle import LinearLayer, Platform, select_backend
from oracle.catalog import Mode
from oracle.errors import TensorError

pytestmark = pytest.mark.gpu
W8A8 = Mode(weight="int8", activation="int8", name="w8a8_int8")
M_VALUES = [1, 5, 16, 17, 33, 256]


@pytest.fixture(scope="module")
def detected():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    cap = torch.cuda.get_device_capability()
    if cap < (8, 0) or cap[0] >= 12:
        pytest.skip("torch.linear.int8 is declared for capability 8.0-10.x")
    return Platform.detect()


def _layer(n, k, dtype="bfloat16"):
    return LinearLayer(name=f"int8-{n}x{k}", in_features=k, out_features=n, weight_format="int8",
                       activation_format="int8", dtype=dtype)


def _tensors(n, k, bias=False):
    from oracle_emulation.formats import codec_for

    t = codec_for("int8").quantize(torch.randn(n, k, device="cuda") * 0.05, "int8")
    t = {a: b for a, b in t.items() if b is not None}
    if bias:
        t["bias"] = torch.randn(n, device="cuda").to(torch.bfloat16)
    return t


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def _pair(n, k, bias=False):
    from oracle_emulation.linear import EmulationLinear
    from oracle_torch.int8 import TorchInt8Linear

    layer, t = _layer(n, k), _tensors(n, k, bias)
    fast, ref = TorchInt8Linear(layer, W8A8, None), EmulationLinear(layer, W8A8, None)
    fast.process_weights(**t)
    ref.process_weights(**t)
    return fast, ref, t


def test_one_launch_quantizer_gives_the_emulation_codes(detected):
    from oracle_emulation.activations import int8_qdq
    from oracle_torch import int8_triton
    from oracle_torch.cpu_int import quantize_per_token

    for m, k in [(1, 4096), (16, 896), (33, 4864), (300, 2048)]:
        x = (torch.randn(m, k, device="cuda") * 4).to(torch.bfloat16)
        x[0, :6] = torch.tensor([127.0, 63.5, -63.5, 0.5, 1.5, 2.5])       # amax 127: exact halves, ties
        if m > 1:
            x[1] = 0
        q, s = int8_triton.int8_per_token(x, max(m, 32))
        rq, rs = quantize_per_token(x)
        assert torch.equal(q[:m], rq) and torch.equal(s[:m], rs)
        assert bool((q[m:] == 0).all()) and bool((s[m:] == 1).all())
        assert torch.equal((q[:m].float() * s[:m]).to(torch.bfloat16), int8_qdq(x))
        cq, cs = quantize_per_token(x.cpu())                                 # the CPU kernel's codes too
        assert torch.equal(q[:m].cpu(), cq) and torch.equal(s[:m].cpu(), cs)


@pytest.mark.parametrize("n,k", [(256, 512), (4096, 4096), (4864, 896), (896, 4864), (264, 136)])
def test_agrees_with_float64_and_emulation(n, k, detected):
    from oracle_torch.cpu_int import quantize_per_token

    fast, ref, t = _pair(n, k)
    w = t["weight"].double() * t["weight_scale"].double().reshape(n, 1)
    for m in M_VALUES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        y = fast.apply(x)
        assert y.dtype == torch.bfloat16 and y.shape == (m, n)
        xq, xs = quantize_per_token(x)
        exact = (xq.double() * xs.double()) @ w.t()
        assert _rel(y, exact) < 4e-3, (n, k, m)
        assert _rel(y, ref.apply(x)) < 1e-2, (n, k, m)


def test_triton_epilogue_equals_the_eager_one_with_bias_and_other_dtypes(detected):
    from oracle_torch import int8, int8_triton

    n, k = 512, 1024
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        _, _, t = _pair(n, k, bias=True)
        x = torch.randn(40, k, device="cuda", dtype=dtype)
        q, s = int8_triton.int8_per_token(x, 40)
        acc = torch._int_mm(q, t["weight"].t())
        sw = t["weight_scale"].float().reshape(n)
        b = t["bias"].to(dtype)
        fused = int8_triton.scale_epilogue(acc, s, sw, b, 40, dtype)
        eager = (acc.float() * s * sw[None, :]).to(dtype) + b
        assert torch.equal(fused, eager), dtype
        assert int8._fused() is not None                                      # Triton did not fall back


def test_bias_and_leading_dimensions(detected):
    fast, ref, _ = _pair(256, 512, bias=True)
    x = torch.randn(2, 3, 512, device="cuda", dtype=torch.bfloat16)
    y = fast.apply(x)
    assert y.shape == (2, 3, 256)
    assert _rel(y, ref.apply(x)) < 1e-2


@pytest.mark.parametrize("m", [1, 16, 64])
def test_capture_and_replay_in_a_cuda_graph(m, detected):
    fast, _, _ = _pair(1024, 2048, bias=True)
    x = torch.randn(m, 2048, device="cuda", dtype=torch.bfloat16)
    eager = fast.forward(x).clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fast.apply(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fast.apply(x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)
    x.copy_(torch.randn_like(x))                                             # new data, same buffers
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, fast.forward(x))


def test_selected_here_probed_and_misaligned_refused(detected):
    from oracle_torch import runtime
    from oracle_torch.int8 import TorchInt8Linear

    spec = type("S", (), {"name": "torch.linear.int8"})()
    assert runtime.check(spec, detected) == (True, None)
    d = select_backend(_layer(4096, 4096), detected)
    assert d.kernel == "torch.linear.int8", [(c.kernel, c.reason) for c in d.candidates]
    d = select_backend(_layer(4100, 4096), detected)
    assert d.kernel != "torch.linear.int8"
    assert any("N divisible by 8" in (c.reason or "") for c in d.candidates if c.kernel == "torch.linear.int8")
    k = TorchInt8Linear(_layer(12, 64), W8A8, None)
    with pytest.raises(TensorError, match="multiples of 8"):
        k.process_weights(**_tensors(12, 64))
    cpu = TorchInt8Linear(_layer(64, 64), W8A8, None)
    with pytest.raises(TensorError):
        cpu.process_weights(**{a: b.cpu() for a, b in _tensors(64, 64).items()})
