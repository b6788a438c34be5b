#!/bin/bash
# lead R86 (twenty-first pass), one call: scripts/gpu-check's tests on the pass's final code (213f21b: R85's failing
# compile test's case, the activation-and-rounding program, moved from the REGA group to the one-row group).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r86; mkdir -p $W
GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 420 scripts/gpu-check > $W/gc.log 2>&1
echo "gpu-check rc $?"; grep -E "passed|failed|error" $W/gc.log | tail -8 | cut -c1-250
tar czf $O/r86.tgz -C $W .
