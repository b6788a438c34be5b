#!/bin/bash
# lead R61 (eighteenth pass), one call: w4_ws's GPU tests with the new keys (WPF, MW, BM 256, DW 16) and the
# new entries' whole-layer test, then WPF / MW variants at 256 rows (configs/ws_r61.json, three interleaved
# repeats), then the public call on the 256-row entries.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r61; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rs -k "ws" plugins/triton/tests/test_triton_gpu.py \
  plugins/triton/tests/test_triton_ws.py > $W/pytest-ws.log 2>&1
echo "pytest rc $?"; grep -v "^\s*$" $W/pytest-ws.log | tail -8 | cut -c1-300
cd bench
timeout 250 python3 rega_probe.py --m 256 --cfgs configs/ws_r61.json --fmts int4 mxfp4 nvfp4 --repeat 3 \
  --shapes 8192x8192 7168x18432 --budget-s 240 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^[0-9]|medians|    " $W/probe256.log | grep -v diagnose | cut -c1-200
tar czf $O/r61.tgz -C $W .
timeout 100 python3 rega_probe.py --m 256 --public --fmts int4 mxfp4 nvfp4 --shapes 8192x8192 7168x18432 36864x7168 \
  > $W/public256.log 2>&1
echo "public rc $?"; cut -c1-220 $W/public256.log | tail -12
tar czf $O/r61.tgz -C $W .
