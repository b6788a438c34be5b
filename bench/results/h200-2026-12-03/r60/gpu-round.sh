#!/bin/bash
# lead R60 (eighteenth pass), one call: Nsight Compute on w4_ws (the INT4 entry and the one-warpgroup 256-row
# variant, INT4 and MXFP4), then that variant's repeats and neighbours at 256 rows (configs/ws_r60.json).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r60; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
cd bench
for run in "int4 0 1" "mxfp4 1"; do
  set -- $run; f=$1; shift
  NCU_FMT=$f timeout 120 $NCU --clock-control none --set full -k regex:w4_ws --launch-count $# -f -o $W/ws-$f \
    python3 ../bench/results/h200-2026-12-03/r59/ncu_ws.py "$@" > $W/ncu-run-$f.log 2>&1
  echo "ncu $f rc $?"; grep -v "^==PROF==" $W/ncu-run-$f.log | tail -4 | cut -c1-200
  $NCU -i $W/ws-$f.ncu-rep --page details > $W/ncu-details-$f.txt 2>&1
  $NCU -i $W/ws-$f.ncu-rep --page source --print-source sass --csv > $W/ncu-sass-$f.csv 2>&1
  echo "details $(wc -l < $W/ncu-details-$f.txt) lines, sass $(wc -l < $W/ncu-sass-$f.csv) lines"
  grep -E "Duration|Issue Slots Busy|No Eligible|Eligible Warps|Warp Cycles Per Issued|Shared Memory|L2 Cache Throughput|Compute \(SM\) Throughput|Memory Throughput" $W/ncu-details-$f.txt | head -40 | cut -c1-150
done
timeout 260 python3 rega_probe.py --m 256 --cfgs configs/ws_r60.json --fmts mxfp4 nvfp4 int4 --repeat 3 \
  --shapes 8192x8192 7168x18432 36864x7168 --budget-s 250 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^[0-9]|medians|    " $W/probe256.log | grep -v diagnose | cut -c1-200
tar czf $O/r60.tgz -C $W .
