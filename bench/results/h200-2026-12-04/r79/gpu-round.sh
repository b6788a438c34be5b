#!/bin/bash
# (FT is not in the code: apply r79/factor-table.patch, against 5e979a0, to run this)
# lead R79 (twentieth pass), one call: w4_ws's NVFP4 factor table (FT 1): its GPU test (the same bits as FT 0,
# capture / replay), then FT on the three shipped NVFP4 256-row entries (configs/ws_r79.json), five repeats.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r79; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q -x plugins/triton/tests/test_triton_gpu.py -k "factor_table" > $W/tests.log 2>&1
echo "tests rc $?"; grep -E "passed|failed|Error|assert" $W/tests.log | tail -8 | cut -c1-300
tar czf $O/r79.tgz -C $W .
cd bench
timeout 200 python3 rega_probe.py --m 256 --cfgs configs/ws_r79.json --fmts nvfp4 --repeat 5 \
  --shapes 8192x8192 7168x18432 36864x7168 --budget-s 185 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^    [sBw]|^[0-9]" $W/probe256.log | sed -e "s/num_warps 4 BM 256 //" | cut -c1-150
tar czf $O/r79.tgz -C $W .
