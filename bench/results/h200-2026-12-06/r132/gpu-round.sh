#!/bin/bash
# lead R132 (for the fortieth pass; timeout_s 600, any card, an H200 first): DeepSeek-R1 at 16 / 256 / 4096 tokens
# with configs/moe_r132.json beside vllm-triton and vllm-triton-bf16, 5 interleaved rounds (on an H200 this times
# the H100's thirty-ninth-pass entries there and the rules they replaced at 4096; on an H100, the 16-token forms).
# Then, on an H200 only, DeepSeek-R1 and Qwen3-30B at one token beside vllm-triton in the time left.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  local total=${R132_TOTAL:-560}
  round_peers "$OUTDIR" r132ds $(( total * 60 / 100 )) --only moe --shapes deepseek-r1 \
    --moe-m deepseek-r1=16,256,4096 --moe-variants configs/moe_r132.json --moe-rounds 5 --moe-launches
  round_on_h200 || return 0
  round_rest "$OUTDIR" r132lo "$total" --only moe --shapes deepseek-r1 qwen3-30b-a3b \
    --moe-m deepseek-r1=1 qwen3-30b-a3b=1,16 --moe-rounds 5 --moe-launches
}
round_run rounds
