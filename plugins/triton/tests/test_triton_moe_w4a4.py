"""The one-row NVFP4 W4A4 MoE path (oracle_triton.moe_w4a4, config key XQ): the byte-table weight decoder
against oracle-emulation's NVFP4 dequantization rounded to BF16 (every code, zero and extreme scales), and
the whole path against oracle-emulation's MoE, in Triton's interpreter on CPU (the decoder's Triton
arithmetic form); on a GPU (marked gpu) the PTX decoder gives the same bits as that form, and the path
matches emulation under CUDA-graph capture and replay."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from helpers import moe_pair, rel, replay_moe, routing
from oracle_triton.moe_w4a4 import _tile

slow = pytest.mark.slow
DEV = "cuda" if torch.cuda.is_available() else "cpu"
E, H, I, K = 8, 256, 160, 2
XQ = {"XQ": 1, "DECODE": 2, "BLOCK_N": 16, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3, "BLOCK_N2": 16,
      "BLOCK_K2": 128, "WARPS2": 4}


def _probe_kernel():
    """moe_w4a4._tile on one tile of words (built for the interpreter on CPU, as conftest builds the package)."""
    @triton.jit
    def probe(u_ptr, s_ptr, x_ptr, g, out_ptr, BN: tl.constexpr, G: tl.constexpr, PTX: tl.constexpr,
              EXACT_BF16: tl.constexpr):
        n = tl.arange(0, BN)
        gg = tl.arange(0, G)
        jw = gg[:, None] * 2 + tl.arange(0, 2)[None, :]
        cell = n[:, None, None] * (G * 2) + jw[None, :, :]
        u = tl.load(u_ptr + cell)
        s = tl.load(s_ptr + n[:, None] * G + gg[None, :])
        x64 = x_ptr.to(tl.pointer_type(tl.int64))
        acc = _tile(tl.zeros([BN, G, 2], dtype=tl.float32), u, s, tl.load(x64 + jw * 2), tl.load(x64 + jw * 2 + 1),
                    g, PTX, EXACT_BF16)
        tl.store(out_ptr + cell, acc)
    return probe


def _probe_inputs(bn: int, g: int, device: str):
    """Weights covering every byte (so every code in both nibbles, both signs), E4M3 scales from 0 through
    subnormals to 448, a global scale, BF16 activations."""
    gen = torch.Generator().manual_seed(7)
    k = g * 16
    codes = torch.arange(bn * k // 2) % 256
    packed = codes[torch.randperm(codes.numel(), generator=gen)].to(torch.uint8).view(bn, k // 2)
    scales = torch.cat([torch.tensor([0, 1, 7, 8, 0x7E, 0x38, 0x3F, 0x40]),
                        torch.randint(0, 0x7F, (bn * g - 8,), generator=gen)]).to(torch.uint8).view(bn, g)
    x = torch.randn(k, generator=gen).to(torch.bfloat16)
    return packed.to(device), scales.to(device), x.to(device)


def _probe_reference(packed, scales, gscale, x):
    """Per 32-bit word (8 values along K), the sum of bf16(emulation's dequantized weight) x activation."""
    from oracle_emulation.formats import nvfp4

    w = nvfp4.dequantize(packed.cpu(), scales.cpu().view(torch.float8_e4m3fn), torch.tensor(gscale))
    prod = w.to(torch.bfloat16).double() * x.cpu().double()[None, :]
    return prod.view(packed.shape[0], -1, 8).sum(-1)


def _probe(packed, scales, gscale, x, ptx: bool):
    bn, g = scales.shape
    out = torch.empty(bn, g * 2, dtype=torch.float32, device=packed.device)
    _probe_kernel()[(1,)](packed.view(torch.int32), scales, x, gscale, out, BN=bn, G=g, PTX=ptx,
                        EXACT_BF16=packed.device.type == "cpu")
    return out


@slow
def test_byte_table_weights_are_the_references_bf16_weights(monkeypatch):
    """Every code and sign, zero / subnormal / largest E4M3 scales: each word's 8 products equal the ones of
    emulation's dequantized weights rounded to BF16 (fp32 sums of 8 exact products: within 1e-6)."""
    if DEV == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    packed, scales, x = _probe_inputs(8, 8, DEV)
    gscale = 3.7e-3
    got = _probe(packed, scales, gscale, x, ptx=False).double().cpu()
    ref = _probe_reference(packed, scales, gscale, x)
    assert torch.allclose(got, ref, rtol=1e-6, atol=1e-6 * float(ref.abs().max()))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_byte_table_ptx_matches_the_arithmetic_form_and_the_reference():
    packed, scales, x = _probe_inputs(16, 16, "cuda")
    gscale = 3.7e-3
    got = _probe(packed, scales, gscale, x, ptx=True)
    assert torch.equal(got, _probe(packed, scales, gscale, x, ptx=False))
    ref = _probe_reference(packed, scales, gscale, x)
    assert torch.allclose(got.double().cpu(), ref, rtol=1e-6, atol=1e-6 * float(ref.abs().max()))


@slow
@pytest.mark.parametrize("activation,router_on_input", [("swigluoai", False), ("relu2", True)])
def test_xq_path_matches_emulation(activation, router_on_input):
    """Gated interleaved with a limit, ungated with the router weight on the input; K tails (I = 160 in
    128- and 256-wide tiles: a partial tile), PAIRS on both; an
    out-of-range id adds nothing. Exact weights and activations: closer than the W4A4 tolerance (8e-2), 1e-2.
    The reference runs on the CPU (on a GPU machine too): cuBLAS's bf16 products differ from fp32-accumulated
    ones in FC1's last bit, which FC2's FP4 rounding can turn into a whole FP4 step (R39, bench/requant_flips.py:
    up to 4.8e-2 between the emulation on the GPU and on the CPU; 0 between this path and the CPU emulation).
    The dropped pair's reference is a pair on an all-zero expert, not a zero router weight: FC2's input scale is
    one per-tensor amax over every pair's FC1 output, and a zero-weight pair's output still enters it (R40 on the
    H200: the seed's dropped pair held that amax there, so a zero-weight reference missed by more than 1e-2)."""
    k = 1 if router_on_input else K
    t, ref = moe_pair("nvfp4", E, H, I, k, "w4a4_nvfp4", "nvfp4", {}, activation=activation, bias=True, device=DEV,
                      router_on_input=router_on_input, ref_device="cpu", zero_expert=True)
    x = torch.randn(2, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(2, E, k, DEV)
    expect = ref.apply(x.cpu(), w.cpu(), ids.cpu())
    for cfg in (XQ, dict(XQ, BLOCK_K2=256, PAIRS=3)):
        t.config = cfg
        assert rel(t.apply(x, w, ids).cpu(), expect) < 1e-2, cfg
    if router_on_input:
        return
    t.config = XQ
    t.check_inputs = False
    bad, on_zero = ids.clone(), ids.clone()
    bad[1, 0], on_zero[1, 0] = E + 1, E          # E: the reference's all-zero expert
    assert rel(t.apply(x, w, bad).cpu(), ref.apply(x.cpu(), w.cpu(), on_zero.cpu())) < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_xq_path_on_gpu_graph_replay():
    """A Qwen3-235B-like expert (H 1024, I 384, top 8 of 32) at M = 1: the PTX decoder's output equals the
    arithmetic form's, matches emulation, and a captured call replays with new inputs."""
    t, ref = moe_pair("nvfp4", 32, 1024, 384, 8, "w4a4_nvfp4", "nvfp4", {}, bias=False, device="cuda")
    t.config = dict(XQ, BLOCK_N=8, BLOCK_K=256, BLOCK_N2=8, BLOCK_K2=256, PAIRS=3)
    x = torch.randn(1, 1024, dtype=torch.bfloat16, device="cuda")
    w, ids = routing(1, 32, 8, "cuda")
    y = t.apply(x, w, ids)
    assert torch.equal(y, t.apply_w4a4_rows(x, w.reshape(-1).float(), ids.reshape(-1), 1, 8, t.config, ptx=False))
    assert rel(y, ref.apply(x, w, ids)) < 1e-2
    t.check_inputs = False
    replay_moe(t.apply, ref.apply, x, w, ids, 32, 1e-2, times=2)


def test_xq_dispatch_and_tuned_entry(monkeypatch):
    """The H200's tuned entry for Qwen3-235B NVFP4 W4A4 at one token is an XQ config, and an XQ config sends
    a W4A4 call to TritonMoE.apply_w4a4_rows, with the PTX decoder only on a compiled GPU run."""
    from oracle_triton.tuned import lookup

    cfg = lookup("NVIDIA H200", "moe", "w4a4_nvfp4", 3072, 4096, 1, 128)
    assert cfg is not None and cfg["XQ"] == 1 and "DECODE" in cfg
    t, _ = moe_pair("nvfp4", E, H, I, K, "w4a4_nvfp4", "nvfp4", {}, device=DEV)
    seen = []
    monkeypatch.setattr(type(t), "apply_w4a4_rows", lambda self, *a, **kw: seen.append(a[-1]) or "xq")
    x = torch.randn(1, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(1, E, K, DEV)
    t.config = XQ
    assert t.forward(x, w, ids) == "xq" and seen == [DEV == "cuda"]
