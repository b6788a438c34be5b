#!/bin/bash
# lead R70 (nineteenth pass), one call: the one-warpgroup 256-row w4_ws form with TMA activations
# (configs/ws_r70.json), normally and (r69/ablate.patch, applied here only) without its wgmma (WS_ABLATE 2: the
# decode side alone) and without its decode (1).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r70; mkdir -p $W
source scripts/device-env "$O" || exit 1
export PYTHONUNBUFFERED=1
git apply bench/results/h200-2026-12-04/r69/ablate.patch || exit 1
cd bench
for a in 0 2 1; do
  WS_ABLATE=$a TRITON_CACHE_DIR=/tmp/tc-abl$a timeout 170 python3 rega_probe.py --m 256 --cfgs configs/ws_r70.json \
    --fmts mxfp4 nvfp4 int4 --repeat 3 --shapes 8192x8192 --budget-s 160 > $W/probe-abl$a.log 2>&1
  echo "ablate $a rc $?"; grep -E "^    [sBw]" $W/probe-abl$a.log | sed -e "s/num_warps 4 BM 256 //; s/ MAXNREG 168//; s/ XCP 0//" | cut -c1-110
  tar czf $O/r70.tgz -C $W .
done
