#!/bin/bash
# lead R73 (prepared in the nineteenth pass, run in the twentieth): scripts/gpu-check's tests on the pass's
# final code (R72's one device-aware failure, the INT4 zero-point XCP compile's spills, fixed after that call), then
# the public call (TritonLinear.apply: config_for's lookup, no launch plan for XTMA entries) on the nine 256-row
# entries of R71-R72, graph replay and eager, BF16 in the same process.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r73; mkdir -p $W
GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 300 scripts/gpu-check > $W/gc.log 2>&1
echo "gpu-check rc $?"; grep -E "passed|failed|error" $W/gc.log | tail -8 | cut -c1-250
tar czf $O/r73.tgz -C $W .
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
cd bench
timeout 150 python3 rega_probe.py --m 256 --public --fmts int4 mxfp4 nvfp4 --shapes 8192x8192 7168x18432 36864x7168 \
  > $W/public256.log 2>&1
echo "public rc $?"; cut -c1-60,150-330 $W/public256.log | tail -10
tar czf $O/r73.tgz -C $W .
# twentieth pass: variants on the three cells under 0.8x BF16 (configs/ws_r73.json: five slots, WPF 3, DP 4 in 5 slots)
timeout 140 python3 rega_probe.py --m 256 --cfgs configs/ws_r73.json --fmts int4 nvfp4 --repeat 3 \
  --shapes 7168x18432 36864x7168 --budget-s 125 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^    [sBw]|^  ws" $W/probe256.log | sed -e "s/num_warps 4 BM 256 //" | cut -c1-130
tar czf $O/r73.tgz -C $W .
