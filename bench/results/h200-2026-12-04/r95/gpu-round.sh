#!/bin/bash
# lead R95 (twenty-third pass; prepared in session 23, not run there: no device was lent after R94), one call: the replay difference of R94's WS GPU test diagnosed stage by stage
# (ws_replay_diag.py), the WS GPU tests (MXFP4 only now), then WS at 2048 / 4096 tokens on gpt-oss-20b / 120b beside
# the shipped DEQUANT_MM entries and this MoE's BF16 mode (the activation reading the ids first, the gather skipping
# unused blocks).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r95; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
  timeout 90 python3 bench/results/h200-2026-12-04/r95/ws_replay_diag.py > $W/diag.log 2>&1
  echo "diag rc $?"; cut -c1-220 $W/diag.log | tail -30
  ( cd plugins/triton/tests
    timeout 150 python3 -m pytest -q -p no:cacheprovider -n 3 test_triton_moe_ws.py -m gpu > $W/pytest-ws.log 2>&1
    echo "pytest rc $?"; grep -E "Error|passed|failed" $W/pytest-ws.log | tail -8 | cut -c1-300 )
  cd bench
  timeout 200 python3 bench_peers.py --only moe --shapes gpt-oss-20b gpt-oss-120b \
    --moe-m gpt-oss-20b=2048,4096 gpt-oss-120b=4096 --moe-launches \
    --moe-variants configs/moe_ws_r95.json --json $W/moe_r95.json > $W/moe_r95.log 2>&1
  echo "bench rc $?"; grep -E "M=" $W/moe_r95.log | cut -c1-200 )
tar czf $O/r95.tgz -C $W .
