#!/bin/bash
# lead R127 (thirty-eighth pass; timeout_s 600, whichever card comes): vLLM 0.32's own Triton fused MoE
# (bench/vllm_moe_peer.py, its sources carried in .whl/vllm-src) beside the oracle's FP8 MoE in one process, same
# routings, graph replay, weights from HBM: its GPU self-check, then DeepSeek-R1 and Qwen3-30B-A3B at 1, 16, 256
# and 4096 tokens with 5 interleaved rounds (oracle, vllm-triton, the BF16 mode).
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  timeout 90 python3 bench/vllm_moe_peer.py --self-check > "$OUTDIR/peer-check.log" 2>&1
  echo "peer self-check rc $?"; cat "$OUTDIR/peer-check.log" | tail -7 | cut -c1-300
  cd bench
  round_peers "$OUTDIR" r127ds "${R127_DS_S:-280}" --only moe --shapes deepseek-r1 \
    --moe-m deepseek-r1="${R127_DS_M:-1,16,256,4096}" --moe-rounds 5 --moe-launches
  left=$(( 575 - SECONDS )); [ "$left" -gt 60 ] || exit 0
  round_peers "$OUTDIR" r127qw "$left" --only moe --shapes qwen3-30b-a3b \
    --moe-m qwen3-30b-a3b="${R127_QW_M:-1,16,256,4096}" --moe-rounds 5 --moe-launches )
