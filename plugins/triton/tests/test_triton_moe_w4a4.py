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
#: XQ 2: the register-A kernels (w4_rega's MoE mode), FC1 on 128-row tiles split 2 ways over K, FC2 on 64-row tiles;
#: the XQ keys serve the calls w4_rega cannot (CPU, fp16).
XQ2 = dict(XQ, XQ=2, RWARPS=8, RSPLIT=2, RWARPS2=4, RSPLIT2=1, XT=4, PF=2, TABLE=2)


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
    """The H200's tuned entry for Qwen3-235B NVFP4 W4A4 at one token is an XQ 2 config (w4_rega's MoE mode, R84)
    that carries XQ 1's keys for the calls it cannot serve, and an XQ 1 config sends a W4A4 call to
    TritonMoE.apply_w4a4_rows, with the PTX decoder only on a compiled GPU run."""
    from oracle_triton.tuned import lookup

    cfg = lookup("NVIDIA H200", "moe", "w4a4_nvfp4", 3072, 4096, 1, 128)
    assert cfg is not None and cfg["XQ"] == 2 and {"DECODE", "BLOCK_N", "RWARPS", "RSPLIT", "TABLE"} <= set(cfg)
    t, _ = moe_pair("nvfp4", E, H, I, K, "w4a4_nvfp4", "nvfp4", {}, device=DEV)
    seen = []
    monkeypatch.setattr(type(t), "apply_w4a4_rows", lambda self, *a, **kw: seen.append(a[-1]) or "xq")
    x = torch.randn(1, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(1, E, K, DEV)
    t.config = XQ
    assert t.forward(x, w, ids) == "xq" and seen == [DEV == "cuda"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("activation,router_on_input,bias", [("silu", False, False), ("swigluoai", False, True),
                                                             ("relu2", True, True)])
def test_xq2_register_a_path_matches_emulation(activation, router_on_input, bias, monkeypatch):
    """XQ 2 (w4_rega's MoE mode for FC1 and FC2, the activation launch and FC2's input rounding between them, the
    top-k sum) on an sm_90 GPU: H 1024, I 384 (3 K tiles of FC2), 32 experts; one and three tokens; gated
    (halves, silu; interleaved swigluoai with a limit and biases) and ungated (relu2, the router weight on the
    input); 128- and 64-row tiles, K split 1-4 ways, words one or two tiles ahead, the byte-table decoder with
    byte and 16-bit scale loads, the activations' chunks of 2-8 K tiles double-buffered (XDB; chunks past a split's
    end, a split of 3 over 3 / 8 K tiles): against oracle-emulation on the CPU (exact weights and fp32 sums: within 1e-2,
    as XQ 1), the same bits on a second call, an out-of-range id adding nothing, and captured and replayed.
    XQ 1's kernels are never called (XQ 2 serves every one of these calls)."""
    k = 1 if router_on_input else 8
    t, ref = moe_pair("nvfp4", 32, 1024, 384, k, "w4a4_nvfp4", "nvfp4", {}, activation=activation, bias=bias,
                      device="cuda", router_on_input=router_on_input, ref_device="cpu", zero_expert=True)
    x = torch.randn(1, 1024, dtype=torch.bfloat16, device="cuda")
    if not t.w4a4_rega_ok(x):
        pytest.skip("XQ 2 needs an sm_90 GPU (w4_rega: wgmma)")
    monkeypatch.setattr(type(t), "apply_w4a4_rows", lambda *a, **kw: pytest.fail("XQ 1 served an XQ 2 call"))
    cpu_ref = lambda xx, ww, ii: ref.apply(xx.cpu(), ww.cpu(), ii.cpu()).to("cuda")      # noqa: E731
    for m in (1, 3):
        x = torch.randn(m, 1024, dtype=torch.bfloat16, device="cuda")
        w, ids = routing(m, 32, k, "cuda")
        expect = cpu_ref(x, w, ids)
        for cfg in (XQ2, dict(XQ2, RWARPS=4, RSPLIT=1, RWARPS2=8, RSPLIT2=3, PF=1), dict(XQ2, TABLE=1, RSPLIT=4),
                    dict(XQ2, XDB=1, XT=2, RSPLIT=3), dict(XQ2, XDB=1, XT=8, RWARPS=4, RSPLIT=1)):
            t.config = cfg
            y = t.apply(x, w, ids)
            assert rel(y, expect) < 1e-2, (m, cfg)
            assert torch.equal(y, t.apply(x, w, ids)), (m, cfg)
    t.config = XQ2
    t.check_inputs = False
    if k > 1:
        bad, on_zero = ids.clone(), ids.clone()
        bad[1, 0], on_zero[1, 0] = 33, 32          # 32: the reference's all-zero expert
        assert rel(t.apply(x, w, bad), cpu_ref(x, w, on_zero)) < 1e-2
    x1 = torch.randn(1, 1024, dtype=torch.bfloat16, device="cuda")
    w1, ids1 = routing(1, 32, k, "cuda")
    replay_moe(t.apply, cpu_ref, x1, w1, ids1, 32, 1e-2, times=2)


def test_xq2_falls_back_to_xq1_where_the_register_a_kernels_cannot_run(monkeypatch):
    """An XQ 2 config on a call w4_rega cannot serve (here: no sm_90 GPU, or the interpreter) runs XQ 1's kernels
    with the same entry's XQ keys; on an sm_90 GPU it takes apply_w4a4_rega."""
    t, _ = moe_pair("nvfp4", E, H, I, K, "w4a4_nvfp4", "nvfp4", {}, device=DEV)
    x = torch.randn(1, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(1, E, K, DEV)
    seen = []
    monkeypatch.setattr(type(t), "apply_w4a4_rows", lambda self, *a, **kw: seen.append("xq1") or "xq1")
    monkeypatch.setattr(type(t), "apply_w4a4_rega", lambda self, *a, **kw: seen.append("xq2") or "xq2")
    t.config = XQ2
    want = "xq2" if t.w4a4_rega_ok(x) else "xq1"
    assert t.forward(x, w, ids) == want and seen == [want]
    monkeypatch.setattr(type(t), "w4a4_rega_ok", lambda self, xx: False)
    assert t.forward(x, w, ids) == "xq1"


@pytest.mark.parametrize("activation", ["silu", "swigluoai", "relu2"])
def test_act_kernel_and_rounding_match_emulations_activation_and_nvfp4_rounding(activation):
    """XQ 2's launches between FC1 and FC2 (the interpreter on CPU): moe_w4a4.w4a4_act_kernel takes FC1's rounded
    outputs [pairs, N_W] (gate / up halves, interleaved, or ungated) to the activation rounded to bf16, zero rows
    for out-of-range ids (5 and -1 of E = 4), over several programs; nvfp4_round_kernel then rounds that through
    NVFP4 with one dynamic per-tensor scale. Against oracle-emulation's apply_activation and nvfp4_qdq (an
    independent form): the activation within exp's last bit, the per-tensor scale, and the values within one FP4
    step where that bit differs."""
    from oracle.formats import INTERLEAVED_ACTIVATIONS
    from oracle_emulation.activations import nvfp4_qdq
    from oracle_emulation.moe_activations import apply_activation
    from oracle_triton.moe_kernels import ACTIVATION_CODES
    from oracle_triton.moe_w4a4 import ROUND_BLOCK, ROUND_WARPS, nvfp4_round_kernel, w4a4_act_kernel

    gen = torch.Generator().manual_seed(3)
    pairs, inter, e = 6, 160, 4
    gated = activation != "relu2"
    y = (torch.randn(pairs, 2 * inter if gated else inter, generator=gen) * 3).to(torch.bfloat16)
    ids = torch.tensor([0, 3, 5, 1, -1, 2], dtype=torch.int32)
    params = {"limit": 7.0, "alpha": 1.702, "beta": 1.0} if activation == "swigluoai" else {"limit": None}
    want = apply_activation(y, activation, params).to(torch.bfloat16)
    want[(ids < 0) | (ids >= e)] = 0
    before = want.clone()
    want_scale = want.float().abs().amax() / 2688.0
    want = nvfp4_qdq(want)
    act = torch.empty(pairs, inter, dtype=torch.bfloat16, device=DEV)
    w4a4_act_kernel[(-(-pairs * inter // 256),)](y.to(DEV), ids.to(DEV), act, pairs * inter, e, inter, y.shape[1],
                                                 float(params.get("limit") or 0.0), 1.702, 1.0, 1.0,
                                                 ACTFN=ACTIVATION_CODES[activation], GATED=gated,
                                                 INTERLEAVED=activation in INTERLEAVED_ACTIVATIONS,
                                                 HAS_LIMIT=params.get("limit") is not None, BLOCK=256, EXACT_BF16=True,
                                                 num_warps=4)
    assert (act.cpu() == before).float().mean() > 0.98 and rel(act.cpu().float(), before.float()) < 1e-2
    assert not act.cpu()[[2, 4]].any()
    out = torch.empty(pairs, inter, dtype=torch.bfloat16, device=DEV)
    xs = torch.empty(1, dtype=torch.float32, device=DEV)
    nvfp4_round_kernel[(1,)](act, out, xs, act.numel(), BLOCK=ROUND_BLOCK, EXACT_BF16=True, num_warps=ROUND_WARPS)
    assert xs.item() == pytest.approx(want_scale.item(), rel=1e-2)
    assert rel(out.cpu().float(), want.float()) < 1e-2
    assert (out.cpu() == want).float().mean() > 0.98


def test_xq2_keys_in_check_direct_config():
    """check_direct_config takes XQ 2's register-A keys (the GPU test's configs) and refuses what w4_rega's MoE mode
    does not cover: rows a program other than 64 / 128, a split of 0 or 17, nine activation tiles a chunk, PF 0
    (every K tile up front: the pairs' K would have to fit it exactly), the fused (inexact) decoder, XQ 3, an XQ 2
    entry without its keys and XDB 2; the tuned-table loader knows the keys."""
    from oracle_triton.formats import check_direct_config, layout_for
    from oracle_triton.tuned import MOE_KEYS

    lay = layout_for("nvfp4", 3072, 4096)
    for cfg in (XQ, XQ2, dict(XQ2, RWARPS=4, RSPLIT=1, RWARPS2=8, RSPLIT2=3, PF=1), dict(XQ2, TABLE=1, RSPLIT=4),
                dict(XQ2, XDB=1, XT=8)):
        check_direct_config(cfg, lay)
    for bad in ({"RWARPS": 2}, {"RWARPS2": 16}, {"RSPLIT": 0}, {"RSPLIT2": 17}, {"XT": 9}, {"PF": 0}, {"TABLE": 0},
                {"XQ": 3}, {"RWARPS": None}, {"XDB": 2}):
        cfg = {k: v for k, v in {**XQ2, **bad}.items() if v is not None}
        with pytest.raises(ValueError, match="XQ"):
            check_direct_config(cfg, lay)
    assert {"RWARPS", "RSPLIT", "RWARPS2", "RSPLIT2", "TABLE", "XDB"} <= MOE_KEYS
