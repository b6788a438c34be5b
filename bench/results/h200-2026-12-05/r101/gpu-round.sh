#!/bin/bash
# lead R101 (written in the twenty-eighth pass, run in the twenty-ninth; an H200: the cells' targets are H200 figures).
# R101a (no argument or "ac", ~200 s): the dense 256-row WS entries on the 4-instruction E2M1 pairs, each timed five
#   times, interleaved with BF16 cuBLAS, medians (bench/rega_probe.py --repeat 5; configs/ws_r80.json's "shipped"
#   variant is a second sample of the entry). R100a's one process put NVFP4 36864x7168 at 0.798x (the 0.8x line) and
#   7168x18432 at 0.94x; R80 saw 246-276 us between two samples of one entry there, so one process does not settle
#   a cell at the line.
# R101c ("c" or "ac", ~300 s): Nsight Compute (--set full, --clock-control none) on the shipped WS entries' FC1 and
#   FC2 launches at the two missed 4096-token cells, Qwen3-30B INT4 and gpt-oss-120b (bench_peers under ncu, matched
#   by kernel name): the details page and the SASS page with each instruction's warp-stall samples (CSV), to tell what
#   the decode warps wait on (R98b found these launches bound by their decode warps; R99: not their instruction count).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r101; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1
  cd bench
  if [ -z "$1" ] || [ "$1" = ac ]; then
    TRITON_CACHE_DIR=/tmp/tc-101 timeout 300 python3 rega_probe.py --m 256 --cfgs configs/ws_r80.json --fmts mxfp4 nvfp4 \
      --repeat 5 --shapes 7168x18432 36864x7168 8192x8192 > $W/r101a.log 2>&1
    echo "r101a rc $?"; grep -E "medians|shipped|bf16|BF16|x0|0\.[0-9]+x" $W/r101a.log | head -40 | cut -c1-220
  fi
  if [ "$1" = c ] || [ "$1" = ac ]; then
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    for mm in qwen3-30b-a3b-int4 gpt-oss-120b; do
      TRITON_CACHE_DIR=/tmp/tc-c timeout 140 $NCU --clock-control none --set full -k regex:w4_ws_kernel --launch-count 2 \
        -f -o $W/ncu-$mm python3 bench_peers.py --only moe --shapes $mm --moe-m $mm=4096 > $W/ncu-run-$mm.log 2>&1
      echo "ncu $mm rc $?"; grep -v "^==PROF==" $W/ncu-run-$mm.log | grep -E "M=|Error" | cut -c1-200
      $NCU -i $W/ncu-$mm.ncu-rep --page details > $W/ncu-details-$mm.txt 2>&1
      $NCU -i $W/ncu-$mm.ncu-rep --page source --print-source sass --csv > $W/ncu-sass-$mm.csv 2>&1
      grep -E "Duration|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Compute \(SM\) Throughput|Registers Per" \
        $W/ncu-details-$mm.txt | head -14 | cut -c1-150
      rm -f $W/ncu-$mm.ncu-rep
    done
  fi )
tar czf $O/r101.tgz -C $W .
