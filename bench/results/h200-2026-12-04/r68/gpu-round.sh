#!/bin/bash
# lead R68 (nineteenth pass), one call: the w4_ws GPU tests (PP and XTMA 2 added), then PP against the shipped
# 256-row entries (configs/ws_r68.json).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r68; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -x plugins/triton/tests/test_triton_gpu.py -k "ws" > $W/tests.log 2>&1
echo "tests rc $?"; grep -E "passed|failed|Error|error" $W/tests.log | tail -6 | cut -c1-300
tar czf $O/r68.tgz -C $W .
cd bench
timeout 330 python3 rega_probe.py --m 256 --cfgs configs/ws_r68.json --fmts int4 mxfp4 nvfp4 --repeat 3 \
  --shapes 8192x8192 7168x18432 36864x7168 --budget-s 320 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "medians|    |FAIL" $W/probe256.log | grep -v diagnose | sed -e "s/num_warps 8 BM 128 //; s/ MAXNREG [0-9]*//" | cut -c1-200 | tail -45
tar czf $O/r68.tgz -C $W .
