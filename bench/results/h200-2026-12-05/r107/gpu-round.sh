#!/bin/bash
# lead R107 (written in the thirty-first pass; wants an H200: R106 ran on an H100).
# "a" (~110 s): Qwen3-30B INT4 and Qwen3-235B in its checkpoint's form (static input scales) at 4096 tokens: the
#   shipped WS_TAIL entries beside the thirtieth pass's ('notail4096') and this MoE's BF16 mode; the static form
#   also with moe_ws.ROUND_LIVE_ROWS (configs/moe_r107.json).
# No argument (~220 s): "a" plus Qwen3-30B INT4-zp, Qwen3-235B (dynamic scales) and gpt-oss-20b.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=$O     # the logs straight into OUT: a run cut short still returns them
( source scripts/device-env "$O" || exit 1
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1
  cd bench
  if [ "$1" = a ]; then
    SH="qwen3-30b-a3b-int4 qwen3-235b-a22b-nvfp4-static"
  else
    SH="qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp qwen3-235b-a22b-nvfp4-static qwen3-235b-a22b-nvfp4 gpt-oss-20b"
  fi
  MM=$(for s in $SH; do printf "%s=4096 " $s; done)
  TRITON_CACHE_DIR=/tmp/tc-a timeout ${R107_TIMEOUT:-500} python3 bench_peers.py --only moe --shapes $SH --moe-m $MM --moe-launches \
    --moe-variants configs/moe_r107.json --json $W/r107.json > $W/r107.log 2>&1
  echo "r107 rc $?"; grep -E "M=" $W/r107.log | cut -c1-700 )

