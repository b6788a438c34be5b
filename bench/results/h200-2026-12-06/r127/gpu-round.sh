#!/bin/bash
# lead R127 (thirty-eighth pass; timeout_s 600, whichever card comes): vLLM 0.32's own Triton fused MoE
# (bench/vllm_moe_peer.py, its sources carried in .whl/vllm-src) beside the oracle's MoE in one process, same
# routings, graph replay, weights from HBM: its GPU self-check, then DeepSeek-R1 at 1, 16, 256 and 4096 tokens
# (vllm-triton FP8 and vllm-triton-bf16, 5 interleaved rounds), then Qwen3-30B-A3B FP8 and gpt-oss-20b MXFP4
# (beside vllm-triton-bf16, issue #25's MXFP4 baseline) at 1, 16, 256 and 4096 tokens, 3 rounds, in the time left.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  timeout 90 python3 bench/vllm_moe_peer.py --self-check > "$OUTDIR/peer-check.log" 2>&1
  echo "peer self-check rc $?"; tail -11 "$OUTDIR/peer-check.log" | cut -c1-300
  cd bench
  total=${R127_TOTAL:-580}          # the seconds the call may run (less where the session's device time is short)
  round_peers "$OUTDIR" r127ds $(( total * 45 / 100 )) --only moe --shapes deepseek-r1 \
    --moe-m deepseek-r1="${R127_DS_M:-1,16,256,4096}" --moe-rounds 5 --moe-launches
  left=$(( total - SECONDS )); [ "$left" -gt 60 ] || exit 0
  round_peers "$OUTDIR" r127qw "$left" --only moe --shapes qwen3-30b-a3b gpt-oss-20b --budget-s $(( left - 45 )) \
    --moe-m qwen3-30b-a3b="${R127_QW_M:-1,16,256,4096}" gpt-oss-20b="${R127_GO_M:-1,16,256,4096}" --moe-rounds 3 )
