#!/bin/bash
# lead R78 (twentieth pass), one call: scripts/gpu-check's tests on the pass's final code (stream-K not kept; the
# compile test's INT4 zero-point two-warpgroup case with the words two tiles ahead, as R57 measured it).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r78; mkdir -p $W
GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 400 scripts/gpu-check > $W/gc.log 2>&1
echo "gpu-check rc $?"; grep -E "passed|failed|error" $W/gc.log | tail -8 | cut -c1-250
tar czf $O/r78.tgz -C $W .
