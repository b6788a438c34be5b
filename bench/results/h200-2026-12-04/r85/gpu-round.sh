#!/bin/bash
# lead R85 (twenty-first pass), one call: scripts/gpu-check's tests on the pass's final code (XQ 2 shipped for
# Qwen3-235B-A22B NVFP4 W4A4 at one token; the split tail reverted), then that entry through the public call
# (bench_peers: the shipped choice beside this MoE's BF16 mode, _grouped_mm and the HBM limit, three repeats).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r85; mkdir -p $W
GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 420 scripts/gpu-check > $W/gc.log 2>&1
echo "gpu-check rc $?"; grep -E "passed|failed|error" $W/gc.log | tail -8 | cut -c1-250
tar czf $O/r85.tgz -C $W .
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
cd bench
timeout 120 python3 bench_peers.py --only moe --shapes qwen3-235b-a22b-nvfp4 --m 1 --moe-repeat 3 --moe-launches \
  --json $W/moe_r85.json > $W/moe_r85.log 2>&1
echo "bench rc $?"; grep -vE "^\s*$" $W/moe_r85.log | tail -12 | cut -c1-260
tar czf $O/r85.tgz -C $W .
