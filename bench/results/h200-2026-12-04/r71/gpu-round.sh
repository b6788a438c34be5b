#!/bin/bash
# lead R71 (nineteenth pass), one call: the w4_ws GPU tests (DP added), then DP against the shipped 256-row entries
# on 8192x8192 (configs/ws_r71.json), normally and with r69/ablate.patch's WS_ABLATE 2 (the decode side alone).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r71; mkdir -p $W
source scripts/device-env "$O" || exit 1
export PYTHONUNBUFFERED=1
TRITON_CACHE_DIR=/tmp/tc-lead timeout 200 python3 -m pytest -q -x plugins/triton/tests/test_triton_gpu.py -k "ws" \
  > $W/tests.log 2>&1
echo "tests rc $?"; grep -E "passed|failed|Error|error" $W/tests.log | tail -6 | cut -c1-300
tar czf $O/r71.tgz -C $W .
git apply bench/results/h200-2026-12-04/r69/ablate.patch || exit 1
cd bench
for a in 0 2; do
  WS_ABLATE=$a TRITON_CACHE_DIR=/tmp/tc-abl$a timeout 150 python3 rega_probe.py --m 256 --cfgs configs/ws_r71.json \
    --fmts mxfp4 nvfp4 int4 --repeat 3 --shapes 8192x8192 --budget-s 140 > $W/probe-abl$a.log 2>&1
  echo "ablate $a rc $?"; grep -E "^    [sBw]" $W/probe-abl$a.log | sed -e "s/num_warps 4 BM 256 //; s/ MAXNREG 168//; s/ XCP 0//" | cut -c1-110
  tar czf $O/r71.tgz -C $W .
done
