#!/bin/bash
# lead R56 (seventeenth pass), one call: w4_ws's GPU test (with 128-wide K tiles), then M=256 on three shapes with
# three interleaved repeats of the shipped entry and each variant (configs/ws_r56.json): the entry rule's evidence.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r56; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rs -x -k "ws_kernel" plugins/triton/tests/test_triton_gpu.py \
  > $W/pytest-ws.log 2>&1
echo "pytest rc $?"; grep -v "^\s*$" $W/pytest-ws.log | tail -12 | cut -c1-300
cd bench
timeout 330 python3 rega_probe.py --m 256 --cfgs configs/ws_r56.json --fmts int4 mxfp4 nvfp4 --repeat 3 \
  --shapes 8192x8192 7168x18432 36864x7168 --budget-s 300 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^[0-9]|medians|    " $W/probe256.log | grep -v diagnose | cut -c1-200
tar czf $O/r56.tgz -C $W .
