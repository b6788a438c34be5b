#!/bin/bash
# lead R107 (written in the thirty-first pass; wants an H200: R106 ran on an H100).
# "a" (~110 s): Qwen3-30B INT4 and Qwen3-235B in its checkpoint's form (static input scales) at 4096 tokens: the
#   shipped WS_TAIL entries beside the thirtieth pass's ('notail4096') and this MoE's BF16 mode; the static form
#   also with moe_ws.ROUND_LIVE_ROWS and with WS_QACT (configs/moe_r107.json). Run on an H100 in the thirty-first
#   pass (before WS_QACT was written).
# "t" (~200 s): the WS_QACT GPU test (test_triton_moe_ws.py -k qact), then "a".
# No argument (~260 s): "a" plus Qwen3-30B INT4-zp, Qwen3-235B (dynamic scales) and gpt-oss-20b (4096 tokens, and
#   2048 with WS_TAIL: 256 pairs an expert there).
# "g" (~560 s on an H100, call it with timeout_s 600): scripts/gpu-check, benchmarks off, 12 test workers (R106 g
#   ran out of its 540 s with 8: 317 s of GPU tests and 185 s of device-aware ones).
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=$O     # the logs straight into OUT: a run cut short still returns them
( round_start "$O" || exit 1
  [ "$1" = g ] && { round_gpu_check $W 12 585; exit 0; }
  if [ "$1" = t ]; then
    TRITON_CACHE_DIR=/tmp/tc-t timeout 200 python3 -m pytest -q -n 4 -p no:cacheprovider -m gpu \
      plugins/triton/tests/test_triton_moe_ws.py -k qact > $W/qact-tests.log 2>&1
    echo "qact tests rc $?"; grep -E "passed|failed|Error|assert" $W/qact-tests.log | tail -6 | cut -c1-400
  fi
  cd bench
  if [ "$1" = a ] || [ "$1" = t ]; then
    SH="qwen3-30b-a3b-int4 qwen3-235b-a22b-nvfp4-static"
  else
    SH="qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp qwen3-235b-a22b-nvfp4-static qwen3-235b-a22b-nvfp4 gpt-oss-20b"
  fi
  MM=$(for s in $SH; do [ $s = gpt-oss-20b ] && printf "%s=2048,4096 " $s || printf "%s=4096 " $s; done)
  TRITON_CACHE_DIR=/tmp/tc-a timeout ${R107_TIMEOUT:-500} python3 bench_peers.py --only moe --shapes $SH --moe-m $MM --moe-launches \
    --moe-variants configs/moe_r107.json --json $W/r107.json > $W/r107.log 2>&1
  echo "r107 rc $?"; grep -E "M=" $W/r107.log | cut -c1-700 )

