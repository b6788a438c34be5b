#!/bin/bash
# lead R76 (twentieth pass), one call: w4_ws's stream-K (SK, its K-step cursors replacing R74's divisions; the form
# of r77/stream-k.patch but with each tile's finish inside the MMA warps' K loop) GPU tests (numerics against
# oracle-emulation, bits on a second call, counters left at zero, capture / replay) beside the existing WS test,
# then SK 132 on the nine 256-row WS cells and the 2048x4096 cells (configs/ws_r76.json), graph replay, weights
# from HBM, BF16 in the same process.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r76; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -x -n 6 plugins/triton/tests/test_triton_gpu.py -k "stream_k or ws_kernel_matches" \
  > $W/tests.log 2>&1
echo "tests rc $?"; grep -E "passed|failed|Error|assert" $W/tests.log | tail -12 | cut -c1-300
tar czf $O/r76.tgz -C $W .
cd bench
timeout 350 python3 rega_probe.py --m 256 --cfgs configs/ws_r76.json --fmts int4 mxfp4 nvfp4 --repeat 3 \
  --shapes 2048x4096 36864x7168 7168x18432 8192x8192 --budget-s 330 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^    [sBw]|^  ws|^[0-9]" $W/probe256.log | sed -e "s/num_warps 4 BM 256 //" | cut -c1-140
tar czf $O/r76.tgz -C $W .
