"""Eager fused-MoE calls on launch plans (TritonMoE.planned, fastlaunch.CallPlans), on a GPU: from the
second eager call of an input signature on, `apply` replays the call's recorded Triton launches with the
launcher directly (no eager graph); the outputs are bit for bit those of the ordinary launches (`forward`)
for new tokens and routings, and within the tolerances of test_triton_moe of oracle-emulation's MoE."""
from __future__ import annotations

import pytest
import torch

from helpers import moe_pair, rel, routing

pytestmark = pytest.mark.gpu

TOL_Q = {"bf16": 1e-2, "fp8": 5e-2, "nvfp4": 8e-2}
E, H, I, K = 16, 512, 256, 4
#: DeepSeek-R1's M=1 entry (FC1 rounds its input in its prologue, its last program FC2's, FC2 sums the slots)
DEEPSEEK_M1 = {"DIRECT": 1, "BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "FULL_TILE": 1, "num_warps": 8,
               "num_stages": 4, "QUANT_PRO": 1, "QUANT_LAST": 1, "FUSE_SUM": 1, "BLOCK_N2": 128, "WARPS2": 4,
               "STAGES2": 3, "SWAP_AB": 3}


@pytest.mark.parametrize("fmt,mode,act,params,symmetric,config", [
    ("int4", "w4a16_int4", "bf16", {}, True, None),
    ("int4", "w4a16_int4", "bf16", {}, False, None),
    ("mxfp4", "w4a16_mx", "bf16", {}, True, None),
    ("nvfp4", "w4a4_nvfp4", "nvfp4", {}, True, None),
    ("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}, True, None),
    ("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}, True, DEEPSEEK_M1),
])
def test_planned_moe_calls_equal_the_ordinary_launches(fmt, mode, act, params, symmetric, config):
    t, ref = moe_pair(fmt, E, H, I, K, mode, act, params, bias=fmt == "mxfp4", device="cuda", symmetric=symmetric)
    t.check_inputs = False
    t.planned = True                                    # (moe.PLANNED: the default)
    if config is not None:
        t.config = config
    for trial in range(4):
        x = torch.randn(1, H, device="cuda", dtype=torch.bfloat16)
        w, ids = routing(1, E, K, "cuda")
        got = t.apply(x, w, ids)
        assert torch.equal(got, t.forward(x, w, ids)), trial
        assert rel(got, ref.apply(x, w, ids)) < TOL_Q[act]
    assert not t.plans.refused, t.plans.refused
    assert len(t.plans.plans) == 1                      # the calls from the third on replayed the plan
    t.config = config                                   # a new config drops the plans
    assert not t.plans.plans
