#!/bin/bash
# lead R59 (eighteenth pass), one call: Nsight Compute on w4_ws (where a K tile's 1.3 us go), the one-warpgroup
# variants (configs/ws_r59.json) at 256 rows beside the entry in two interleaved repeats, then scripts/gpu-check's
# tests on the pass's code.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r59; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
cd bench
if [ -n "$NCU" ]; then
  timeout 150 $NCU --clock-control none --set full -k regex:w4_ws --launch-count 3 -f -o $W/ws \
    python3 ../bench/results/h200-2026-12-03/r59/ncu_ws.py 0 1 4 > $W/ncu-run.log 2>&1
  echo "ncu rc $?"; tail -5 $W/ncu-run.log | cut -c1-200
  $NCU -i $W/ws.ncu-rep --page details > $W/ncu-details.txt 2>&1
  $NCU -i $W/ws.ncu-rep --page source --print-source sass --csv > $W/ncu-sass.csv 2>&1
  echo "details $(wc -l < $W/ncu-details.txt) lines, sass $(wc -l < $W/ncu-sass.csv) lines"
  grep -E "w4_ws|Duration|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Eligible Warps|Shared Memory|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued" $W/ncu-details.txt | head -60 | cut -c1-160
fi
timeout 230 python3 rega_probe.py --m 256 --cfgs configs/ws_r59.json --fmts int4 mxfp4 nvfp4 --repeat 2 \
  --shapes 8192x8192 7168x18432 --budget-s 200 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^[0-9]|medians|    " $W/probe256.log | grep -v diagnose | cut -c1-200
cd ..
tar czf $O/r59.tgz -C $W . 
GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 300 scripts/gpu-check > $W/gc.log 2>&1
echo "gpu-check rc $?"; grep -E "passed|failed|error" $W/gc.log | tail -12 | cut -c1-250
tar czf $O/r59.tgz -C $W .
