#!/bin/bash
# lead R63 (eighteenth pass), one call: scripts/gpu-check's tests on the pass's final code, the public call on the
# 256-row entries of all three formats, then five interleaved repeats of two close variants (configs/ws_r63.json).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r63; mkdir -p $W
GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 300 scripts/gpu-check > $W/gc.log 2>&1
echo "gpu-check rc $?"; grep -E "passed|failed|error" $W/gc.log | tail -8 | cut -c1-250
tar czf $O/r63.tgz -C $W .
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
cd bench
timeout 100 python3 rega_probe.py --m 256 --public --fmts int4 mxfp4 nvfp4 --shapes 8192x8192 7168x18432 36864x7168 \
  > $W/public256.log 2>&1
echo "public rc $?"; cut -c1-60,150-330 $W/public256.log | tail -10
tar czf $O/r63.tgz -C $W .
timeout 130 python3 rega_probe.py --m 256 --cfgs configs/ws_r63.json --fmts int4 mxfp4 --repeat 5 \
  --shapes 8192x8192 --budget-s 120 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^[0-9]|medians|    " $W/probe256.log | grep -v diagnose | cut -c1-200
tar czf $O/r63.tgz -C $W .
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
NCU_FMT=int4 timeout 90 $NCU --clock-control none --set full -k regex:w4_ws --launch-count 1 -f -o $W/ws-int4 \
  python3 ../bench/results/h200-2026-12-03/r59/ncu_ws.py s > $W/ncu-run-int4.log 2>&1
echo "ncu rc $?"; grep -v "^==PROF==" $W/ncu-run-int4.log | tail -2 | cut -c1-200
$NCU -i $W/ws-int4.ncu-rep --page details > $W/ncu-details-int4.txt 2>&1
$NCU -i $W/ws-int4.ncu-rep --page source --print-source sass --csv > $W/ncu-sass-int4.csv 2>&1
grep -E "Duration|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|L2 Cache Throughput|Compute \(SM\) Throughput" \
  $W/ncu-details-int4.txt | head -8 | cut -c1-150
rm -f $W/ws-int4.ncu-rep
tar czf $O/r63.tgz -C $W .
