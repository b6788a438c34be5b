"""The MoE's E2M1 experts on w4_rega's grouped register-A mode (config SWAP 3, oracle_triton.moe_rega): on an sm_90
GPU against oracle-emulation (marked gpu), and on any machine the dispatch: the entry's check, the SWAP 2 fallback
where w4_rega cannot run, and the tuned entry."""
from __future__ import annotations

import pytest
import torch

from helpers import configs_match_reference, dropped_id_then_replay, gpu_moe_pair, moe_pair, routing
from oracle_triton.formats import check_config, layout_for

DEV = "cuda" if torch.cuda.is_available() else "cpu"
#: SWAP 2's entry (the swap-AB word tiles, the fallback) with w4_rega's grouped-mode keys
SWAP2 = {"SWAP": 2, "WORDS": 1, "JOIN": 1, "BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_N1": 32, "BLOCK_K": 128,
         "SPLIT_K": 1, "num_warps": 4, "num_stages": 1}
SWAP3 = dict(SWAP2, SWAP=3, RWARPS=4, RWARPS2=4, XT=2, PF=2, XDB=1)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("fmt,mode,act,h,i,activation,bias,router_on_input", [
    # gpt-oss's form: MXFP4 W4A16, interleaved swigluoai with a limit and biases, K not a multiple of 128 (KMASK)
    ("mxfp4", "w4a16_mx", "bf16", 672, 416, "swigluoai", True, False),
    # NVFP4 W4A16, silu halves, K tiles whole
    ("nvfp4", "w4a16_nvfp4", "bf16", 512, 256, "silu", False, False),
    # NVFP4 W4A4 (inputs rounded through NVFP4 before each GEMM), relu2 with the router weight on the input
    ("nvfp4", "w4a4_nvfp4", "nvfp4", 512, 288, "relu2", True, True),
])
def test_grouped_register_a_path_matches_emulation(fmt, mode, act, h, i, activation, bias, router_on_input,
                                                    monkeypatch):
    """SWAP 3 on an sm_90 GPU: 8 experts, 1, 37 and 96 tokens (a few pairs, uneven blocks, about 48 pairs an
    expert); blocks of 16-128 pairs, 64-, 128- and 256-row programs for FC1 and FC2, chunks of 1-4 K tiles with and
    without double buffering, words one or two tiles ahead, the activations permuted first (XP), NVFP4's byte-table
    decoder with byte and 16-bit scale loads: against oracle-emulation on the CPU (exact weights, fp32 sums, the
    layer dtype between launches: within 1e-2), the same bits on a second call and with and without XP, an
    out-of-range id adding nothing, captured and replayed.
    The swap-AB tiles (SWAP 2) are never called."""
    t, ref = gpu_moe_pair(fmt, mode, act, h, i, activation, bias, router_on_input)
    from oracle_triton.moe_rega import grouped_ok

    if not grouped_ok(t, torch.zeros(1, h, dtype=torch.bfloat16, device="cuda")):
        pytest.skip("SWAP 3 needs an sm_90 GPU (w4_rega: wgmma)")
    real_swap = type(t).apply_swap

    def no_swap2(self, x, topw, ids, m, k, cfg):
        assert cfg["SWAP"] == 3, "SWAP 2 served a SWAP 3 call"
        return real_swap(self, x, topw, ids, m, k, cfg)

    monkeypatch.setattr(type(t), "apply_swap", no_swap2)
    k = 1 if router_on_input else 4
    cpu_ref = lambda xx, ww, ii: ref.apply(xx.cpu(), ww.cpu(), ii.cpu()).to("cuda")      # noqa: E731
    nv = fmt == "nvfp4"
    cfgs = [SWAP3, dict(SWAP3, BLOCK_M=16, RWARPS=8, XT=1, XDB=0, PF=1), dict(SWAP3, BLOCK_M=64, RWARPS2=8, XT=4),
            dict(SWAP3, BLOCK_M=128, XT=1, VEC=1), dict(SWAP3, BLOCK_M=64, RWARPS=16, RWARPS2=8, XT=1),
            dict(SWAP3, BLOCK_M=32, RWARPS=8, XT=2, XP=1), dict(SWAP3, BLOCK_M=64, RWARPS=8, RWARPS2=8, XT=1, XP=1),
            dict(SWAP3, BLOCK_M=16, RWARPS=8, RWARPS2=8, XT=4, XP=1, XDB=0)]
    if nv:
        cfgs += [dict(SWAP3, TABLE=2), dict(SWAP3, BLOCK_M=64, TABLE=1, XDB=0)]
    # the permuted activations' copies (XP) give the same products in the same order as the 4-byte ones
    configs_match_reference(t, cpu_ref, cfgs, h, k, (1, 37, 96), same=lambda c: dict(c, XP=0) if c.get("XP") else None)
    t.config = SWAP3
    dropped_id_then_replay(t, cpu_ref, h, k)


def test_swap3_entry_check():
    """formats.check_config takes SWAP 3 on MXFP4 / NVFP4 experts with w4_rega's keys in range and refuses the rest,
    naming the keys it takes."""
    mx, nv, i4 = layout_for("mxfp4", 5760, 2880), layout_for("nvfp4", 512, 256), layout_for("int4", 512, 256, 128)
    check_config(SWAP3, mx)
    check_config(dict(SWAP3, TABLE=2, BLOCK_M=128, RWARPS=8), nv)
    for bad, lay in ((dict(SWAP3, TABLE=1), mx), (dict(SWAP3, TABLE=0), nv), (dict(SWAP3, BLOCK_M=48), mx),
                     (dict(SWAP3, RWARPS=2), mx), (dict(SWAP3, RWARPS2=32), mx), (dict(SWAP3, XT=9), mx),
                     (dict(SWAP3, PF=0), mx), (dict(SWAP3, XP=2), mx),
                     (dict(SWAP3, WAIT=1), mx), (dict(SWAP3, EARLY=1), mx),
                     ({k: v for k, v in SWAP3.items() if k != "RWARPS"}, mx),
                     (dict(SWAP3, XDB=2), mx), (SWAP3, i4)):
        with pytest.raises(ValueError, match="SWAP 3"):
            check_config(bad, lay)


def test_swap3_falls_back_to_swap2_where_w4_rega_cannot_run(monkeypatch):
    """A SWAP 3 entry on a call w4_rega cannot serve (here: the interpreter, or fp16) runs the same entry as SWAP 2
    (the swap-AB word tiles); where it can, moe_rega.apply_swap_rega. On CPU the fallback's result is SWAP 2's."""
    from oracle_triton import moe_rega

    t, _ = moe_pair("mxfp4", 8, 256, 160, 2, "w4a16_mx", "bf16", {}, activation="swigluoai", bias=True, device=DEV)
    x = torch.randn(4, 256, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(4, 8, 2, DEV)
    seen = []
    monkeypatch.setattr(moe_rega, "apply_swap_rega", lambda *a, **kw: seen.append("swap3") or "swap3")
    t.config = SWAP3
    if not moe_rega.grouped_ok(t, x):
        y = t.forward(x, w, ids)
        t.config = SWAP2
        assert torch.equal(y, t.forward(x, w, ids)) and seen == []
        t.config = SWAP3
    monkeypatch.setattr(moe_rega, "grouped_ok", lambda moe, xx: True)
    assert t.forward(x, w, ids) == "swap3" and seen == ["swap3"]


def test_grouped_ok_needs_what_w4_rega_reads(monkeypatch):
    """moe_rega.grouped_ok: refused off an sm_90 GPU or in the interpreter, for fp16 activations, for INT4 or FP8
    experts, and for MXFP4 experts whose scales the fused decoder does not cover (a byte above 128: a scale above
    2.0, mx_fused_ok, checked at load)."""
    from oracle_triton.moe_rega import grouped_ok, mx_fused_ok

    assert mx_fused_ok(torch.tensor([[0, 127, 128]], dtype=torch.uint8))
    assert not mx_fused_ok(torch.tensor([[0, 129]], dtype=torch.uint8))
    assert not mx_fused_ok(torch.empty(0, dtype=torch.uint8))
    t, _ = moe_pair("mxfp4", 8, 256, 160, 2, "w4a16_mx", "bf16", {}, device=DEV)
    assert t.fused_ok                                   # quantized from N(0, 0.05) weights: scales far below 2
    x = torch.randn(2, 256, dtype=torch.bfloat16, device=DEV)
    on_h100_class = DEV == "cuda" and torch.cuda.get_device_capability() == (9, 0)
    assert grouped_ok(t, x) == on_h100_class
    assert not grouped_ok(t, x.half())
    t._rega_grouped_ok = None
    t.fused_ok = False
    assert not grouped_ok(t, x)
    i4, _ = moe_pair("int4", 8, 256, 128, 2, "w4a16_int4", "bf16", {}, device=DEV)
    assert not grouped_ok(i4, x)


@pytest.mark.parametrize("k", [128, 320, 2880])
def test_permute_rows_puts_each_value_where_w4_rega_copies_it_from(k):
    """moe_rega.permute_rows (XP; Triton's interpreter on CPU): value 64p + 16j + 8h + 2c + e of K tile t holds k =
    128t + 32c + 16h + 8p + 2j + e (w4_rega_kernel's copy order, spelled out here index by index), zeros past K to
    the tile's end; every value of the row appears once."""
    from oracle_triton.moe_rega import permute_rows

    a = torch.randn(3, k, dtype=torch.bfloat16, device=DEV)
    out = permute_rows(a).cpu()
    kp = -(-k // 128) * 128
    assert out.shape == (3, kp)
    expect = torch.zeros(3, kp, dtype=torch.bfloat16)
    for t in range(kp // 128):
        for p in range(2):
            for j in range(4):
                for h in range(2):
                    for c in range(4):
                        for e in range(2):
                            src = 128 * t + 32 * c + 16 * h + 8 * p + 2 * j + e
                            if src < k:
                                expect[:, 128 * t + 64 * p + 16 * j + 8 * h + 2 * c + e] = a[:, src].cpu()
    assert torch.equal(out, expect)
    assert torch.equal(out[:, :kp].float().sort(1).values[:, kp - k:], a.cpu().float().sort(1).values) or k % 128


@pytest.mark.parametrize("model,mode,fmt,n,k,experts,top_k,m", [
    ("gpt-oss-20b", "w4a16_mx", "mxfp4", 5760, 2880, 32, 4, 256),
    ("gpt-oss-20b", "w4a16_mx", "mxfp4", 5760, 2880, 32, 4, 16),
    ("gpt-oss-120b", "w4a16_mx", "mxfp4", 5760, 2880, 128, 4, 256),
    ("qwen3-235b-a22b-nvfp4", "w4a4_nvfp4", "nvfp4", 3072, 4096, 128, 8, 16),
    ("qwen3-235b-a22b-nvfp4", "w4a4_nvfp4", "nvfp4", 3072, 4096, 128, 8, 256),
])
def test_h200_entries_are_swap3_over_the_rules_swap2_tiles(model, mode, fmt, n, k, experts, top_k, m):
    """The H200's tuned entries of the twenty-second pass (R93) name SWAP 3 with XP and no WAIT, pass the table's
    check, and carry the SWAP 2 tiles the shape rule picks at that M (use_swap_words / swap_words_config), so a call
    w4_rega cannot serve runs what it ran before the entry."""
    from oracle_triton.formats import ACT_NONE, ACT_NVFP4, E2M1_MX, E2M1_NV
    from oracle_triton.moe import swap_words_config, use_swap_words
    from oracle_triton.tuned import lookup

    cfg = lookup("NVIDIA H200", "moe", mode, n, k, m, experts)
    assert cfg is not None and cfg["SWAP"] == 3 and cfg["XP"] == 1 and not cfg.get("WAIT"), (model, m, cfg)
    lay = layout_for(fmt, n, k)
    check_config(cfg, lay)
    elem, act = (E2M1_MX, ACT_NONE) if fmt == "mxfp4" else (E2M1_NV, ACT_NVFP4)
    assert use_swap_words(m, top_k, experts, elem, act, True)
    rule = swap_words_config(m * top_k / experts)
    assert {key: cfg[key] for key in rule} == dict(rule, SWAP=3)
    check_config(dict(cfg, SWAP=2), lay)
