#!/bin/bash
# lead R138 (for the forty-first pass; timeout_s 600, any card, an H200 first). On an H200: the four tailed rows at
# 4096 tokens (Qwen3-235B NVFP4, Qwen3-30B INT4 with and without zero points, gpt-oss-20b), the shipped WS_TAIL 32
# beside its 64-pair form (configs/moe_r138.json) and vLLM's BF16 Triton MoE, 5 interleaved rounds (cell (d) on the
# card the issue names); then R132's DeepSeek-R1 rounds (16 / 256 / 4096 tokens, configs/moe_r132.json, beside
# vLLM's kernels) in the time left. On another card: scripts/gpu-check with the benchmarks off (round_gpu_check).
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  local total=${R138_TOTAL:-560}
  if ! round_on_h200; then
    ( cd .. && round_gpu_check "$OUTDIR" 12 "$total" )
    return 0
  fi
  round_peers "$OUTDIR" r138w4 $(( total * 45 / 100 )) --only moe --shapes qwen3-235b-a22b-nvfp4 \
    qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp gpt-oss-20b --moe-m qwen3-235b-a22b-nvfp4=4096 \
    qwen3-30b-a3b-int4=4096 qwen3-30b-a3b-int4-zp=4096 gpt-oss-20b=4096 --moe-variants configs/moe_r138.json \
    --moe-rounds 5 --moe-launches
  round_rest "$OUTDIR" r138ds "$total" --only moe --shapes deepseek-r1 --moe-m deepseek-r1=16,256,4096 \
    --moe-variants configs/moe_r132.json --moe-rounds 5 --moe-launches
}
round_run rounds
