#!/bin/bash
# lead R72 (nineteenth pass), one call: the R71 candidates on 7168x18432 and 36864x7168 (configs/ws_r72.json), then
# scripts/gpu-check's tests on the pass's code (the 8192x8192 256-row entries with decode partitions shipped).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r72; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
(cd bench && timeout 185 python3 rega_probe.py --m 256 --cfgs configs/ws_r72.json --fmts int4 mxfp4 nvfp4 --repeat 3 \
  --shapes 7168x18432 36864x7168 --budget-s 170 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^    [sBw]|^  ws" $W/probe256.log | sed -e "s/num_warps 4 BM 256 STAGES 4 DW 8 DREGS 104 MAXNREG 168 //" | cut -c1-120)
tar czf $O/r72.tgz -C $W .
GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 300 scripts/gpu-check > $W/gc.log 2>&1
echo "gpu-check rc $?"; grep -E "passed|failed|error" $W/gc.log | tail -8 | cut -c1-250
tar czf $O/r72.tgz -C $W .
