#!/bin/bash
# lead R103 (written in the twenty-ninth pass for the next session; an H200 where one comes, else an H100).
# "g" (~470 s): scripts/gpu-check with the benchmarks off, on the PT code (the twenty-ninth pass could not run it).
# "c" (~200 s): Nsight Compute (--set full) on the dense MXFP4 36864x7168 256-row WS entry and the same entry with
#   PT 1 (rega_probe.py --cfgs configs/ws_r103.json: the entry's launches first, then PT's; the details page names
#   each launch's grid, (576, 1, 1) one-tile, (132, 1, 1) PT), and the SASS page summed by bench/ncu_stalls.py: why
#   PT is 0.57x the entry there (R102d) while it is 2-13% faster in the MoE (R102a / R102b).
# "a" (~250 s): gpt-oss-120b at 4096 tokens, the shipped entry (PT 2 since the twenty-ninth pass) against this
#   MoE's BF16 mode, three times in one process (--moe-repeat 3 --moe-repeat-upto 4096): R102a put it at 0.995x.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r103; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1
  case "$1" in
  g)
    GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 470 scripts/gpu-check \
      > $W/gc.log 2>&1
    echo "gpu-check rc $?"; grep -E "passed|failed|error" $W/gc.log | tail -8 | cut -c1-250 ;;
  c)
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    cd bench
    TRITON_CACHE_DIR=/tmp/tc-c timeout 180 $NCU --clock-control none --set full -k regex:w4_ws_kernel \
      --launch-count 12 -f -o $W/dense-pt python3 rega_probe.py --m 256 --cfgs configs/ws_r103.json --fmts mxfp4 \
      --shapes 36864x7168 > $W/ncu-run.log 2>&1
    echo "ncu rc $?"
    $NCU -i $W/dense-pt.ncu-rep --page details > $W/ncu-details.txt 2>&1
    $NCU -i $W/dense-pt.ncu-rep --page source --print-source sass --csv > $W/ncu-sass.csv 2>&1
    grep -E "w4_ws_kernel \(|Duration" $W/ncu-details.txt | head -24 | cut -c1-120
    python3 ncu_stalls.py $W/ncu-sass.csv --top 12 > $W/ncu-stalls.txt 2>&1; head -40 $W/ncu-stalls.txt | cut -c1-200
    rm -f $W/dense-pt.ncu-rep $W/ncu-sass.csv ;;
  a)
    cd bench
    TRITON_CACHE_DIR=/tmp/tc-a timeout 240 python3 bench_peers.py --only moe --shapes gpt-oss-120b \
      --moe-m gpt-oss-120b=4096 --moe-repeat 3 --moe-repeat-upto 4096 --moe-launches --json $W/r103a.json \
      > $W/r103a.log 2>&1
    echo "r103a rc $?"; grep -E "M=" $W/r103a.log | cut -c1-300 ;;
  *) echo "argument: g, c or a"; exit 2 ;;
  esac )
tar czf $O/r103.tgz -C $W .
