#!/bin/bash
# lead R69 (nineteenth pass), one call: which side of w4_ws sets the pace at 256 rows. r69/ablate.patch (applied
# here only) drops, with WS_ABLATE 1, the decode (compute and shared stores) and with 2 the wgmma; the shipped
# INT4 / MXFP4 8192x8192 entries and INT4's with XTMA 1 timed in each mode (configs/ws_r69.json).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r69; mkdir -p $W
source scripts/device-env "$O" || exit 1
export PYTHONUNBUFFERED=1
git apply bench/results/h200-2026-12-04/r69/ablate.patch || exit 1
cd bench
for a in 0 1 2; do
  WS_ABLATE=$a TRITON_CACHE_DIR=/tmp/tc-abl$a timeout 150 python3 rega_probe.py --m 256 --cfgs configs/ws_r69.json \
    --fmts int4 mxfp4 --repeat 3 --shapes 8192x8192 --budget-s 140 > $W/probe-abl$a.log 2>&1
  echo "ablate $a rc $?"; grep -E "^    " $W/probe-abl$a.log | cut -c1-150
  tar czf $O/r69.tgz -C $W .
done
