#!/bin/bash
# lead R98t / R98a / R98c (twenty-sixth pass; not run: the session was lent no GPU, so they wait for the next one).
# R98t (argument "t", ~400 s): the WS MoE's GPU tests (WS_HALF, WGN 2; moe.ALIGN_WIDE and moe_ws.ZERO_PADDING
# switched on), the alignment and table tests.
# R98a (no argument, up to 560 s): the 4-bit MoE cells at 2048 / 4096 tokens: the shipped entries beside the same entries
# with the switches on ("wide"), with WS_HALF 1 ("half") and with both (configs/moe_half_r98.json), and the BF16
# mode, every launch's device time listed.
# R98c (argument "c", up to 560 s): the same cells with WGN 2 (8 MMA warps as two warpgroups on the halves of a block's
# rows) on 256- and 512-pair blocks, with WS_HALF and the "wide" switches (configs/moe_wgn_r98.json).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"
case "$1" in
  t) R=r98t ;;
  c) R=r98c; V=configs/moe_wgn_r98.json ;;
  *) R=r98a; V=configs/moe_half_r98.json ;;
esac
W=/tmp/$R; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
  if [ "$R" = r98t ]; then
    cd plugins/triton/tests
    timeout 400 python3 -m pytest -q -p no:cacheprovider -n 8 test_triton_moe_ws.py test_triton_tuned.py test_triton_moe.py > $W/pytest-t.log 2>&1
    echo "pytest rc $?"; grep -E "Error|passed|failed" $W/pytest-t.log | tail -12 | cut -c1-300
    exit 0
  fi
  cd bench
  timeout 560 python3 bench_peers.py --budget-s 470 --only moe --shapes gpt-oss-20b gpt-oss-120b qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp \
    --moe-m gpt-oss-20b=2048,4096 gpt-oss-120b=4096 qwen3-30b-a3b-int4=2048,4096 qwen3-30b-a3b-int4-zp=4096 --moe-launches \
    --moe-variants $V --json $W/moe_$R.json > $W/moe_$R.log 2>&1
  echo "bench rc $?"; grep -E "M=" $W/moe_$R.log | cut -c1-300 )
tar czf $O/$R.tgz -C $W .
