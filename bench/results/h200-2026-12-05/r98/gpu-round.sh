#!/bin/bash
# lead R98a (twenty-sixth pass; not run: the session was lent no GPU, so it waits for the next one), one call
# (~500 s): the WS MoE's GPU tests (WS_HALF; moe.ALIGN_WIDE and moe_ws.ZERO_PADDING switched on), the alignment and
# table tests, then the 4-bit MoE cells at 2048 / 4096 tokens: the shipped entries beside the same entries with the
# switches on ("wide"), with WS_HALF 1 ("half") and with both, and the BF16 mode, every launch's device time listed.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r98; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
  ( cd plugins/triton/tests
    timeout 220 python3 -m pytest -q -p no:cacheprovider -n 8 test_triton_moe_ws.py test_triton_tuned.py test_triton_moe.py > $W/pytest-a.log 2>&1
    echo "pytest rc $?"; grep -E "Error|passed|failed" $W/pytest-a.log | tail -12 | cut -c1-300 )
  tar czf $O/r98.tgz -C $W .
  cd bench
  timeout 330 python3 bench_peers.py --only moe --shapes gpt-oss-20b gpt-oss-120b qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp \
    --moe-m gpt-oss-20b=2048,4096 gpt-oss-120b=4096 qwen3-30b-a3b-int4=2048,4096 qwen3-30b-a3b-int4-zp=4096 --moe-launches \
    --moe-variants configs/moe_half_r98.json --json $W/moe_r98a.json > $W/moe_r98a.log 2>&1
  echo "bench rc $?"; grep -E "M=" $W/moe_r98a.log | cut -c1-300 )
tar czf $O/r98.tgz -C $W .
