#!/bin/bash
# (the split tail is not in the code: apply r81/split-tail.patch, against 0fe0b4d, to run this)
# lead R81 (twenty-first pass), one call: w4_ws's split tail (SPLIT / TAIL: the grid's last tiles split over K, their
# fp32 parts summed by the last program to arrive): its GPU tests and the WS regressions (every form and format
# against oracle-emulation, capture / replay, the public call on the 8192x8192 entries), then the shipped 4-bit
# 256-row entries on 36864x7168 and 7168x18432 beside split-tail variants and BF16 (configs/ws_r81.json).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r81; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
[ -n "$PROBE_ONLY" ] || timeout 200 python3 -m pytest -q -x -n 8 plugins/triton/tests/test_triton_gpu.py \
  -k "ws_split_tail or ws_kernel_matches or tuned_ws_entry" > $W/tests.log 2>&1
echo "tests rc $?"; grep -E "passed|failed|Error|assert" $W/tests.log | tail -8 | cut -c1-300
tar czf $O/r81.tgz -C $W .
cd bench
timeout 330 python3 rega_probe.py --m 256 --cfgs configs/ws_r81.json --fmts nvfp4 mxfp4 int4 --repeat 3 \
  --shapes 36864x7168 7168x18432 --budget-s 320 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^    [sB]|^[0-9]" $W/probe256.log | cut -c1-120
tar czf $O/r81.tgz -C $W .
