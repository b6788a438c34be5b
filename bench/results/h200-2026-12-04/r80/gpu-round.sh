#!/bin/bash
# (the scale-once load is not in the code: apply r80/scale-once.patch, against 71cc038, to run this; PROBE_ONLY=1
# re-ran the probe alone on the warm machine after the first probe stopped on a config file without cells)
# lead R80 (twentieth pass), one call: w4_ws loading each E2M1 scale once a group and repeating it over the group's
# word rows in registers (NVFP4's decode loop 222 -> 195 instructions, sm_90 compile here): the WS GPU tests (every
# form and format against oracle-emulation, capture / replay, the public call on the 8192x8192 entries), then the
# shipped MXFP4 / NVFP4 256-row entries on the three large shapes against BF16 (configs/ws_r80.json: no variants).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r80; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
[ -n "$PROBE_ONLY" ] || timeout 130 python3 -m pytest -q -x -n 6 plugins/triton/tests/test_triton_gpu.py -k "ws_kernel_matches or tuned_ws_entry" \
  > $W/tests.log 2>&1
echo "tests rc $?"; grep -E "passed|failed|Error|assert" $W/tests.log | tail -8 | cut -c1-300
tar czf $O/r80.tgz -C $W .
cd bench
timeout 200 python3 rega_probe.py --m 256 --cfgs configs/ws_r80.json --fmts mxfp4 nvfp4 --repeat 3 \
  --shapes 7168x18432 36864x7168 8192x8192 --budget-s 190 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^    [sB]|^[0-9]" $W/probe256.log | cut -c1-110
tar czf $O/r80.tgz -C $W .
