#!/bin/bash
# lead R129 (thirty-ninth pass; timeout_s 600, any card): R128 (H100) put 64-row blocks x 128 weight rows, 4 warps,
# 3 stages, N_FAST ahead of vLLM's own Triton MoE on DeepSeek-R1 at 4096 tokens and left 256 behind. Here
# configs/moe_r129.json beside both vLLM peers, 7 interleaved rounds; then, on an H200 only, DeepSeek-R1 and
# Qwen3-30B at 1 and 16 tokens beside vllm-triton in the time left.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  local total=${R129_TOTAL:-560}
  round_peers "$OUTDIR" r129ds $(( total * 50 / 100 )) --only moe --shapes deepseek-r1 \
    --moe-m deepseek-r1=256,4096 --moe-variants configs/moe_r129.json --moe-rounds 7 --moe-launches
  round_on_h200 || return 0
  round_rest "$OUTDIR" r129lo "$total" --only moe --shapes deepseek-r1 qwen3-30b-a3b \
    --moe-m deepseek-r1=1,16 qwen3-30b-a3b=1,16 --moe-rounds 5 --moe-launches
}
round_run rounds
