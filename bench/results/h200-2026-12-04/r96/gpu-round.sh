#!/bin/bash
# lead R96a (twenty-fourth pass; prepared in session 24, which had no device), one call (~550 s): the WS MoE GPU tests
# (MXFP4 and INT4 experts; WT, the words by TMA into their own ring; WS_ACT, swigluoai in FC1's epilogue), then
# gpt-oss at 2048 / 4096 tokens with and without them (configs/moe_ws_r96.json) beside the shipped DEQUANT_MM
# entries and this MoE's BF16 mode. The dense w4_ws GPU test (WT) runs in R96b's gpu-check; R95's replay diagnosis
# (r95/ws_replay_diag.py) is left to the GPU test's replay checks.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r96; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
  ( cd plugins/triton/tests
    timeout 270 python3 -m pytest -q -p no:cacheprovider -n 8 test_triton_moe_ws.py > $W/pytest-ws.log 2>&1
    echo "pytest rc $?"; grep -E "Error|passed|failed" $W/pytest-ws.log | tail -10 | cut -c1-300 )
  cd bench
  timeout 240 python3 bench_peers.py --only moe --shapes gpt-oss-20b gpt-oss-120b \
    --moe-m gpt-oss-20b=2048,4096 gpt-oss-120b=4096 --moe-launches \
    --moe-variants configs/moe_ws_r96.json --json $W/moe_r96.json > $W/moe_r96.log 2>&1
  echo "bench rc $?"; grep -E "M=" $W/moe_r96.log | cut -c1-200 )
tar czf $O/r96.tgz -C $W .
