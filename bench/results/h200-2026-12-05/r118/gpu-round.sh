#!/bin/bash
# lead R118 (thirty-sixth pass, the session's last call; timeout_s 400, whichever card comes): SCALE_PAIR (the fused
# MoE's W8A8 K-tile pairs take their scales from the iteration before, two tiles ahead; moe_gemm_kernel) after
# R117's Nsight Compute samples put DeepSeek-R1's one-token K loops on those loads' scoreboard 45% (FC1) / 76% (FC2).
# 1. bench_peers.py: DeepSeek-R1 at 1 and 16 tokens, the shipped entries beside SCALE_PAIR on both GEMMs at 3 / 2
#    stages, on FC2 alone, and K_PAIR alone at 3 stages (configs/moe_r118.json), 5 interleaved rounds, each
#    launch's device time, each variant's output against the shipped one's.
# 2. In the time left, GPU tests: the DeepSeek-R1 M=1 entry and the aligned tiles with K_PAIR + SCALE_PAIR against
#    emulation, replayed.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  cd bench
  round_peers "$OUTDIR" r118 "${R118_BENCH_S:-210}" --only moe --shapes deepseek-r1 --moe-m deepseek-r1=1,16 \
    --moe-variants configs/moe_r118.json --moe-rounds 5 --moe-launches
  cd ..
  round_pytest "$OUTDIR" pair "${R118_TEST_S:-90}" plugins/triton/tests/test_triton_moe_fp8_swap.py "scale_pair" )
