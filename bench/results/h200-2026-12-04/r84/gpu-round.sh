#!/bin/bash
# lead R84 (twenty-first pass), one call: XQ 2's FC2 input rounding (the one program with loads independent of
# the ids, RBLOCK 2048-8192; or the activation over many programs then nvfp4_round_kernel, RSEP 1): the GPU tests
# (XQ 2 forms against oracle-emulation, capture / replay, the dense REGA regressions), then Qwen3-235B-A22B at M=1
# beside seven XQ 2 variants (configs/moe_w4a4_xq2_r84.json) with each candidate's kernels (--moe-launches).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r84; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
[ -n "$PROBE_ONLY" ] || timeout 240 python3 -m pytest -q -n 8 plugins/triton/tests/test_triton_moe_w4a4.py \
  plugins/triton/tests/test_triton_rega_nvfp4.py plugins/triton/tests/test_triton_gpu.py -k "xq or act_round or rega" \
  > $W/tests.log 2>&1
echo "tests rc $?"; grep -E "passed|failed|Error|assert" $W/tests.log | tail -12 | cut -c1-300
tar czf $O/r84.tgz -C $W .
cd bench
timeout 300 python3 bench_peers.py --only moe --shapes qwen3-235b-a22b-nvfp4 --m 1 --moe-repeat 3 --moe-launches \
  --moe-variants configs/moe_w4a4_xq2_r84.json --json $W/moe_r84.json > $W/moe_r84.log 2>&1
echo "bench rc $?"; grep -vE "^\s*$" $W/moe_r84.log | tail -40 | cut -c1-200
tar czf $O/r84.tgz -C $W .
