#!/bin/bash
# lead R98c (twenty-sixth pass; not run: no GPU was lent, so it waits for the next session), one call (~420 s):
# WGN 2 (8 MMA warps as two warpgroups on the halves of a block's rows) on 256- and 512-pair blocks, with WS_HALF and
# R98a's "wide" switches, beside the shipped entries and the BF16 mode (configs/moe_wgn_r98.json), every launch's
# device time. Run after gpu-round.sh (whose GPU tests cover WGN: test_triton_moe_ws.py's forms and the 700-token
# test); R98b's ablation says which of WS_HALF (the MMA side) and 512-pair blocks (the decode side) can pay.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r98c; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
  cd bench
  timeout 420 python3 bench_peers.py --only moe --shapes gpt-oss-20b gpt-oss-120b qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp \
    --moe-m gpt-oss-20b=2048,4096 gpt-oss-120b=4096 qwen3-30b-a3b-int4=2048,4096 qwen3-30b-a3b-int4-zp=4096 --moe-launches \
    --moe-variants configs/moe_wgn_r98.json --json $W/moe_r98c.json > $W/moe_r98c.log 2>&1
  echo "bench rc $?"; grep -E "M=" $W/moe_r98c.log | cut -c1-300 )
tar czf $O/r98c.tgz -C $W .
