#!/bin/bash
# lead R50 (sixteenth pass), one call: FP8 W8A8 per channel M=16 swap tiles 128 weight rows wide (8 / 4 warps,
# split 2-4) on 7168x18432 and 8192x8192 beside their entries and gemlite pinned (configs/lead_r50_fp8.json).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
cd bench
timeout 150 python3 bench_peers.py --only dense --modes w8a8_fp8_channel --m 16 --shapes 7168x18432 8192x8192 --peers gemlite \
   --lean --gemlite-load-config configs/gemlite_fp8_channel_h200.json --gemlite-quantizer-rows 1 --gemlite-tune-ms 5 \
   --dense-variants configs/lead_r50_fp8.json --dense-warm-s 0.15 --dense-repeat 3 --json $O/r50_fp8.json > $O/r50_fp8.txt 2>&1
echo "rc $?"; grep -E "repeats|M=|rror" $O/r50_fp8.txt | sed 's/; SM MHz.*//' | cut -c1-200
