#!/bin/bash
# lead R128 (for the thirty-ninth pass; timeout_s 600, any card, an H200 first): R127 (H100) timed vLLM's own Triton
# MoE ahead of ours on DeepSeek-R1 at 256 and 4096 tokens. Here the aligned path's tiles in vLLM's direction
# (configs/moe_r128.json: 128 weight rows a program, 4 warps, 3 stages; 64-row token blocks) beside the shipped
# choice, vllm-triton and vllm-triton-bf16, 5 interleaved rounds; then, on an H200 only, DeepSeek-R1 and Qwen3-30B
# at 1 and 16 tokens beside vllm-triton (the #25 cells that card settles) in the time left.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  cd bench
  total=${R128_TOTAL:-580}
  round_peers "$OUTDIR" r128ds $(( total * 55 / 100 )) --only moe --shapes deepseek-r1 \
    --moe-m deepseek-r1=256,4096 --moe-variants configs/moe_r128.json --moe-rounds 5 --moe-launches
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in *H200*) ;; *) exit 0 ;; esac
  left=$(( total - SECONDS )); [ "$left" -gt 60 ] || exit 0
  round_peers "$OUTDIR" r128lo "$left" --only moe --shapes deepseek-r1 qwen3-30b-a3b --budget-s $(( left - 45 )) \
    --moe-m deepseek-r1=1,16 qwen3-30b-a3b=1,16 --moe-rounds 5 --moe-launches )
