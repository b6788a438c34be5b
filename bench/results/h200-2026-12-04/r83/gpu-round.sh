#!/bin/bash
# lead R83 (twenty-first pass), one call: XQ 2 with the activations double-buffered (XDB), XT 8 chunks and an
# 8192-value rounding tile: the GPU tests (every XQ 2 form against oracle-emulation, capture / replay, the dense REGA
# regressions), then Qwen3-235B-A22B at M=1 beside seven XQ 2 variants (configs/moe_w4a4_xq2_r83.json), each
# candidate's launches and their device times (--moe-launches).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r83; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
[ -n "$PROBE_ONLY" ] || timeout 240 python3 -m pytest -q -n 8 plugins/triton/tests/test_triton_moe_w4a4.py \
  plugins/triton/tests/test_triton_rega_nvfp4.py plugins/triton/tests/test_triton_gpu.py -k "xq or act_round or rega" \
  > $W/tests.log 2>&1
echo "tests rc $?"; grep -E "passed|failed|Error|assert" $W/tests.log | tail -12 | cut -c1-300
tar czf $O/r83.tgz -C $W .
cd bench
timeout 300 python3 bench_peers.py --only moe --shapes qwen3-235b-a22b-nvfp4 --m 1 --moe-repeat 3 --moe-launches \
  --moe-variants configs/moe_w4a4_xq2_r83.json --json $W/moe_r83.json > $W/moe_r83.log 2>&1
echo "bench rc $?"; grep -vE "^\s*$" $W/moe_r83.log | tail -40 | cut -c1-200
tar czf $O/r83.tgz -C $W .
