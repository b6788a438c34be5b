#!/bin/bash
# lead R62 (eighteenth pass), one call: the two-warpgroup WS configuration with WPF 3 / 4 and MW 0 (R61's INT4
# entries) on all three formats and the three large shapes at 256 rows (configs/ws_r62.json, three interleaved
# repeats beside each shipped entry).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r62; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
cd bench
timeout 400 python3 rega_probe.py --m 256 --cfgs configs/ws_r62.json --fmts int4 mxfp4 nvfp4 --repeat 3 \
  --shapes 8192x8192 7168x18432 36864x7168 --budget-s 380 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^[0-9]|medians|    " $W/probe256.log | grep -v diagnose | cut -c1-200
tar czf $O/r62.tgz -C $W .
