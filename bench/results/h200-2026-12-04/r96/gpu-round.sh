#!/bin/bash
# lead R96a (twenty-fourth pass; prepared in session 24, which had no device), one call (~450 s): R95's content (the
# replay diagnosis, the WS MoE GPU tests) with WT (the words by TMA into their own ring) in the tests, the dense w4_ws
# GPU test with its WT configs, then the MoE at 2048 / 4096 tokens with and without WT (configs/moe_ws_r96.json)
# beside the shipped DEQUANT_MM entries and this MoE's BF16 mode.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r96; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
  timeout 90 python3 bench/results/h200-2026-12-04/r95/ws_replay_diag.py > $W/diag.log 2>&1
  echo "diag rc $?"; cut -c1-220 $W/diag.log | tail -20
  ( cd plugins/triton/tests
    timeout 200 python3 -m pytest -q -p no:cacheprovider -n 4 test_triton_moe_ws.py test_triton_gpu.py \
      -k "ws_path or ws_kernel or tuned_ws or words_by_tma" > $W/pytest-ws.log 2>&1
    echo "pytest rc $?"; grep -E "Error|passed|failed" $W/pytest-ws.log | tail -10 | cut -c1-300 )
  cd bench
  timeout 230 python3 bench_peers.py --only moe --shapes gpt-oss-20b gpt-oss-120b \
    --moe-m gpt-oss-20b=2048,4096 gpt-oss-120b=4096 --moe-launches \
    --moe-variants configs/moe_ws_r96.json --json $W/moe_r96.json > $W/moe_r96.log 2>&1
  echo "bench rc $?"; grep -E "M=" $W/moe_r96.log | cut -c1-200 )
tar czf $O/r96.tgz -C $W .
