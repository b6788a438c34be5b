#!/bin/bash
# lead R96c (twenty-fourth pass; prepared in session 24), one call (~550 s): WS on the INT4 experts of Qwen3-30B-A3B
# (GPTQ's layout, zero points or not) at 2048 / 4096 tokens, with and without WT (configs/moe_ws_r96.json), beside
# the shipped DEQUANT_MM entries and this MoE's BF16 mode. Its GPU test runs in R96a (test_triton_moe_ws.py).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r96c; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
  cd bench
  timeout 280 python3 bench_peers.py --only moe --shapes qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp \
    --moe-m qwen3-30b-a3b-int4=2048,4096 qwen3-30b-a3b-int4-zp=2048,4096 --moe-launches \
    --moe-variants configs/moe_ws_r96.json --json $W/moe_r96c.json > $W/moe_r96c.log 2>&1
  echo "bench rc $?"; grep -E "M=" $W/moe_r96c.log | cut -c1-200 )
tar czf $O/r96c.tgz -C $W .
# if time is left in the call: the extras (WT 8 / 16, WS_ACT without WT) on gpt-oss
( source scripts/device-env "$O" || exit 1
  export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
  cd bench
  timeout 250 python3 bench_peers.py --only moe --shapes gpt-oss-20b gpt-oss-120b \
    --moe-m gpt-oss-20b=2048,4096 gpt-oss-120b=4096 --moe-launches \
    --moe-variants configs/moe_ws_r96x.json --json $W/moe_r96x.json > $W/moe_r96x.log 2>&1
  echo "extras rc $?"; grep -E "M=" $W/moe_r96x.log | cut -c1-200 )
tar czf $O/r96c.tgz -C $W .
