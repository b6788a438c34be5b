#!/bin/bash
# lead R67 (nineteenth pass), one call: XTMA variants against the shipped 256-row entries (configs/ws_r67.json;
# R66's probe stopped on a bench bug), then Nsight Compute on the INT4 8192x8192 entry with XTMA.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r67; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
cd bench
timeout 330 python3 rega_probe.py --m 256 --cfgs configs/ws_r67.json --fmts int4 mxfp4 nvfp4 --repeat 3 \
  --shapes 8192x8192 7168x18432 36864x7168 --budget-s 320 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^[0-9]|medians|    |FAIL" $W/probe256.log | grep -v diagnose | cut -c1-220 | tail -40
tar czf $O/r67.tgz -C $W .
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
NCU_FMT=int4 NCU_CFGS=configs/ws_ncu_r67.json timeout 100 $NCU --clock-control none --set full -k regex:w4_ws \
  --launch-count 1 -f -o $W/ws-int4x python3 ../bench/results/h200-2026-12-03/r59/ncu_ws.py 0 > $W/ncu-run.log 2>&1
echo "ncu rc $?"; grep -v "^==PROF==" $W/ncu-run.log | tail -2 | cut -c1-200
$NCU -i $W/ws-int4x.ncu-rep --page details > $W/ncu-details-int4x.txt 2>&1
$NCU -i $W/ws-int4x.ncu-rep --page source --print-source sass --csv > $W/ncu-sass-int4x.csv 2>&1
grep -E "Duration|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Shared|Compute \(SM\) Throughput" \
  $W/ncu-details-int4x.txt | head -12 | cut -c1-150
rm -f $W/ws-int4x.ncu-rep
tar czf $O/r67.tgz -C $W .
