#!/bin/bash
# lead R131 (thirty-ninth pass; the session's last call, timeout_s 480, any card). On an H200: DeepSeek-R1 at 1 / 16 /
# 256 / 4096 tokens and Qwen3-30B-A3B FP8 at 1 / 16 beside vLLM's own Triton MoE (the #25 cells only that card
# settles), 5 interleaved rounds. On another card: the 4-bit rows at 4096 tokens that R127 did not set beside
# vLLM's BF16 Triton MoE (Qwen3-235B NVFP4, Qwen3-30B INT4 with and without zero points, gpt-oss-120b), 3 rounds.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  local total=${R131_TOTAL:-400}
  if round_on_h200; then
    round_peers "$OUTDIR" r131ds $(( total * 60 / 100 )) --only moe --shapes deepseek-r1 \
      --moe-m deepseek-r1=1,16,256,4096 --moe-rounds 5 --moe-launches
    round_rest "$OUTDIR" r131qw "$total" --only moe --shapes qwen3-30b-a3b --moe-m qwen3-30b-a3b=1,16 \
      --moe-rounds 5 --moe-launches
  else
    round_peers "$OUTDIR" r131w4 $(( total - SECONDS - 10 )) --only moe --shapes qwen3-235b-a22b-nvfp4 \
      qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp gpt-oss-120b --moe-m qwen3-235b-a22b-nvfp4=4096 \
      qwen3-30b-a3b-int4=4096 qwen3-30b-a3b-int4-zp=4096 gpt-oss-120b=4096 --moe-rounds 3 --moe-launches
  fi
}
round_run rounds
