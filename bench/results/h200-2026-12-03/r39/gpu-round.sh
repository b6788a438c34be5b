#!/bin/bash
# lead R39 (fifteenth pass), one call: scripts/gpu-check's tests (GPU-marked, then the device-aware unmarked tests
# compiled on the GPU: its new step), bench/requant_flips.py (emulation on CPU vs GPU: the size of FC2-input
# re-rounding flips) beside them; then FP8 W8A8 per-channel tile variants (configs/lead_r39_fp8.json):
# 36864x7168 M=256 (the tiled GEMM's tiles) and M=16, 7168x18432 / 8192^2 M=16 with gemlite pinned.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
T0=$SECONDS; el() { echo "[$((SECONDS - T0)) s] $*"; }
V8=configs/lead_r39_fp8.json
(cd bench && timeout 200 python3 fp8_numerics.py --workers 3 --timeout-s 190 --variants $V8 \
   --shapes 36864x7168 7168x18432 8192x8192 --m 16 256 > $O/r39_fp8_numerics.txt 2>&1) &
(timeout 200 python3 bench/requant_flips.py --seeds 16 > $O/r39_flips.txt 2>&1; echo "rc=$?" >> $O/r39_flips.txt) &
BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$O/gc timeout 330 scripts/gpu-check > $O/gc.out 2>&1
el "gpu-check rc $?"; grep -E "passed|failed|^FAILED|^ERROR" $O/gc.out | head -30
wait; el "phase 1 done"; cat $O/r39_flips.txt; grep -h "rel_fro\|FAIL\|Error" $O/r39_fp8_numerics.txt | cut -c1-120 | head -40
cd bench
GL="--peers gemlite --lean --gemlite-load-config configs/gemlite_fp8_channel_h200.json --gemlite-quantizer-rows 1 --gemlite-tune-ms 5"
timeout 80 python3 bench_peers.py --only dense --modes w8a8_fp8_channel --m 16 --shapes 7168x18432 8192x8192 $GL \
   --dense-variants $V8 --dense-warm-s 0.15 --dense-repeat 3 --json $O/r39_fp8_m16.json > $O/r39_fp8_m16.txt 2>&1
el "fp8 m16 rc $?"
timeout $(( 560 - (SECONDS - T0) )) python3 bench_peers.py --only dense --modes w8a8_fp8_channel --m 16 256 \
   --shapes 36864x7168 --peers none --lean --dense-variants $V8 --dense-warm-s 0.15 --dense-repeat 3 \
   --json $O/r39_fp8_36864.json > $O/r39_fp8_36864.txt 2>&1
el "fp8 36864 rc $?"
for f in $O/r39_fp8_m16.txt $O/r39_fp8_36864.txt; do grep -E "repeats|M=" $f | sed 's/; SM MHz.*//' | cut -c1-220; done
