#!/bin/bash
# lead R115 (thirty-sixth pass, the session's last call; timeout_s 600, whichever card comes).
# On an H200: R113's "a" (the #25 4096-token rows beside the BF16 mode, DeepSeek-R1 at 1 and 16 tokens).
# On any other card: the eager host cost with the tuned-table siblings on (an H100 SXM now runs the H200's entries,
#   whose eager paths R112 did not time): bench/host_cost.py's dense modes at one row (target under 30 us a call)
#   and the fused MoE of every #25 model at one token (target: eager within 40 us of graph replay).
set -o pipefail
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) exec bash bench/results/h200-2026-12-05/r113/gpu-round.sh a ;;
esac
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  cd bench
  TRITON_CACHE_DIR=/tmp/tc-h timeout "${R115_DENSE_S:-150}" python3 host_cost.py --calls 300 \
    --json "$OUTDIR/host-dense.json" > "$OUTDIR/host-dense.log" 2>&1
  echo "host dense rc $?"; tail -30 "$OUTDIR/host-dense.log" | cut -c1-220
  TRITON_CACHE_DIR=/tmp/tc-h timeout "${R115_MOE_S:-330}" python3 host_cost.py --moe qwen3-30b-a3b deepseek-r1 \
    gpt-oss-20b gpt-oss-120b qwen3-235b-a22b-nvfp4 qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp \
    --json "$OUTDIR/host-moe.json" > "$OUTDIR/host-moe.log" 2>&1
  echo "host moe rc $?"; tail -40 "$OUTDIR/host-moe.log" | cut -c1-260 )
