#!/bin/bash
# lead R105 (written in the thirtieth pass for the next session; an H200 where one comes, else an H100).
# No argument (~450 s): the WS MoE GPU tests (test_triton_moe_ws.py: WS_HALF 2's quarter blocks in the base configs
#   at 1 / 37 / 300 tokens and with PT 2, ROUND_LIVE_ROWS in W4A4's forms, against oracle-emulation and the one-tile
#   grid),
#   then each shipped 4096-token WS MoE entry beside the same entry with WS_HALF 2 (configs/moe_r105.json) and
#   this MoE's BF16 mode, one process, every launch timed; Qwen3-235B also with moe_ws.ROUND_LIVE_ROWS (SET), alone
#   and with WS_HALF 2.
# "g" (~470 s): scripts/gpu-check with the benchmarks off.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r105; mkdir -p $W
( round_start "$O" || exit 1
  [ "$1" = g ] && { round_gpu_check $W 8 470; exit 0; }
  TRITON_CACHE_DIR=/tmp/tc-t timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -m gpu \
    plugins/triton/tests/test_triton_moe_ws.py > $W/ws-tests.log 2>&1
  echo "ws tests rc $?"; tail -4 $W/ws-tests.log | cut -c1-300
  cd bench
  TRITON_CACHE_DIR=/tmp/tc-a timeout 260 python3 bench_peers.py --only moe --shapes qwen3-30b-a3b-int4 \
    qwen3-30b-a3b-int4-zp qwen3-235b-a22b-nvfp4 gpt-oss-120b gpt-oss-20b --moe-m qwen3-30b-a3b-int4=4096 \
    qwen3-30b-a3b-int4-zp=4096 qwen3-235b-a22b-nvfp4=4096 gpt-oss-120b=4096 gpt-oss-20b=4096 --moe-launches \
    --moe-variants configs/moe_r105.json --json $W/r105a.json > $W/r105a.log 2>&1
  echo "r105a rc $?"; grep -E "M=" $W/r105a.log | cut -c1-300 )
tar czf $O/r105.tgz -C $W .
