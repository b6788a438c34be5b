#!/bin/bash
# lead R101 (written in the twenty-eighth pass for the next session; an H200: the cells' targets are H200 figures).
# R101a (no argument, ~200 s): the dense 256-row WS entries on the 4-instruction E2M1 pairs, each timed five times,
#   interleaved with BF16 cuBLAS, medians (bench/rega_probe.py --repeat 5; configs/ws_r80.json's "shipped" variant is
#   a second sample of the entry). R100a's one process put NVFP4 36864x7168 at 0.798x (the 0.8x line) and
#   7168x18432 at 0.94x; R80 saw 246-276 us between two samples of one entry there, so one process does not settle
#   a cell at the line.
# R101c (argument "c", ~300 s): R100c, not run in the twenty-eighth pass (bench/results/h200-2026-12-05/r100/
#   gpu-round.sh c: Nsight Compute's warp-stall samples on gpt-oss-20b 4096's WS launches, which R98b found bound by
#   their decode warps).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r101; mkdir -p $W
if [ "$1" = c ]; then
  ROUND_OUT=$O bash bench/results/h200-2026-12-05/r100/gpu-round.sh c
  exit $?
fi
( source scripts/device-env "$O" || exit 1
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1
  cd bench
  TRITON_CACHE_DIR=/tmp/tc-101 timeout 420 python3 rega_probe.py --m 256 --cfgs configs/ws_r80.json --fmts mxfp4 nvfp4 \
    --repeat 5 --shapes 7168x18432 36864x7168 8192x8192 > $W/r101a.log 2>&1
  echo "r101a rc $?"; grep -E "medians|shipped|bf16|BF16|x0|0\.[0-9]+x" $W/r101a.log | head -40 | cut -c1-220 )
tar czf $O/r101.tgz -C $W .
