"""GPU tests. Without CUDA they skip with the reason.

* On a CUDA device that is not SM120/SM121 (the lent H200, say): every b12x kernel is
  rejected with the device reason and the same layer runs on the next candidate, whose
  CUDA output must equal the emulation reference computed on the CPU.
* On an SM120/SM121 device with b12x installed (marked sm12x): the b12x kernels run and
  must match the emulation reference within the format's rounding.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="no CUDA device: GPU tests need one")]

from oracle import EmbeddingLayer, KernelConfig, LinearLayer, MoELayer, Platform, select_backend  # noqa: E402

CAPABILITY_REASON = "B12X kernels require a Blackwell 12x device (SM120/SM121)"


def _is_sm12x() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 12


def _codec(fmt):
    from oracle_emulation.formats import codec_for
    return codec_for(fmt)


def _linear_case(fmt, act, k=512, n=256, seed=0, dtype="bfloat16"):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 0.05
    tensors = dict(_codec(fmt).quantize(w, fmt))
    if fmt == "fp8_tensor":
        tensors["input_scale"] = torch.tensor(4.0 / 448.0)
    if fmt == "nvfp4" and act == "nvfp4":
        tensors["input_global_scale"] = torch.tensor(4.0 / (448.0 * 6.0))
    layer = LinearLayer(name=f"{fmt}.{act or 'a16'}", in_features=k, out_features=n, weight_format=fmt,
                        activation_format=act, dtype=dtype,
                        activation_scale="static_tensor" if fmt == "fp8_tensor" else None)
    x = torch.randn(7, k, generator=g).to(getattr(torch, dtype))
    return layer, tensors, x


LINEAR_CASES = [("nvfp4", "nvfp4"), ("nvfp4", None), ("mxfp8", "mxfp8"), ("fp8_block", None),
                ("fp8_tensor", "fp8"), ("q8_0", None), ("iq2_xs", None), ("mxfp4", "mxfp4")]
#: fp16 layers served through b12x's fixed-contract entry points (packed MXFP8, serialized NVFP4 W4A4).
FP16_CASES = [("nvfp4", "nvfp4"), ("mxfp8", "mxfp8")]


def _to(tensors, device):
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in tensors.items()}


def _rel_err(a, b):
    a, b = a.float().cpu(), b.float().cpu()
    return float((a - b).norm() / b.norm().clamp(min=1e-12))


def _record(name, **figures):
    out = os.environ.get("ORACLE_B12X_GPU_REPORT")
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(name + " " + " ".join(f"{k}={v}" for k, v in figures.items()) + "\n")


@pytest.mark.skipif(_is_sm12x(), reason="an SM12x device serves these layers with b12x itself")
@pytest.mark.parametrize("fmt, act", LINEAR_CASES)
def test_b12x_rejected_on_this_device_and_next_candidate_matches_reference(fmt, act, tmp_path):
    pytest.importorskip("oracle_emulation", reason="the emulation plugin (the next candidate) is not installed")
    from oracle.session import load_policy
    layer, tensors, x = _linear_case(fmt, act)
    platform = Platform.detect()
    assert not platform.simulated and platform.vendor == "nvidia"
    # b12x requested first, so it is tried whatever the optimized tier holds; on_unsupported: fallback
    # then hands the layer to automatic selection (torch's optimized kernel, else emulation)
    fallback = tmp_path / "fallback.yaml"
    fallback.write_text("on_unsupported: fallback\n")
    d = select_backend(layer, platform, KernelConfig(linear_backend="b12x"), policy=load_policy([fallback]))
    b12x = [c for c in d.candidates if c.backend == "b12x"]
    assert b12x and all(c.verdict == "rejected" and c.stage == "platform" for c in b12x)
    assert b12x[0].reason == CAPABILITY_REASON
    assert d.status == "selected" and d.backend != "b12x"
    kernel = d.instantiate(layer)
    kernel.process_weights(**_to(tensors, "cuda"))
    out = kernel.apply(x.cuda())
    reference = select_backend(layer, Platform.preset("cpu")).instantiate(layer)   # emulation, on the CPU
    reference.process_weights(**tensors)
    expected = reference.apply(x)
    err = _rel_err(out, expected)
    _record(f"linear {fmt}/{act}", device=platform.device_name.replace(" ", "_"), b12x_reason=repr(b12x[0].reason),
            served_by=d.kernel, mode=d.mode, rel_err=f"{err:.2e}")
    assert out.device.type == "cuda" and out.shape == expected.shape
    assert err < 1e-2, err


@pytest.mark.skipif(_is_sm12x(), reason="an SM12x device serves these layers with b12x itself")
def test_b12x_moe_and_embedding_rejected_on_this_device_with_the_device_reason():
    pytest.importorskip("oracle_emulation", reason="the emulation plugin (the next candidate) is not installed")
    platform = Platform.detect()
    moe = MoELayer(name="experts", num_experts=8, top_k=2, hidden_size=256, intermediate_size=128,
                   weight_format="nvfp4")
    explicit = select_backend(moe, platform, KernelConfig(moe_backend="b12x"))
    assert [c.reason for c in explicit.candidates if c.backend == "b12x"][0] == CAPABILITY_REASON
    auto = select_backend(moe, platform)
    assert auto.status == "selected" and auto.backend != "b12x"
    emb = EmbeddingLayer(name="embed_tokens", num_embeddings=1000, embedding_dim=256, weight_format="q8_0")
    d = select_backend(emb, platform)
    assert [c.reason for c in d.candidates if c.backend == "b12x"][0] == CAPABILITY_REASON
    assert d.status == "selected" and d.backend != "b12x"
    table = torch.randn(1000, 256) * 0.1
    tensors = _codec("q8_0").quantize(table, "q8_0")
    kernel = d.instantiate(emb)
    kernel.process_weights(weight=tensors["weight"].cuda())
    ids = torch.tensor([[0, 5, 999], [7, 7, 1]])
    reference = select_backend(emb, Platform.preset("cpu")).instantiate(emb)
    reference.process_weights(weight=tensors["weight"])
    assert torch.equal(kernel.apply(ids.cuda()).cpu(), reference.apply(ids))
    _record("moe+embedding", explicit_status=explicit.status, auto_served_by=auto.kernel, embedding_served_by=d.kernel)


# ---- SM120/SM121 with b12x installed ----------------------------------------------------
@pytest.mark.sm12x
@pytest.mark.skipif(not _is_sm12x(), reason="needs an SM120/SM121 device for the b12x kernels")
@pytest.mark.parametrize("fmt, act, dtype", [(*c, "bfloat16") for c in LINEAR_CASES]
                         + [(*c, "float16") for c in FP16_CASES])
def test_b12x_linear_matches_emulation_on_sm12x(fmt, act, dtype):
    pytest.importorskip("b12x", reason="b12x is not installed")
    from oracle.warmup import plan_warmup, run_warmup

    layer, tensors, x = _linear_case(fmt, act, dtype=dtype)
    d = select_backend(layer, Platform.detect(), KernelConfig(linear_backend="b12x"))
    if d.status != "selected":
        pytest.skip(f"b12x cannot serve {fmt}/{act} here: {d.candidates[-1].reason}")
    kernel = d.instantiate(layer)
    kernel.process_weights(**_to(tensors, "cuda"))
    run_warmup(plan_warmup([kernel], [1, 7, 8]))
    out = kernel.apply(x.cuda())
    reference = select_backend(layer, Platform.preset("cpu")).instantiate(layer)
    reference.process_weights(**tensors)
    assert _rel_err(out, reference.apply(x)) < 5e-2   # b12x may round activations differently at ties


@pytest.mark.sm12x
@pytest.mark.skipif(not _is_sm12x(), reason="needs an SM120/SM121 device for the b12x kernels")
def test_b12x_reload_keeps_packed_storage_on_sm12x():
    pytest.importorskip("b12x", reason="b12x is not installed")
    layer, tensors, _ = _linear_case("mxfp8", "mxfp8")
    d = select_backend(layer, Platform.detect(), KernelConfig(linear_backend="b12x"))
    kernel = d.instantiate(layer)
    kernel.process_weights(**_to(tensors, "cuda"))
    first = kernel.packed
    kernel.process_weights(**_to(tensors, "cuda"))
    assert kernel.packed is first
