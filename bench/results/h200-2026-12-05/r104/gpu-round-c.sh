#!/bin/bash
# lead R104c (thirtieth pass; an H200): Qwen3-235B NVFP4 W4A4 at 4096 tokens, the shipped entry (WS with PT 2 since
# R104a) on the one-reduction amax, beside the previous entry (configs/moe_r104c.json) and this MoE's BF16 mode (~100 s).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r104c; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1
  cd bench
  TRITON_CACHE_DIR=/tmp/tc-a timeout 105 python3 bench_peers.py --only moe --shapes qwen3-235b-a22b-nvfp4 \
    --moe-m qwen3-235b-a22b-nvfp4=4096 --moe-launches --moe-variants configs/moe_r104c.json --json $W/r104c.json \
    > $W/r104c.log 2>&1
  echo "r104c rc $?"; grep -E "M=|error" $W/r104c.log | cut -c1-400 )
tar czf $O/r104c.tgz -C $W .
