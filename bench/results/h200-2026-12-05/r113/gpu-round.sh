#!/bin/bash
# lead R113 (written in the thirty-fifth pass for the next session's first call; timeout_s 600, whichever card comes).
# "a" (an H200, ~420 s): every #25 4096-token 4-bit row (Qwen3-235B dynamic and static, Qwen3-30B INT4 / INT4-zp,
#   gpt-oss-20b / 120b) beside this MoE's BF16 mode, configs/moe_r113.json ('stream4096' on two rows), --moe-rounds 7:
#   the H200 cells untimed since the thirty-second pass (R108a); then DeepSeek-R1 FP8 at 1 and 16 tokens, 7 rounds.
# "g" (any other card, ~560 s): scripts/gpu-check with the thirty-fifth pass's tuned-table siblings on (an H100 SXM
#   runs the H200's entries; R112 ran only the tuned-table, test_triton_gpu.py and device-aware MoE tests so).
# "auto": "a" on an H200, "g" elsewhere.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  round_checked "$OUTDIR" "$1" && exit 0
  cd bench
  round_moe_4096 "$OUTDIR" r113 moe_r113.json 7 "${R113_TIMEOUT:-330}" qwen3-235b-a22b-nvfp4 \
    qwen3-235b-a22b-nvfp4-static qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp gpt-oss-20b gpt-oss-120b
  TRITON_CACHE_DIR=/tmp/tc-a timeout "${R113_DS_TIMEOUT:-150}" python3 bench_peers.py --only moe --shapes deepseek-r1 \
    --moe-m deepseek-r1=1,16 --moe-rounds 7 --json "$OUTDIR/r113ds.json" > "$OUTDIR/r113ds.log" 2>&1
  echo "r113ds rc $?"; grep -E "M=|interleaved" "$OUTDIR/r113ds.log" | cut -c1-400 )
