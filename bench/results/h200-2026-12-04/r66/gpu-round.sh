#!/bin/bash
# lead R66 (nineteenth pass), one call: the w4_ws GPU tests (XTMA, the activations by TMA from the MMA warps, added),
# then XTMA against the shipped 256-row entries (configs/ws_r66.json), then w4_ws's time against K (r66/ws_k_scan.py).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r66; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
python3 -c "import triton, inspect; from triton.experimental.gluon.language.nvidia.hopper import tma, mbarrier; print(triton.__version__, inspect.signature(tma.async_copy_global_to_shared), inspect.signature(mbarrier.expect))" 2>&1 | tail -2
timeout 200 python3 -m pytest -q -x plugins/triton/tests/test_triton_gpu.py -k "ws" > $W/tests.log 2>&1
echo "tests rc $?"; grep -E "passed|failed|Error|error" $W/tests.log | tail -6 | cut -c1-300
tar czf $O/r66.tgz -C $W .
cd bench
timeout 260 python3 rega_probe.py --m 256 --cfgs configs/ws_r66.json --fmts int4 mxfp4 nvfp4 --repeat 3 \
  --shapes 8192x8192 7168x18432 36864x7168 --budget-s 250 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^[0-9]|medians|    " $W/probe256.log | grep -v diagnose | cut -c1-220 | tail -40
tar czf $O/r66.tgz -C $W .
timeout 100 python3 ../bench/results/h200-2026-12-04/r66/ws_k_scan.py int4 int4x > $W/kscan.log 2>&1
echo "kscan rc $?"; cat $W/kscan.log | cut -c1-200 | tail -18
tar czf $O/r66.tgz -C $W .
