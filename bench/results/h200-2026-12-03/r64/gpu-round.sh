#!/bin/bash
# lead R64 (eighteenth pass; ran with r64/ws_split.patch applied, not kept), one call: w4_ws's GPU tests with split-K (SPLIT_K 2 / 4, capture and replay), then
# split-K WS variants on 2048x4096 at 256 rows beside the shape rule's DEQUANT_MM (configs/ws_r64.json, 3 repeats).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r64; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rs -k "ws" plugins/triton/tests/test_triton_gpu.py \
  plugins/triton/tests/test_triton_ws.py > $W/pytest-ws.log 2>&1
echo "pytest rc $?"; grep -v "^\s*$" $W/pytest-ws.log | tail -8 | cut -c1-300
tar czf $O/r64.tgz -C $W .
cd bench
timeout 110 python3 rega_probe.py --m 256 --cfgs configs/ws_r64.json --fmts int4 mxfp4 nvfp4 --repeat 3 \
  --shapes 2048x4096 --budget-s 100 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^[0-9]|medians|    " $W/probe256.log | grep -v diagnose | cut -c1-200
tar czf $O/r64.tgz -C $W .
