#!/bin/bash
# lead R97a (twenty-fifth pass), one call (~520 s): the WS GPU tests on c25c955 (the DP 1 XTMA fix that R96a found
# missing), then R96c's first half: WS on the INT4 experts of Qwen3-30B-A3B at 2048 / 4096 tokens beside the shipped
# DEQUANT_MM entries and the BF16 mode.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r97; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
  ( cd plugins/triton/tests
    timeout 230 python3 -m pytest -q -p no:cacheprovider -n 8 test_triton_moe_ws.py test_triton_ws.py test_triton_gpu.py -k "ws or WS" > $W/pytest-ws.log 2>&1
    echo "pytest rc $?"; grep -E "Error|passed|failed" $W/pytest-ws.log | tail -12 | cut -c1-300 )
  tar czf $O/r97.tgz -C $W .
  cd bench
  timeout 260 python3 bench_peers.py --only moe --shapes qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp \
    --moe-m qwen3-30b-a3b-int4=2048,4096 qwen3-30b-a3b-int4-zp=2048,4096 --moe-launches \
    --moe-variants configs/moe_ws_r96.json --json $W/moe_r97a.json > $W/moe_r97a.log 2>&1
  echo "bench rc $?"; grep -E "M=" $W/moe_r97a.log | cut -c1-200 )
tar czf $O/r97.tgz -C $W .
