"""The decode path's up kernel with gate and up in one K loop and K split over programs
(moe_gemv.moe_up_split_kernel, selected by SPLIT_K in the direct path's config) and the down
kernel's own tile (BLOCK_N2 / BLOCK_K2 / WARPS2): against oracle-emulation's MoE in Triton's
interpreter on CPU (compiled on a GPU machine), uneven K splits, ungated activations, the router
weight on the input, out-of-range ids dropped; and the tensor-core direct path (moe_gemm_kernel
DIRECT, W8A8 activations rounded inside the GEMM: QUANT_IN). On a GPU (marked gpu): both paths
at a model-like shape for every format family, and under CUDA-graph capture and replay.
Tolerances as test_triton_moe."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from helpers import moe_pair, rel, replay_moe, routing
from oracle_triton import gemv as _gemv

slow = pytest.mark.slow   # the kernels run in Triton's CPU interpreter (seconds each)

DEV = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {"bf16": 1e-2, "fp8": 5e-2, "nvfp4": 8e-2}
E, H, I, K = 8, 256, 384, 2


def _cfg(t, **kw):
    from oracle_triton.moe import moe_gemv_config

    lay = t.w13.layout
    words = t.facts["hw_fp8"] and t.act == 0
    return {**moe_gemv_config(1, lay.elem, lay.group, words=words), **kw}


def _direct(t, x, w, ids, cfg):
    return t.apply_direct(x, w.reshape(-1).float(), ids.reshape(-1), x.shape[0], ids.shape[1], cfg)


FAMILIES = [
    ("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}),
    ("fp8_channel", "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"}),
    ("fp8_tensor", "w8a8_fp8_tensor", "fp8", {"activation_granularity": "tensor"}),
    ("fp8_block", "w8a16_block", "bf16", {}),
    ("mxfp4", "w4a16_mx", "bf16", {}),
    ("nvfp4", "w4a4_nvfp4", "nvfp4", {}),
    ("int4", "w4a16_int4", "bf16", {}),
]
MMA = {"DIRECT": 1, "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3, "FULL_TILE": 1}
MMA_Q = dict(MMA, QUANT_IN=3)       # W8A8 codes rounded inside both GEMMs, per K tile
MMA_SUM = dict(MMA, FUSE_SUM=1)     # the top-k sum inside the FC2 GEMM
#: two launches: FC1's input rounded inside the FC1 GEMM, FC2's input written as codes by FC1's epilogue
MMA_FUSED = dict(MMA_SUM, BLOCK_N1=128, QUANT_IN=1, QUANT_OUT=1)
#: W4A16: the weight rows as the tensor-core tile's tall side, the pair's row padded to 16 columns
SWAP = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3}


@slow
@pytest.mark.parametrize("fmt,mode,act,params", [
    ("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}),
    ("fp8_channel", "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"}),
    ("mxfp4", "w4a16_mx", "bf16", {}),
    ("nvfp4", "w4a4_nvfp4", "nvfp4", {}),
])
def test_split_up_kernel_matches_emulation(fmt, mode, act, params):
    """SPLIT_K 1 and 3 over K = 256 in 128-wide tiles: the third slice is empty (t0 >= t1)."""
    t, ref = moe_pair(fmt, E, H, I, K, mode, act, params, bias=True, device=DEV)
    x = torch.randn(2, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(2, E, K, DEV)
    expect = ref.apply(x, w, ids)
    for split in (1, 3):
        y = _direct(t, x, w, ids, _cfg(t, BLOCK_N=32, BLOCK_K=128, SPLIT_K=split, BLOCK_N2=16, BLOCK_K2=128))
        assert y.shape == (2, H) and y.dtype == torch.bfloat16
        assert rel(y, expect) < TOL[act], (fmt, split)


@slow
@pytest.mark.parametrize("fmt,mode,act,params", [("mxfp4", "w4a16_mx", "bf16", {}),
                                                 ("nvfp4", "w4a4_nvfp4", "nvfp4", {}),
                                                 ("fp8_block", "w8a16_block", "bf16", {})])
def test_split_up_kernel_pairs_loop_gives_the_same_bits(fmt, mode, act, params):
    """PAIRS 3 (the K loops of FC1's gate_up_products and FC2's gemv.row_products two tiles per iteration,
    buffers alternating) gives the one-tile loops' bits: SPLIT_K 1 (two K tiles) and 3 (one tile per
    slice, so the pair's second tile lies past the slice and is masked off; the third slice is empty);
    FC2's K (384) is three 128-wide tiles."""
    t, ref = moe_pair(fmt, E, H, I, K, mode, act, params, bias=True, device=DEV)
    x = torch.randn(2, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(2, E, K, DEV)
    for split in (1, 3):
        cfg = _cfg(t, BLOCK_N=32, BLOCK_K=128, SPLIT_K=split, BLOCK_N2=16, BLOCK_K2=128)
        y = _direct(t, x, w, ids, dict(cfg, PAIRS=3))
        assert torch.equal(y, _direct(t, x, w, ids, cfg)), (fmt, split)
        assert rel(y, ref.apply(x, w, ids)) < TOL[act], (fmt, split)


@slow
def test_split_up_kernel_asymmetric_int4():
    t, ref = moe_pair("int4", E, H, I, K, "w4a16_int4", "bf16", bias=True, device=DEV, group=128, symmetric=False)
    x = torch.randn(1, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(1, E, K, DEV)
    y = _direct(t, x, w, ids, _cfg(t, BLOCK_N=16, BLOCK_K=128, SPLIT_K=2))
    assert rel(y, ref.apply(x, w, ids)) < TOL["bf16"]


@slow
@pytest.mark.parametrize("activation", ["relu2", "swigluoai"])
def test_split_up_kernel_ungated_interleaved_and_weight_on_input(activation):
    t, ref = moe_pair("mxfp4", E, H, I, 1, "w4a16_mx", "bf16", activation=activation, bias=True,
                      router_on_input=True, device=DEV)
    x = torch.randn(2, H, dtype=torch.bfloat16, device=DEV) * 4
    w, ids = routing(2, E, 1, DEV)
    y = _direct(t, x, w, ids, _cfg(t, BLOCK_N=16, BLOCK_K=64, SPLIT_K=2))
    assert rel(y, ref.apply(x, w, ids)) < TOL["bf16"]


@slow
@pytest.mark.parametrize("fmt,mode,act,params", FAMILIES)
def test_tensor_core_direct_path_matches_emulation(fmt, mode, act, params):
    """One pair per program, no alignment launches; W8A8 codes rounded inside the GEMM."""
    t, ref = moe_pair(fmt, E, H, I, K, mode, act, params, bias=True, device=DEV, group=128, symmetric=False)
    x = torch.randn(2, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(2, E, K, DEV)
    expect = ref.apply(x, w, ids)
    outs = []
    for cfg in (MMA, MMA_SUM, MMA_Q) if act == "fp8" else (MMA, MMA_SUM):
        t.config = cfg
        outs.append(t.apply(x, w, ids))
        assert rel(outs[-1], expect) < TOL[act], (fmt, cfg)
    assert torch.equal(outs[0], outs[1]), fmt       # the fused top-k sum adds in the same order


@slow
@pytest.mark.parametrize("path", ["split", "mma_sum"])
def test_decode_paths_drop_out_of_range_pairs_and_reset_their_counters(path):
    """An out-of-range id (possible only under graph capture, where the eager check is skipped) adds
    nothing; a second call (the arrival counters back at zero) gives the same bits."""
    t, ref = moe_pair("fp8_block", E, H, I, K, "w8a8_block", "fp8", {"activation_granularity": "group"},
                      device=DEV)
    x = torch.randn(1, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(1, E, K, DEV)
    bad = ids.clone()
    bad[0, 1] = E + 3 if path == "split" else -1
    t.config = _cfg(t, BLOCK_N=32, BLOCK_K=128, SPLIT_K=2) if path == "split" else MMA_SUM
    t.check_inputs = False
    y = t.apply(x, w, bad)
    w0 = w.clone()
    w0[0, 1] = 0.0
    assert rel(y, ref.apply(x, w0, ids)) < TOL["fp8"]
    counters = t._up_counters if path == "split" else t._sum_counters
    assert int(counters.abs().sum()) == 0
    assert torch.equal(y, t.apply(x, w, bad))


def _gpu_configs(t):
    split = _cfg(t, BLOCK_N=16, BLOCK_K=256, SPLIT_K=2, BLOCK_N2=16, BLOCK_K2=256, WARPS2=4)
    return {"split": split, "mma": MMA,
            "mma_sum": MMA_SUM, "mma_quant_tile": MMA_Q, "mma_quant_fused": MMA_FUSED,
            "mma_quant_pro": dict(MMA_SUM, BLOCK_N=64, QUANT_PRO=1, QUANT_IN=2),
            "mma_quant_pro_pdl": dict(MMA_SUM, BLOCK_N=64, QUANT_PRO=3, PDL=2, PF_NEXT=64),
            "mma_quant_last": dict(MMA, BLOCK_N=64, QUANT_PRO=1, QUANT_LAST=1),
            "mma_persist": dict(MMA_SUM, BLOCK_N=64, BLOCK_N2=128, QUANT_PRO=1, QUANT_LAST=1, PERSIST=1, SWAP_AB=3,
                                PF_HEAD=256, num_warps=8, num_stages=4),
            "swap": dict(SWAP, BLOCK_N=64, BLOCK_N1=64), "swap_aligned": dict(SWAP, SWAP=2, BLOCK_N=64, BLOCK_N1=64),
            "swap_words": dict(SWAP, WORDS=1, BLOCK_N=64, BLOCK_N1=32, SPLIT_K=2, num_stages=1),
            "swap_words_aligned": dict(SWAP, SWAP=2, WORDS=1, BLOCK_N=64, BLOCK_N1=64, num_stages=1),
            "swap_words_wide": dict(SWAP, SWAP=2, WORDS=1, JOIN=1, BLOCK_M=64, BLOCK_N=64, BLOCK_N1=32, num_warps=8,
                                    num_stages=1),
            "swap_words_mid": dict(SWAP, SWAP=2, WORDS=1, JOIN=1, BLOCK_M=32, BLOCK_N=64, BLOCK_N1=32, num_stages=1)}


PATHS = ["split", "mma", "mma_sum", "mma_quant_tile", "mma_quant_fused", "mma_quant_pro",
         "mma_quant_pro_pdl", "mma_quant_last", "mma_persist", "swap", "swap_aligned", "swap_words", "swap_words_aligned",
         "swap_words_wide", "swap_words_mid"]


def _skip_swap(path, fmt, act, params=None):
    if path == "mma_persist" and (act != "fp8" or (params or {}).get("activation_granularity") != "group"):
        pytest.skip("the persistent launch serves W8A8 with 1x128 activation groups")
    if path.startswith("swap") and fmt.startswith("fp8"):
        pytest.skip("the swap-AB path serves 4-bit weights (W4A16, NVFP4 W4A4)")
    if path == "swap_words_wide" and fmt != "mxfp4":
        pytest.skip("64-pair swap blocks serve W4A16 E2M1 words (moe.swap_words_config)")


@pytest.mark.gpu
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("fmt,mode,act,params", FAMILIES)
def test_decode_paths_at_model_shapes_on_gpu(fmt, mode, act, params, path):
    if "quant" in path and act != "fp8":
        pytest.skip("activations are rounded inside the GEMM for W8A8 only")
    if path.startswith(("mma_quant_fused", "mma_quant_pro", "mma_quant_last")) and \
            params.get("activation_granularity") != "group":
        pytest.skip("FC1 writes codes inside its GEMM for 1x128 activation groups only")
    _skip_swap(path, fmt, act, params)
    t, ref = moe_pair(fmt, 32, 1024, 768, 4, mode, act, params, bias=True, device="cuda", group=128,
                      symmetric=False)
    t.config = _gpu_configs(t)[path]
    for m in (1, 3):
        x = torch.randn(m, 1024, dtype=torch.bfloat16, device="cuda")
        w, ids = routing(m, 32, 4, "cuda")
        err = rel(t.apply(x, w, ids), ref.apply(x, w, ids))
        assert err < TOL[act], (fmt, mode, m, path, err)


@pytest.mark.gpu
@pytest.mark.parametrize("symmetric,m", [(False, 16), (True, 16), (False, 1)])
def test_tuned_int4_entries_match_emulation(symmetric, m):
    """The H200's INT4 MoE entries (tuned_configs.json, by zero_point: with zero points at 16 tokens the
    aligned swap-AB words path with JOIN, symmetric at 16 and with zero points at one token the direct path
    on 8x256 tiles at 2 warps) on 32 experts, top 8, against oracle-emulation."""
    from oracle_triton.tuned import lookup

    cfg = lookup("NVIDIA H200", "moe", "w4a16_int4", 1536, 2048, m, 128, zero_point=not symmetric)
    assert cfg is not None
    t, ref = moe_pair("int4", 32, 1024, 384, 8, "w4a16_int4", "bf16", {}, bias=True, device="cuda", group=128,
                      symmetric=symmetric)
    t.config = cfg
    x = torch.randn(m, 1024, dtype=torch.bfloat16, device="cuda")
    w, ids = routing(m, 32, 8, "cuda")
    err = rel(t.apply(x, w, ids), ref.apply(x, w, ids))
    assert err < TOL["bf16"], (symmetric, m, cfg, err)


@pytest.mark.gpu
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("fmt,mode,act,params", [FAMILIES[0], FAMILIES[4]])
def test_decode_paths_replay_under_cuda_graphs(fmt, mode, act, params, path):
    """Captured once, replayed on new tokens and routings: each replay agrees with the reference and
    equals an eager call bit for bit (the split reduction's counters are back at zero)."""
    _skip_swap(path, fmt, act, params)
    if path == "swap_words_wide":
        pytest.skip("swap_words_aligned's kernel on wider blocks: covered at model shapes (GPU time of the check)")
    if path == "mma_quant_last" and act != "fp8":
        pytest.skip("QUANT_LAST rounds W8A8 inputs only (the path is mma's for other formats)")
    t, ref = moe_pair(fmt, 32, 1024, 768, 4, mode, act, params, device="cuda")
    t.config = _gpu_configs(t)[path]
    x = torch.randn(2, 1024, device="cuda", dtype=torch.bfloat16)
    w, ids = routing(2, 32, 4, "cuda")
    replay_moe(t.forward, ref.apply, x, w, ids, 32, TOL[act])


def _bf16_moe(e=E, h=H, i=I, k=K, device=DEV):
    """oracle-triton's fused MoE in its BF16 mode (unquantized experts) and the expert tensors."""
    from oracle import MoELayer
    from oracle.catalog import Mode
    from oracle_triton.moe import TritonMoE

    layer = MoELayer(name="moe-bf16", num_experts=e, top_k=k, hidden_size=h, intermediate_size=i,
                     weight_format="bf16", activation="silu")
    w13 = (torch.randn(e, 2 * i, h, device=device) * 0.05).to(torch.bfloat16)
    w2 = (torch.randn(e, h, i, device=device) * 0.05).to(torch.bfloat16)
    t = TritonMoE(layer, Mode(weight="bf16", activation="bf16", name="bf16"), None)
    t.process_weights(w13=w13, w2=w2)
    return t, w13, w2


def _bf16_reference(x, w13, w2, w, ids):
    """Per pair in fp32, rounded to bf16 where the reference MoE rounds (FC1 output, activation,
    FC2 output), weighted and summed over the slots."""
    i = w2.shape[2]
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
    for r in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[r, j])
            hh = (x[r].float() @ w13[e].float().T).to(torch.bfloat16).float()
            a = (torch.nn.functional.silu(hh[:i]) * hh[i:]).to(torch.bfloat16).float()
            out[r] += float(w[r, j]) * (a @ w2[e].float().T).to(torch.bfloat16).float()
    return out.to(torch.bfloat16)


@slow
def test_bf16_mode_on_both_tensor_core_paths():
    """The BF16 mode (the benchmark's own BF16 baseline) on the aligned grouped GEMM (5 tokens) and
    the direct tensor-core path (2 tokens) against a torch reference; the CUDA-core direct path
    is never chosen for it."""
    t, w13, w2 = _bf16_moe()
    assert "DECODE" not in t.config_for(1, K)
    for m, cfg in ((5, None), (2, MMA)):
        t.config = cfg
        x = torch.randn(m, H, dtype=torch.bfloat16, device=DEV)
        w, ids = routing(m, E, K, DEV)
        assert rel(t.apply(x, w, ids), _bf16_reference(x, w13, w2, w, ids)) < 1e-2, m


def _table(tmp_path, monkeypatch, entries):
    import json

    from oracle_triton import tuned

    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"schema": 1, "devices": {"NVIDIA H200": entries}}))
    monkeypatch.setattr(tuned, "TABLE", path)
    tuned.load.cache_clear()
    return path


DECODE_CFG = {"BLOCK_N": 16, "BLOCK_K": 256, "SPLIT_K": 2, "DECODE": 2, "num_warps": 4, "num_stages": 3,
              "BLOCK_N2": 16, "BLOCK_K2": 256, "WARPS2": 4}
ENTRY = {"kind": "moe", "mode": "w8a8_block", "weight": "fp8_block", "n": 2 * I, "k": H, "experts": E, "m": 1}


@pytest.mark.parametrize("cfg", [DECODE_CFG, dict(DECODE_CFG, XW=1), dict(DECODE_CFG, XW=1, HX=1), MMA, dict(MMA_SUM, QUANT_PRO=1, QUANT_IN=2, BLOCK_N2=32, WARPS2=4,
                                                         STAGES2=3)])
def test_tuned_decode_entries_are_consulted_first(tmp_path, monkeypatch, cfg):
    """A table entry for a decode path (CUDA-core DECODE or tensor-core DIRECT) loads and wins over
    the rules for its bucket only; the table is read on CPU (no kernel runs)."""
    from oracle_triton import tuned

    _table(tmp_path, monkeypatch, [dict(ENTRY, config=cfg)])
    t, _ = moe_pair("fp8_block", E, H, I, K, "w8a8_block", "fp8", {"activation_granularity": "group"}, device=DEV)
    t.facts = dict(t.facts, name="NVIDIA H200")
    try:
        assert t.config_for(1, K) == cfg and t.config_for(2, K) != cfg
    finally:
        tuned.load.cache_clear()


@pytest.mark.parametrize("bad", [dict(DECODE_CFG, BLOCK_K=192), dict(DECODE_CFG, BLOCK_N=24),
                                 dict(DECODE_CFG, BLOCK_K2=64), dict(DECODE_CFG, DECODE=7),
                                 {k: v for k, v in DECODE_CFG.items() if k != "num_stages"}])
def test_tuned_decode_entries_are_checked_by_name(tmp_path, monkeypatch, bad):
    from oracle.errors import PolicyError
    from oracle_triton import tuned

    path = _table(tmp_path, monkeypatch, [dict(ENTRY, config=bad)])
    try:
        with pytest.raises(PolicyError) as err:
            tuned.load(path)
        assert str(path) in str(err.value) and "[0].config" in str(err.value)
    finally:
        tuned.load.cache_clear()


def test_dense_entries_refuse_the_moe_decode_keys(tmp_path, monkeypatch):
    from oracle.errors import PolicyError
    from oracle_triton import tuned

    dense = {"kind": "dense", "mode": "w8a8_block", "weight": "fp8_block", "n": 256, "k": 256, "m": 1,
             "config": dict(MMA, BLOCK_K=128)}
    path = _table(tmp_path, monkeypatch, [dense])
    try:
        with pytest.raises(PolicyError):
            tuned.load(path)
    finally:
        tuned.load.cache_clear()


@slow
def test_tensor_core_direct_path_sums_the_slots_inside_the_gemm():
    """FUSE_SUM: the FC2 GEMM's last program per token and tile writes the top-k sum (no topk_sum
    launch): the same bits as the separate sum, twice in a row (its counters reset)."""
    t, _ = moe_pair("fp8_block", E, H, I, K, "w8a8_block", "fp8", {"activation_granularity": "group"}, device=DEV)
    x = torch.randn(3, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(3, E, K, DEV)
    t.config = MMA
    apart = t.apply(x, w, ids)
    t.config = dict(MMA, FUSE_SUM=1)
    assert torch.equal(t.apply(x, w, ids), apart) and torch.equal(t.apply(x, w, ids), apart)
    assert int(t._sum_counters.abs().sum()) == 0


@slow
def test_tensor_core_direct_path_in_two_launches_gives_the_launch_bits():
    """QUANT_IN + QUANT_OUT (1x128 groups): FC1's input rounded in the FC1 GEMM and FC2's input written
    as codes and group scales by FC1's epilogue (or by the last of each pair's FC1 programs: QUANT_LAST,
    whose arrival counters are back at zero after a call; or rounded in the FC2 GEMM: QUANT_IN bit 2, here with
    FC2's own tile; or a GEMM's whole input row rounded before its loop: QUANT_PRO bits 1 and 2; PDL is
    ignored off sm_90) give the same bits as
    the two quantization launches
    (whose codes are oracle-emulation's, test_triton_moe), with a router weight on the input too; the
    codes the epilogue writes equal the launch's codes of the layer-dtype intermediate."""
    from oracle_triton.launch import quantize_activation_codes

    params = {"activation_granularity": "group"}
    for on_input in (False, True):
        t, ref = moe_pair("fp8_block", E, H, I, K, "w8a8_block", "fp8", params, bias=True, device=DEV,
                          router_on_input=on_input)
        x = torch.randn(2, H, dtype=torch.bfloat16, device=DEV)
        w, ids = routing(2, E, K, DEV)
        t.config = dict(MMA_SUM, BLOCK_N1=128)
        apart = t.apply(x, w, ids)
        for cfg in (MMA_FUSED, dict(MMA_SUM, BLOCK_N1=128, QUANT_IN=2, BLOCK_N2=16, WARPS2=2, STAGES2=2),
                    dict(MMA_SUM, BLOCK_N1=128, QUANT_IN=3), dict(MMA_SUM, BLOCK_N1=128, QUANT_PRO=1, QUANT_IN=2),
                    dict(MMA_SUM, BLOCK_N1=128, QUANT_PRO=3), dict(MMA_SUM, BLOCK_N1=128, QUANT_PRO=2, PDL=2),
                    dict(MMA, QUANT_LAST=1), dict(MMA_SUM, BLOCK_N1=128, QUANT_PRO=1, QUANT_LAST=1)):
            t.config = cfg
            fused = t.apply(x, w, ids)
            assert torch.equal(fused, apart), (on_input, cfg)
        assert int(t._last_counters.abs().sum()) == 0
        assert rel(fused, ref.apply(x, w, ids)) < TOL["fp8"]
    topw, flat = w.reshape(-1).float(), ids.reshape(-1).contiguous()
    inter = torch.empty(2 * K, I, dtype=torch.bfloat16, device=DEV)
    codes = torch.empty(2 * K, I, dtype=torch.uint8, device=DEV)
    scales = torch.empty(I // 128, 2 * K, dtype=torch.float32, device=DEV)
    a_in = t._round(0, t._input(x, topw, K))
    for out, sc in ((inter, None), (codes, scales)):
        t._gemm(1, a_in, t.layer.apply_router_weight_on_input, t.w13, t.b13, topw, flat, flat, out, 2 * K, K, I,
                t.rows, H, MMA_FUSED, 2 * K, direct=True, out_scales=sc)
    want, want_scales = quantize_activation_codes(inter, t.act, None, t.facts)
    assert torch.equal(codes, want.view(torch.uint8)) and torch.equal(scales, want_scales)


@slow
def test_persistent_launch_gives_the_two_launch_bits():
    """PERSIST (moe_persist.moe_pairs_persistent_kernel): both GEMMs' direct tiles taken from one counter in
    one launch (each FC1 tile rounds its input row, the last FC1 tile of a pair rounds FC2's codes and sets
    the pair's flag, FC2 sums the slots) give the bits of the two-launch path, with biases and FC2's own
    tile; twice in a row (the counters and flags are back at zero), and agree with oracle-emulation."""
    params = {"activation_granularity": "group"}
    t, ref = moe_pair("fp8_block", E, H, I, K, "w8a8_block", "fp8", params, bias=True, device=DEV)
    for m in (1, 3):
        x = torch.randn(m, H, dtype=torch.bfloat16, device=DEV)
        w, ids = routing(m, E, K, DEV)
        two = dict(MMA_SUM, BLOCK_N2=64, QUANT_PRO=1, QUANT_LAST=1)
        t.config = two
        apart = t.apply(x, w, ids)
        t.config = dict(two, PERSIST=1)
        assert torch.equal(t.apply(x, w, ids), apart) and torch.equal(t.apply(x, w, ids), apart), m
        for name in ("_last_counters", "_sum_counters", "_ready_flags", "_work_counters"):
            assert int(getattr(t, name).abs().sum()) == 0, name
        assert rel(apart, ref.apply(x, w, ids)) < TOL["fp8"]
    t.config = dict(MMA_SUM, PERSIST=1, BLOCK_K=64)
    with pytest.raises(ValueError, match="PERSIST"):
        t.apply(x, w, ids)


def test_two_launch_direct_path_refuses_what_it_cannot_round():
    """QUANT_OUT rounds one 1x128 group per FC1 tile, QUANT_PRO 1x128 groups: other tile widths or
    activation scales are named."""
    t, _ = moe_pair("fp8_channel", E, H, I, K, "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
                    device=DEV)
    x = torch.randn(1, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(1, E, K, DEV)
    t.config = MMA_FUSED
    with pytest.raises(ValueError, match="QUANT_OUT"):
        t.apply(x, w, ids)
    g, _ = moe_pair("fp8_block", E, H, I, K, "w8a8_block", "fp8", {"activation_granularity": "group"}, device=DEV)
    g.config = dict(MMA_FUSED, BLOCK_N1=64)
    with pytest.raises(ValueError, match="BLOCK_N1=64"):
        g.apply(x, w, ids)
    t.config = dict(MMA_SUM, QUANT_PRO=1)
    with pytest.raises(ValueError, match="QUANT_PRO"):
        t.apply(x, w, ids)
    g.config = dict(MMA_SUM, QUANT_PRO=2, QUANT_IN=2)
    with pytest.raises(ValueError, match="QUANT_PRO"):
        g.apply(x, w, ids)
    for cfg, who in ((dict(MMA, QUANT_LAST=1), t), (dict(MMA, QUANT_LAST=1, QUANT_IN=2), g)):
        who.config = cfg
        with pytest.raises(ValueError, match="QUANT_LAST"):
            who.apply(x, w, ids)


@slow
@pytest.mark.parametrize("fmt,mode,act,activation,router_on_input", [
    ("mxfp4", "w4a16_mx", "bf16", "swigluoai", False), ("int4", "w4a16_int4", "bf16", "silu", False),
    ("nvfp4", "w4a16_nvfp4", "bf16", "relu2", True), ("nvfp4", "w4a4_nvfp4", "nvfp4", "silu", False)])
def test_swap_ab_path_matches_emulation(fmt, mode, act, activation, router_on_input):
    """SWAP 1 (one pair per program) and 2 (aligned blocks of 16 pairs) of moe_gemv.moe_swap_kernel, by
    hand-decoded tiles in the interpreter: gated interleaved, gated halves with zero points, ungated
    with the router weight on the input, NVFP4 activations (W4A4); with SWAP 1 and the weight on the
    output, an out-of-range id adds nothing and the top-k arrival counters are back at zero."""
    k = 1 if router_on_input else K
    t, ref = moe_pair(fmt, E, H, I, k, mode, act, {}, activation=activation, bias=True, device=DEV, group=128,
                      symmetric=False, router_on_input=router_on_input)
    x = torch.randn(2, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(2, E, k, DEV)
    expect = ref.apply(x, w, ids)
    for cfg in (SWAP, dict(SWAP, SWAP=2)):
        t.config = cfg
        assert rel(t.apply(x, w, ids), expect) < TOL[act], cfg
    t.config = SWAP
    if router_on_input:
        return                   # a zero weight on the input still adds act(bias) @ w2: not a dropped pair
    bad = ids.clone()
    bad[1, 0] = E + 1
    t.check_inputs = False
    w0 = w.clone()
    w0[1, 0] = 0.0
    y = t.apply(x, w, bad)
    assert rel(y, ref.apply(x, w0, ids)) < TOL[act] and int(t._sum_counters.abs().sum()) == 0


@slow
@pytest.mark.parametrize("fmt,mode,act,activation,inter", [
    ("mxfp4", "w4a16_mx", "bf16", "swigluoai", 320), ("int4", "w4a16_int4", "bf16", "silu", 384),
    ("nvfp4", "w4a4_nvfp4", "nvfp4", "silu", 384)])
def test_swap_words_path_matches_emulation(fmt, mode, act, activation, inter):
    """WORDS (the dense few-row kernel's K loop, gemm.w4_swap_tiles) in both swap modes and with K split
    over programs: against emulation, with zero points (INT4), FC2's K (320) not a multiple of the
    128-wide tile (MXFP4: its tail read as zeros), NVFP4 activations; the split counters are back at
    zero and a second call gives the same bits."""
    t, ref = moe_pair(fmt, E, H, inter, K, mode, act, {}, activation=activation, bias=True, device=DEV, group=128,
                      symmetric=False)
    x = torch.randn(3, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(3, E, K, DEV)
    expect = ref.apply(x, w, ids)
    words = dict(SWAP, WORDS=1)
    for cfg in (dict(words, SPLIT_K=2), dict(words, SWAP=2, BLOCK_N1=16), dict(words, SWAP=2, SPLIT_K=3)):
        t.config = cfg
        y = t.apply(x, w, ids)
        assert rel(y, expect) < TOL[act], cfg
        assert int(t._split_counters.abs().sum()) == 0 if cfg.get("SPLIT_K", 1) > 1 else True
        assert torch.equal(y, t.apply(x, w, ids)), cfg


@slow
@pytest.mark.parametrize("fmt,mode,act", [("int4", "w4a16_int4", "bf16"), ("nvfp4", "w4a4_nvfp4", "nvfp4")])
def test_swap_words_mid_blocks_match_emulation(fmt, mode, act, monkeypatch):
    """The rule's 32-pair blocks (swap_words_config above SWAP_MAX_PAIRS pairs per expert: Qwen3 NVFP4 W4A4 and
    INT4 at M=256) against emulation, with zero points (INT4) and NVFP4 activations: 12 pairs per expert on
    average, so experts with more than 16 and fewer than 8 pairs, a block's padding rows and one expert's
    pairs in one block all occur; a second call gives the same bits, and so does a call whose activation
    scales come from the many-program launch (launch.tensor_scale_wide, as at M=256 on Qwen3-235B)."""
    from oracle_triton import moe
    from oracle_triton.moe import swap_words_config

    e, m = 4, 24
    t, ref = moe_pair(fmt, e, H, 256, K, mode, act, {}, bias=True, device=DEV, group=128, symmetric=False)
    x = torch.randn(m, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(m, e, K, DEV)
    t.config = swap_words_config(m * K / e)
    assert t.config["BLOCK_M"] == 32
    y = t.apply(x, w, ids)
    assert rel(y, ref.apply(x, w, ids)) < TOL[act]
    assert torch.equal(y, t.apply(x, w, ids))
    monkeypatch.setattr(moe, "TENSOR_SCALE_MAX", 0)
    monkeypatch.setattr(moe, "TENSOR_SCALE_WIDE", True)
    assert torch.equal(y, t.apply(x, w, ids))


def test_swap_words_rule():
    """moe.use_swap_words: E2M1 and 128-group INT4 experts with layer-dtype activations from 1.5 pairs per
    expert (below: the CUDA-core direct path with word decoders), NVFP4 W4A4 from half a pair per expert, up
    to SWAP_MID_PAIRS per expert (E2M1 W4A16: SWAP_WIDE_MAX_PAIRS), where the PTX word decoders compile; its
    config (16-, 32- or 64-pair blocks by pairs per expert) passes the kernels' check."""
    from oracle_triton.formats import ACT_GROUP, ACT_NONE, ACT_NVFP4, E2M1_MX, E2M1_NV, FP8, INT4, check_config, layout_for
    from oracle_triton.moe import SWAP_MAX_PAIRS, SWAP_MID_PAIRS, SWAP_WIDE_MAX_PAIRS, swap_words_config, use_swap_words

    assert use_swap_words(16, 4, 32, E2M1_MX, ACT_NONE, True)                 # gpt-oss-20b M=16: 64 pairs
    assert use_swap_words(64, 4, 32, E2M1_MX, ACT_NONE, True)                 # M=64: 8 pairs per expert
    assert use_swap_words(256, 4, 32, E2M1_MX, ACT_NONE, True)                # M=256: 32 per expert (W4A16)
    assert not use_swap_words(257, 4, 32, E2M1_MX, ACT_NONE, True)            # above SWAP_WIDE_MAX_PAIRS: aligned
    assert use_swap_words(256, 8, 128, E2M1_NV, ACT_NVFP4, True)              # qwen3-235b W4A4 M=256: 16 per expert
    assert not use_swap_words(257, 8, 128, E2M1_NV, ACT_NVFP4, True)          # W4A4 above SWAP_MID_PAIRS: aligned
    assert not use_swap_words(1, 4, 32, E2M1_MX, ACT_NONE, True)              # M=1: the direct path
    assert not use_swap_words(12, 4, 32, E2M1_MX, ACT_NONE, True)             # 48 pairs: 1.5 per expert
    assert not use_swap_words(16, 4, 32, E2M1_MX, ACT_NONE, False)            # no word decoders
    assert use_swap_words(16, 8, 128, E2M1_NV, ACT_NVFP4, True)               # qwen3-235b NVFP4 M=16
    assert not use_swap_words(8, 8, 128, E2M1_NV, ACT_NVFP4, True)            # half a pair per expert: direct
    assert use_swap_words(256, 8, 128, INT4, ACT_NONE, True, 128)             # qwen3-30b INT4 M=256: 16 per expert
    assert not use_swap_words(16, 4, 32, INT4, ACT_NONE, True, 128)           # 2 per expert: not timed
    assert use_swap_words(129, 8, 128, INT4, ACT_NONE, True, 128)             # just above 8 per expert
    assert not use_swap_words(257, 8, 128, INT4, ACT_NONE, True, 128)         # above SWAP_MID_PAIRS: aligned
    assert not use_swap_words(256, 8, 128, INT4, ACT_NONE, True, 64)          # K tiles are one 128-wide group
    assert not use_swap_words(16, 8, 128, INT4, ACT_NONE, True, 128)          # 1 per expert: the direct path
    assert not use_swap_words(16, 4, 32, FP8, ACT_GROUP, True)
    assert SWAP_MAX_PAIRS == 8 and SWAP_MID_PAIRS == 16 and SWAP_WIDE_MAX_PAIRS == 32
    assert [swap_words_config(p)["BLOCK_M"] for p in (8, 9, 16, 17, 32)] == [16, 32, 32, 64, 64]
    assert swap_words_config(16)["num_warps"] == 4 and swap_words_config(32)["num_warps"] == 8
    for per_expert in (2, 16, 32):
        check_config(swap_words_config(per_expert), layout_for("mxfp4", 5760, 2880))
        check_config(swap_words_config(per_expert), layout_for("int4", 1536, 2048, 128))


def test_small_dynamic_tensor_scales_take_one_program():
    """Small dynamic per-tensor scales (FP8 per tensor, the NVFP4 global scale) come from
    launch.tensor_scale, with the bits of linear.dynamic_tensor_scale (1 for an all-zero input)."""
    from oracle_triton.linear import dynamic_tensor_scale

    for fmt, mode, act in (("nvfp4", "w4a4_nvfp4", "nvfp4"), ("fp8_tensor", "w8a8_fp8_tensor", "fp8")):
        t, _ = moe_pair(fmt, E, H, I, K, mode, act, {"activation_granularity": "tensor"} if act == "fp8" else {},
                        device=DEV)
        for a in (torch.randn(3, H, dtype=torch.bfloat16, device=DEV) * 7, torch.zeros(1, H, device=DEV,
                                                                                       dtype=torch.bfloat16)):
            assert torch.equal(t._act_scale(0, a), dynamic_tensor_scale(a, t.act)), (fmt, a.abs().max())


def test_large_dynamic_tensor_scales_take_one_launch_of_many_programs():
    """Dynamic per-tensor scales above launch.TENSOR_SCALE_MAX values (the NVFP4 W4A4 MoE's inputs from a few
    hundred tokens on) come from launch.tensor_scale_wide: the bits of linear.dynamic_tensor_scale (torch's amax
    and IEEE division; 1 for an all-zero input) with the largest value first, last, in the middle or in the
    short tail, and the state it keeps between calls back at zero after each call."""
    from oracle.formats import E2M1_MAX, E4M3_MAX
    from oracle_triton.formats import ACT_NVFP4, ACT_TENSOR
    from oracle_triton.launch import TENSOR_SCALE_BLOCK, TENSOR_SCALE_PROGRAMS, tensor_scale_wide
    from oracle_triton.linear import dynamic_tensor_scale

    state = torch.zeros(2, dtype=torch.int32, device=DEV)
    n = (TENSOR_SCALE_PROGRAMS + 3) * TENSOR_SCALE_BLOCK + 5     # strided steps, a tail shorter than a block
    base = torch.randn(n, dtype=torch.bfloat16, device=DEV)
    for where in (0, n - 1, n // 2, None):
        x = base.clone()
        if where is None:
            x.zero_()
        else:
            x[where] = -37.5
        for act, div in ((ACT_NVFP4, E2M1_MAX * E4M3_MAX), (ACT_TENSOR, E4M3_MAX)):
            got = tensor_scale_wide(x, div, state)
            assert torch.equal(got, dynamic_tensor_scale(x, act)), (where, act)
            assert int(state.abs().sum()) == 0


def test_swap_words_refuses_partial_tiles():
    """WORDS needs K tiles of whole 128s (INT4: one 128-wide group per tile)."""
    t, _ = moe_pair("mxfp4", E, H, I, K, "w4a16_mx", "bf16", {}, device=DEV)
    x = torch.randn(1, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(1, E, K, DEV)
    t.config = dict(SWAP, WORDS=1, BLOCK_K=64)
    with pytest.raises(ValueError, match="WORDS"):
        t.apply(x, w, ids)


def test_swap_ab_path_refuses_quantized_activations():
    t, _ = moe_pair("fp8_block", E, H, I, K, "w8a8_block", "fp8", {"activation_granularity": "group"}, device=DEV)
    x = torch.randn(1, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(1, E, K, DEV)
    t.config = SWAP
    with pytest.raises(ValueError, match="SWAP"):
        t.apply(x, w, ids)


@pytest.mark.gpu
def test_bf16_mode_on_gpu():
    """The BF16 mode at a model-like shape: the rule's path (aligned tiles, 2-byte K tiles of 64 from
    64 rows per expert on) and the direct tensor-core path with the fused top-k sum."""
    t, w13, w2 = _bf16_moe(32, 1024, 768, 4, "cuda")
    for m, cfg in ((1, None), (3, dict(MMA, FUSE_SUM=1)), (700, None)):
        t.config = cfg
        x = torch.randn(m, 1024, dtype=torch.bfloat16, device="cuda")
        w, ids = routing(m, 32, 4, "cuda")
        assert rel(t.apply(x, w, ids), _bf16_reference(x, w13, w2, w, ids)) < 1e-2, m


def test_w8a8_few_pairs_take_the_tensor_core_direct_path():
    """The rule (moe.use_direct_mma): W8A8 experts while pairs <= experts / 4, with the fused top-k sum
    (and FC1's input rounded in its prologue for 1x128 groups); the aligned tiles above that; W8A16
    never (no table entry on CPU: the rules alone decide)."""
    t, _ = moe_pair("fp8_block", 32, H, I, 4, "w8a8_block", "fp8", {"activation_granularity": "group"}, device=DEV)
    t.facts = dict(t.facts, name=None)
    assert t.config_for(2, 4).get("DIRECT") == 1 and t.config_for(2, 4).get("FUSE_SUM") == 1
    assert t.config_for(2, 4).get("QUANT_PRO") == 1          # 1x128 groups: rounded in FC1's prologue
    ch, _ = moe_pair("fp8_channel", 32, H, I, 4, "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
                     device=DEV)
    ch.facts = dict(ch.facts, name=None)
    assert ch.config_for(2, 4).get("DIRECT") == 1 and "QUANT_PRO" not in ch.config_for(2, 4)
    assert "DIRECT" not in t.config_for(3, 4) and "DECODE" not in t.config_for(3, 4)
    a16, _ = moe_pair("fp8_block", 32, H, I, 4, "w8a16_block", "bf16", device=DEV)
    a16.facts = dict(a16.facts, name=None)
    assert "DIRECT" not in a16.config_for(1, 4)


def test_bf16_rows_read_as_64_bit_words(monkeypatch):
    """gemv._bf16x4 (XW): four bf16 values read as one 64-bit word give the values themselves, in order
    (against torch's bf16 -> fp32 conversion), for normal, subnormal, signed, infinite and zero values."""
    if DEV == "cpu":                       # built for the interpreter, as conftest builds the package
        monkeypatch.setenv("TRITON_INTERPRET", "1")

    @triton.jit
    def unpack(x_ptr, out_ptr, N: tl.constexpr):
        j = tl.arange(0, N)
        v0, v1, v2, v3 = _gemv._bf16x4(tl.load(x_ptr.to(tl.pointer_type(tl.int64)) + j))
        tl.store(out_ptr + 4 * j, v0)
        tl.store(out_ptr + 4 * j + 1, v1)
        tl.store(out_ptr + 4 * j + 2, v2)
        tl.store(out_ptr + 4 * j + 3, v3)

    x = torch.randn(64, device=DEV).to(torch.bfloat16)
    x[:8] = torch.tensor([0.0, -0.0, 1e-40, -3.5, float("inf"), -float("inf"), 65504.0, 2.0 ** -130],
                         dtype=torch.float32).to(torch.bfloat16)
    out = torch.empty(64, device=DEV, dtype=torch.float32)
    unpack[(1,)](x, out, 16)
    assert torch.equal(out.view(torch.int32), x.float().view(torch.int32))

