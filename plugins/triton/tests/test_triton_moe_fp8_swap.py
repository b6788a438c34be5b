"""W8A8 MoE GEMMs with the weight rows as the MMA's tall side (moe_gemm_kernel SWAP_AB, bit 1 FC1, bit 2
FC2): against oracle-emulation's MoE for the three FP8 activation granularities on the tensor-core
direct path (one pair per program, with and without the rounding of FC1's input in its prologue and
of FC2's by FC1's last program) and on the aligned blocks, in Triton's interpreter on CPU (compiled on
a GPU machine); on a GPU (marked gpu) also at a model-like shape and under CUDA-graph replay. Tolerances
as test_triton_moe."""
from __future__ import annotations

import pytest
import torch

from helpers import moe_pair, rel, routing
from test_triton_gpu import _replay_moe

slow = pytest.mark.slow   # the kernels run in Triton's CPU interpreter (seconds each)

DEV = "cuda" if torch.cuda.is_available() else "cpu"
TOL = 5e-2
E, H, I, K = 8, 256, 384, 2
FP8 = [
    ("fp8_block", "w8a8_block", {"activation_granularity": "group"}),
    ("fp8_channel", "w8a8_fp8_channel", {"activation_granularity": "token"}),
    ("fp8_tensor", "w8a8_fp8_tensor", {"activation_granularity": "tensor"}),
]
DIRECT = {"DIRECT": 1, "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3,
          "FULL_TILE": 1, "FUSE_SUM": 1, "SWAP_AB": 3}
#: DeepSeek-R1's M=1 entry's options: FC1 rounds its input in its prologue, its last program FC2's
DIRECT_LAST = dict(DIRECT, QUANT_PRO=1, QUANT_LAST=1, BLOCK_N2=128)
ALIGNED = {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_N1": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4,
           "FULL_TILE": 0, "SWAP_AB": 3}


def _check(t, ref, m, cfg, tol=TOL):
    x = torch.randn(m, t.hidden, dtype=torch.bfloat16, device=t.device)
    w, ids = routing(m, t.experts, t.layer.top_k, t.device)
    expect = ref.apply(x, w, ids)
    t.config = cfg
    y = t.apply(x, w, ids)
    t.config = {k: v for k, v in cfg.items() if k != "SWAP_AB"}
    plain = t.apply(x, w, ids)
    assert rel(y, expect) < tol, (cfg, rel(y, expect))
    # the same code products summed in another order inside the MMA: equal up to fp32 rounding and the
    # E4M3 rounding flips of FC2's input that such a difference causes (R13, Qwen3-30B: 5.3e-3 / 5.8e-3)
    assert rel(y, plain) < tol, (cfg, rel(y, plain))
    return y


@slow
@pytest.mark.parametrize("fmt,mode,params", FP8)
def test_swap_ab_direct_matches_emulation(fmt, mode, params):
    t, ref = moe_pair(fmt, E, H, I, K, mode, "fp8", params, bias=True, device=DEV)
    _check(t, ref, 2, DIRECT)


@slow
@pytest.mark.parametrize("bn", [64, 128], ids=["fc1_64", "fc1_128_deepseek_m1_entry"])
def test_swap_ab_direct_with_prologue_and_last_program_rounding(bn):
    t, ref = moe_pair("fp8_block", E, H, I, K, "w8a8_block", "fp8", {"activation_granularity": "group"},
                      device=DEV)
    _check(t, ref, 1, dict(DIRECT_LAST, BLOCK_N=bn))
    assert int(t._last_counters.abs().sum()) == 0 and int(t._sum_counters.abs().sum()) == 0


@slow
def test_swap_ab_direct_options_keep_the_products():
    """Two options of the direct path timed in the eighth pass (not shipped): the gate and up rows stacked in one
    dot (FUSE_GU with FP8 codes) and FC2 rounding its own input in its prologue (QUANT_PRO bit 2 instead of FC1's
    last program, QUANT_LAST). Same products in the same K order: the same bits in the interpreter (the float8
    MMAs on a GPU may order a tile's sums differently: within the tolerance there)."""
    t, ref = moe_pair("fp8_block", E, H, I, K, "w8a8_block", "fp8", {"activation_granularity": "group"},
                      device=DEV)
    x = torch.randn(1, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(1, E, K, DEV)
    t.config = DIRECT_LAST
    base = t.apply(x, w, ids)
    pro3 = {k: v for k, v in DIRECT_LAST.items() if k != "QUANT_LAST"}
    for cfg in (dict(DIRECT_LAST, FUSE_GU=1), dict(DIRECT_LAST, BLOCK_N=32, FUSE_GU=1), dict(pro3, QUANT_PRO=3)):
        t.config = cfg
        y = t.apply(x, w, ids)
        assert (torch.equal(y, base) if DEV == "cpu" else rel(y, base) < TOL), cfg
        assert rel(y, ref.apply(x, w, ids)) < TOL, cfg
    assert int(t._sum_counters.abs().sum()) == 0


@slow
@pytest.mark.parametrize("fmt,mode,params", FP8[:2])
@pytest.mark.parametrize("bits", [1, 2, 3])
def test_swap_ab_aligned_blocks_match_emulation(fmt, mode, params, bits):
    t, ref = moe_pair(fmt, E, H, I, K, mode, "fp8", params, device=DEV)
    _check(t, ref, 12, dict(ALIGNED, SWAP_AB=bits))


@slow
@pytest.mark.parametrize("cfg", [dict(DIRECT_LAST, BLOCK_N=128), ALIGNED, dict(ALIGNED, SWAP_AB=0)],
                         ids=["direct_last_deepseek_m1_entry", "aligned_swap", "aligned"])
def test_two_k_tiles_an_iteration_keep_the_products(cfg):
    """K_PAIR (moe_gemm_kernel K_UNROLL 2: the K loop takes two tiles an iteration, so a weight row's consecutive
    chunks are loaded together): the same products in the same K order as one tile an iteration, so the same bits
    in the interpreter (within the tolerance on a GPU), and within the tolerance of emulation. FC1 (K = H = 256,
    two tiles) and FC2 (K = I = 256) both take it; K = 384 (three tiles) falls back to one tile an iteration."""
    for i in (256, 384):
        t, ref = moe_pair("fp8_block", E, H, i, K, "w8a8_block", "fp8", {"activation_granularity": "group"},
                          device=DEV)
        m = 1 if cfg.get("DIRECT") else 12
        x = torch.randn(m, H, dtype=torch.bfloat16, device=DEV)
        w, ids = routing(m, E, K, DEV)
        t.config = cfg
        base = t.apply(x, w, ids)
        t.config = dict(cfg, K_PAIR=3)
        y = t.apply(x, w, ids)
        assert (torch.equal(y, base) if DEV == "cpu" else rel(y, base) < TOL), (cfg, i)
        assert rel(y, ref.apply(x, w, ids)) < TOL, (cfg, i)


def test_swap_ab_is_a_tuned_table_key():
    from oracle_triton.tuned import MOE_KEYS

    assert {"SWAP_AB", "QPDL"} <= MOE_KEYS


@pytest.mark.parametrize("extra", [{"QUANT_PRO": 1}, {"PDL": 1}], ids=["quant_pro", "pdl"])
def test_qpdl_with_an_fc1_input_not_from_the_quantization_launch_is_refused(extra):
    """QPDL makes FC1 a dependent launch of its input's quantization launch: with FC1's programs rounding the
    input themselves (QUANT_PRO) or FC1 already in a PDL chain with FC2 there is no such launch to depend on, so the
    entry is refused by name, not run without the option."""
    t, _ = moe_pair("fp8_block", E, H, I, K, "w8a8_block", "fp8", {"activation_granularity": "group"}, device=DEV)
    x = torch.randn(1, H, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(1, E, K, DEV)
    t.config = dict({k: v for k, v in DIRECT_LAST.items() if k != "QUANT_PRO"}, QPDL=1, **extra)
    with pytest.raises(ValueError, match="QPDL"):
        t.apply(x, w, ids)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [DIRECT, DIRECT_LAST,
                                 dict(DIRECT_LAST, BLOCK_N2=64, WARPS2=4, STAGES2=3, num_warps=8, num_stages=4),
                                 # DeepSeek-R1's M=1 entry (ninth pass): 128-column FC1 tiles, one program per SM
                                 dict(DIRECT_LAST, BLOCK_N=128, WARPS2=4, STAGES2=3, num_warps=8, num_stages=4),
                                 # the H100's own (thirty-sixth pass, R118): two K tiles an iteration, 3 FC1 stages
                                 dict(DIRECT_LAST, BLOCK_N=128, WARPS2=4, STAGES2=3, num_warps=8, num_stages=3,
                                      K_PAIR=3),
                                 ALIGNED],
                         # direct: both inputs rounded by quantization launches (1- and 4-row tiles at one token)
                         ids=["direct", "direct_last", "direct_last_qwen3_m1_entry", "direct_last_deepseek_m1_entry",
                              "direct_last_deepseek_m1_h100_entry", "aligned"])
def test_swap_ab_on_gpu_at_a_model_like_shape_and_under_replay(cfg):
    t, ref = moe_pair("fp8_block", 32, 1024, 768, 4, "w8a8_block", "fp8", {"activation_granularity": "group"},
                      device="cuda")
    m = 1 if cfg.get("DIRECT") else 24
    _check(t, ref, m, cfg)
    t.config = cfg
    _replay_moe(t, ref, m, TOL)


@pytest.mark.gpu
@pytest.mark.parametrize("bn", [128, 64], ids=["deepseek_m1_h100_entry_tiles", "fc1_64"])
def test_fc1_as_a_dependent_launch_of_its_quantizer_keeps_the_products(bn):
    """QPDL: FC1 launched with launch_pdl after the quantization launch (which lets it start at once) and waiting
    for it on the device: the same products as the two ordinary launches (the same kernels and inputs: equal, or
    within the tolerance should the compiler order a tile's sums otherwise), within the tolerance of emulation,
    and under CUDA-graph replay, where a wait that came too late would read stale codes."""
    cfg = {k: v for k, v in DIRECT_LAST.items() if k != "QUANT_PRO"}
    cfg.update(BLOCK_N=bn, WARPS2=4, STAGES2=3, num_warps=8, num_stages=3, K_PAIR=3)
    t, ref = moe_pair("fp8_block", 32, 1024, 768, 4, "w8a8_block", "fp8", {"activation_granularity": "group"},
                      device="cuda")
    x = torch.randn(1, t.hidden, dtype=torch.bfloat16, device="cuda")
    w, ids = routing(1, t.experts, t.layer.top_k, "cuda")
    t.config = cfg
    base = t.apply(x, w, ids)
    t.config = dict(cfg, QPDL=1)
    y = t.apply(x, w, ids)
    assert rel(y, base) < 1e-3, rel(y, base)
    assert rel(y, ref.apply(x, w, ids)) < TOL
    _replay_moe(t, ref, 1, TOL)
