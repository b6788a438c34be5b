"""The large-M DEQUANT_MM MoE path (oracle_triton.moe_dequant): experts decoded once per call into a BF16
workspace, chunk by chunk, then the BF16 mode's grouped GEMMs.

The decoded weights are the reference's own BF16 values (value x group scale in fp32, rounded once), so
against oracle-emulation only the fp32 summation order differs: in the interpreter the outputs agree to
a last-bit flip of a bf16 FC1 output; on a GPU within the large-M tolerances (1e-2; NVFP4 W4A4 8e-2: FC2's
input is re-rounded to FP4, where a last-bit FC1 difference can cross a rounding boundary). Chunks of 1, 2
and more blocks than the call has cover the window arithmetic (a chunk spanning one expert, several, and
every expert), with biases (copied per window) and zero points."""
from __future__ import annotations

import pytest
import torch

from helpers import moe_pair, rel, replay_moe, routing

DEV = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {"bf16": 1e-2, "nvfp4": 8e-2}
CFG = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_N1": 32, "BLOCK_K": 64, "num_warps": 4, "num_stages": 2}
FORMATS = [
    ("int4", "w4a16_int4", "bf16", False),       # zero points
    ("int4", "w4a16_int4", "bf16", True),
    ("mxfp4", "w4a16_mx", "bf16", True),
    ("nvfp4", "w4a4_nvfp4", "nvfp4", True),
]


@pytest.mark.slow
@pytest.mark.parametrize("fmt,mode,act,symmetric", FORMATS)
def test_dequant_path_matches_emulation_for_any_chunk(fmt, mode, act, symmetric):
    torch.manual_seed(0)
    t, ref = moe_pair(fmt, 8, 256, 128, 2, mode, act, bias=True, device=DEV, symmetric=symmetric)
    x = torch.randn(24, 256, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(24, 8, 2, DEV)
    want = ref.apply(x, w, ids)
    for chunk in (1, 2, 100):
        t.config = {**CFG, "DEQUANT_MM": chunk}
        err = rel(t.apply(x, w, ids), want)
        assert err < (1e-3 if DEV == "cpu" else TOL[act]), (fmt, symmetric, chunk, err)


@pytest.mark.slow
def test_window_kernel_finds_each_chunks_experts():
    from oracle_triton.moe_dequant import window_kernel

    bexp = torch.tensor([0, 0, 1, 3, 3, 3, 4, 6, 7, -1, -1], dtype=torch.int32, device=DEV)
    first = torch.empty(3, dtype=torch.int32, device=DEV)
    last = torch.empty(3, dtype=torch.int32, device=DEV)
    local = torch.empty(11, dtype=torch.int32, device=DEV)
    window_kernel[(3,)](bexp, first, last, local, 11, CHUNK=4, CHUNK_P2=4)
    assert first.tolist() == [0, 3, 7] and last.tolist() == [3, 6, 7]
    assert local.tolist() == [0, 0, 1, 3, 0, 0, 1, 3, 0, -1, -1]


def test_dequant_config_is_refused_for_fp8_experts():
    from oracle_triton.moe_dequant import apply_dequant

    t, _ = moe_pair("fp8_channel", 8, 256, 128, 2, "w8a8_fp8_channel", "fp8",
                    {"activation_granularity": "token"}, device=DEV)
    x = torch.randn(4, 256, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(4, 8, 2, DEV)
    with pytest.raises(ValueError, match="DEQUANT_MM: 4-bit experts"):
        apply_dequant(t, x, w.reshape(-1), ids.reshape(-1), 4, 2, {**CFG, "DEQUANT_MM": 4})


# the production tiles (the BF16 mode's at 128+ pairs per expert), so the GPU round reuses their compiles
GPU_CFG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_N1": 64, "BLOCK_K": 64, "num_warps": 8, "num_stages": 4}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("fmt,mode,act,symmetric", FORMATS)
def test_dequant_path_on_gpu_with_capture_and_replay(fmt, mode, act, symmetric):
    torch.manual_seed(0)
    t, ref = moe_pair(fmt, 16, 2048, 768, 8, mode, act, device="cuda", symmetric=symmetric)
    t.check_inputs = False
    x = torch.randn(512, 2048, dtype=torch.bfloat16, device="cuda")
    w, ids = routing(512, 16, 8, "cuda")
    want = ref.apply(x, w, ids)
    for chunk, overlap in ((8, 0), (64, 0), (8, 1)):
        t.config = {**GPU_CFG, "DEQUANT_MM": chunk, "DQ_OVERLAP": overlap}
        err = rel(t.apply(x, w, ids), want)
        assert err < TOL[act], (fmt, symmetric, chunk, overlap, err)
    replay_moe(t.apply, ref.apply, x, w, ids, 16, TOL[act], times=2)     # overlapped decodes, side stream
