#!/bin/bash
# lead R106 (thirty-first pass; an H200 where one comes, else an H100).
# No argument (~330 s): the WS_TAIL GPU tests (test_triton_moe_ws.py -k tail: blocks of BM + 64 / 32 pairs, the
#   tail a second wgmma, against oracle-emulation and the same entry without WS_TAIL bit for bit, PT 1 / 2, capture /
#   replay), then each shipped 4096-token WS entry beside itself with WS_TAIL 64 (and WS_HALF 2), and the INT4
#   cells at 2048 tokens on 128 + 64-pair blocks (configs/moe_r106.json), this MoE's BF16 mode in the same process,
#   every launch timed.
# "b" (~130 s): the 4096-token rows of the above only (no tests, no 2048 rows).
# "g" (~500 s): scripts/gpu-check with the benchmarks off.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r106; mkdir -p $W
( round_start "$O" || exit 1
  [ "$1" = g ] && { round_gpu_check $W 8 540; exit 0; }
  if [ "$1" = b ]; then
    cd bench
    TRITON_CACHE_DIR=/tmp/tc-a timeout 300 python3 bench_peers.py --only moe --shapes qwen3-30b-a3b-int4 \
      qwen3-30b-a3b-int4-zp qwen3-235b-a22b-nvfp4 gpt-oss-20b --moe-m qwen3-30b-a3b-int4=4096 \
      qwen3-30b-a3b-int4-zp=4096 qwen3-235b-a22b-nvfp4=4096 gpt-oss-20b=4096 --moe-launches \
      --moe-variants configs/moe_r106.json --json $W/r106b.json > $W/r106b.log 2>&1
    echo "r106b rc $?"; grep -E "M=" $W/r106b.log | cut -c1-700
    exit 0
  fi
  TRITON_CACHE_DIR=/tmp/tc-t timeout 240 python3 -m pytest -q -n 6 -p no:cacheprovider -m gpu \
    plugins/triton/tests/test_triton_moe_ws.py -k tail > $W/tail-tests.log 2>&1
  echo "tail tests rc $?"; grep -E "passed|failed|Error|assert" $W/tail-tests.log | tail -6 | cut -c1-400
  cd bench
  TRITON_CACHE_DIR=/tmp/tc-a timeout 300 python3 bench_peers.py --only moe --shapes qwen3-30b-a3b-int4 \
    qwen3-30b-a3b-int4-zp qwen3-235b-a22b-nvfp4 gpt-oss-20b --moe-m qwen3-30b-a3b-int4=2048,4096 \
    qwen3-30b-a3b-int4-zp=2048,4096 qwen3-235b-a22b-nvfp4=4096 gpt-oss-20b=4096 --moe-launches \
    --moe-variants configs/moe_r106.json --json $W/r106a.json > $W/r106a.log 2>&1
  echo "r106a rc $?"; grep -E "M=" $W/r106a.log | cut -c1-700 )
tar czf $O/r106.tgz -C $W .
