#!/bin/bash
# lead R57 (seventeenth pass), one call: scripts/gpu-check's tests on the final code (w4_ws, its two H200 entries),
# then the public layer call at 256 rows on 8192x8192 INT4 / MXFP4 (what config_for picks: the WS entries).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r57; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 400 scripts/gpu-check > $W/gpu-check.log 2>&1
echo "gpu-check rc $?"; tail -22 $W/gpu-check.log | cut -c1-250
cd bench
timeout 120 python3 rega_probe.py --public --m 256 --fmts int4 mxfp4 --shapes 8192x8192 --budget-s 100 > $W/public256.log 2>&1
echo "public rc $?"; cut -c1-330 $W/public256.log
tar czf $O/r57.tgz -C $W .
