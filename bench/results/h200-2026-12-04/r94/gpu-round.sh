#!/bin/bash
# lead R94 (twenty-third pass), one call: WS (moe_ws: w4_ws's warp-specialized MoE mode) at 4096 tokens on
# gpt-oss-20b / gpt-oss-120b / Qwen3-235B-A22B NVFP4 W4A4 and at 2048 on gpt-oss-20b, beside the shipped DEQUANT_MM
# entries, this MoE's BF16 mode and the HBM limit (bench_peers variants, vs_shipped: the outputs' difference), then
# the WS GPU tests against oracle-emulation.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r94; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
  cd bench
  timeout 330 python3 bench_peers.py --only moe --shapes gpt-oss-20b gpt-oss-120b qwen3-235b-a22b-nvfp4 \
    --moe-m gpt-oss-20b=2048,4096 gpt-oss-120b=4096 qwen3-235b-a22b-nvfp4=4096 --moe-launches \
    --moe-variants configs/moe_ws_r94.json --json $W/moe_r94.json > $W/moe_r94.log 2>&1
  echo "bench rc $?"; grep -E "M=" $W/moe_r94.log | cut -c1-200 )
tar czf $O/r94.tgz -C $W .
( source scripts/device-env "$O" || exit 1
  export TRITON_CACHE_DIR=/tmp/tc-lead
  cd plugins/triton/tests
  timeout 170 python3 -m pytest -q -p no:cacheprovider -n 3 test_triton_moe_ws.py -m gpu > $W/pytest-ws.log 2>&1
  echo "pytest rc $?"; tail -15 $W/pytest-ws.log | cut -c1-300 )
tar czf $O/r94.tgz -C $W .
