#!/bin/bash
# lead R96b (twenty-fourth pass; prepared in session 24), one call (~580 s): the dense 256-row cells with WT (the words
# by TMA, configs/ws_r96.json) beside the shipped entries and BF16 cuBLAS on the three large shapes, then
# scripts/gpu-check on the pass's code (the dense and MoE WT / WS_ACT GPU tests among its tests).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r96b; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
(cd bench && timeout 150 python3 rega_probe.py --m 256 --cfgs configs/ws_r96.json --fmts int4 mxfp4 nvfp4 --repeat 2 \
  --shapes 8192x8192 7168x18432 36864x7168 --budget-s 140 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^    [sBw]|^  ws" $W/probe256.log | sed -e "s/num_warps 4 BM 256 STAGES 4 DW 8 DREGS 104 MAXNREG 168 //" | cut -c1-120)
tar czf $O/r96b.tgz -C $W .
GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 400 scripts/gpu-check > $W/gc.log 2>&1
echo "gpu-check rc $?"; grep -E "passed|failed|error" $W/gc.log | tail -8 | cut -c1-250
tar czf $O/r96b.tgz -C $W .
