#!/bin/bash
# lead R97b (twenty-fifth pass), one call (~380 s): the shipped table's new WS entries (the "oracle" column) beside
# the DEQUANT_MM entries they replace (configs/moe_dq_r97.json) across their buckets (1025-2048, 2049-4096 tokens;
# 120b from 2049; 120b at 1100 / 2048 with the WS keys where no entry is; gpt-oss-20b at 512 / 1024 and INT4 at 1024 likewise), and the GPU tests of the table and the WS MoE path on this code.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r97b; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
  ( cd bench
    timeout 380 python3 bench_peers.py --only moe --shapes gpt-oss-20b gpt-oss-120b qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp \
      --moe-m gpt-oss-20b=512,1024,1100,2048,3000,4096 gpt-oss-120b=1100,2048,2100,3000,4096 qwen3-30b-a3b-int4=1024,1100,2048,3000,4096 \
      qwen3-30b-a3b-int4-zp=1100,3000 --moe-launches --moe-variants configs/moe_dq_r97.json --json $W/moe_r97b.json > $W/moe_r97b.log 2>&1
    echo "bench rc $?"; grep -E "M=" $W/moe_r97b.log | cut -c1-200 )
  tar czf $O/r97b.tgz -C $W .
  cd plugins/triton/tests
  timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 test_triton_tuned.py test_triton_moe_ws.py > $W/pytest-b.log 2>&1
  echo "pytest rc $?"; grep -E "Error|passed|failed" $W/pytest-b.log | tail -8 | cut -c1-300 )
tar czf $O/r97b.tgz -C $W .
