#!/bin/bash
# lead R65 (eighteenth pass), one short call: w4_ws's time against K (r65/ws_k_scan.py).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r65; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
cd bench
timeout 90 python3 ../bench/results/h200-2026-12-03/r65/ws_k_scan.py > $W/kscan.log 2>&1
echo "rc $?"; tail -6 $W/kscan.log | cut -c1-200
tar czf $O/r65.tgz -C $W .
