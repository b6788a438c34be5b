#!/bin/bash
# lead R55 (seventeenth pass), one call: w4_ws with the activations copied by cp.async ahead (XCP):
# warp_specialize API, its GPU test, then M=256 on the four shapes beside BF16 and the shipped entry
# (configs/ws_r55.json). Every step under a timeout: a ring that deadlocks must not take the call.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r55; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
python3 -c "import inspect, triton; from triton.experimental.gluon import language as gl; print(triton.__version__, inspect.signature(gl.warp_specialize))"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rs -x -k "ws_kernel" plugins/triton/tests/test_triton_gpu.py \
  > $W/pytest-ws.log 2>&1
echo "pytest rc $?"; grep -v "^\s*$" $W/pytest-ws.log | tail -25 | cut -c1-300
cd bench
timeout 300 python3 rega_probe.py --m 256 --cfgs configs/ws_r55.json --fmts int4 mxfp4 nvfp4 \
  --shapes 8192x8192 7168x18432 36864x7168 --budget-s 240 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -v "^    diagnose" $W/probe256.log | cut -c1-230
tar czf $O/r55.tgz -C $W .
