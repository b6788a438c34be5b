#!/bin/bash
# lead R93 (twenty-second pass), one call: SWAP 3 with XP and no WAIT (the loop WAIT removed: wrong sums in R90-R92) on
# gpt-oss-20b / gpt-oss-120b / Qwen3-235B-A22B NVFP4 W4A4 at M=16 and 256 beside the shipped choices, this MoE's BF16
# mode and the HBM limit (bench_peers, variants: the tuned entries' candidates), then scripts/gpu-check on the pass's
# final kernel code.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r93; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
  cd bench
  timeout 150 python3 bench_peers.py --only moe --shapes gpt-oss-20b gpt-oss-120b qwen3-235b-a22b-nvfp4 \
    --moe-m gpt-oss-20b=16,256 gpt-oss-120b=256 qwen3-235b-a22b-nvfp4=16,256 --moe-launches \
    --moe-variants configs/moe_swap3_r93.json --json $W/moe_r93.json > $W/moe_r93.log 2>&1
  echo "bench rc $?"; grep -E "M=" $W/moe_r93.log | cut -c1-160 )
tar czf $O/r93.tgz -C $W .
GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 400 scripts/gpu-check > $W/gc.log 2>&1
echo "gpu-check rc $?"; grep -E "passed|failed|error" $W/gc.log | tail -8 | cut -c1-250
tar czf $O/r93.tgz -C $W .
