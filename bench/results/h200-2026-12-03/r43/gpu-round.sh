#!/bin/bash
# lead R43 (sixteenth pass), one call: scripts/gpu-check's tests on this pass's code (the tiled FP8 GEMM's new ROWQ /
# PDL options, scripts/device-env's first GPU run), with a first pass of the dense rounds beside it that compiles
# their variants (its timings are disturbed by the tests and not used); then the dense rounds timed alone:
# FP8 W8A8 2048x4096 at 256 rows (configs/lead_r43_fp8_256.json: split-K tiles, the row quantizers, PDL) beside
# gemlite pinned and cuBLASLt, and 4-bit W4A16 2048x4096 at 256 rows (configs/lead_r43_w4_256.json: the wgmma
# kernel with split-K) for INT4, MXFP4 and NVFP4.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
T0=$SECONDS; el() { echo "[$((SECONDS - T0)) s] $*"; }
F8="--only dense --shapes 2048x4096 --modes w8a8_fp8_channel --m 256 --lean --peers gemlite scaled_mm
    --gemlite-load-config configs/gemlite_fp8_channel_h200.json --gemlite-quantizer-rows 1 --gemlite-tune-ms 5
    --dense-variants configs/lead_r43_fp8_256.json"
W4="--only dense --shapes 2048x4096 --modes w4a16_int4 w4a16_mx w4a16_nvfp4 --m 256 --lean --peers none
    --dense-variants configs/lead_r43_w4_256.json"
(cd bench && timeout 300 python3 bench_peers.py $F8 --dense-repeat 1 > $O/r43_pre_fp8.txt 2>&1;
  timeout 200 python3 bench_peers.py $W4 --dense-repeat 1 > $O/r43_pre_w4.txt 2>&1) &
GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$O/gc timeout 380 scripts/gpu-check > $O/gc.out 2>&1
el "gpu-check rc $?"; grep -E "passed|failed|^FAILED|^ERROR" $O/gc.out | head -30
wait; el "compile passes done"; grep -E "M=256|rror" $O/r43_pre_*.txt | cut -c1-250
cd bench
timeout 90 python3 bench_peers.py $F8 --dense-repeat 3 --dense-warm-s 0.15 --json $O/r43_fp8_256.json \
   > $O/r43_fp8_256.txt 2>&1
el "fp8 256 rc $?"
timeout $(( 580 - (SECONDS - T0) )) python3 bench_peers.py $W4 --dense-repeat 3 --dense-warm-s 0.15 \
   --json $O/r43_w4_256.json > $O/r43_w4_256.txt 2>&1
el "w4 256 rc $?"
for f in $O/r43_fp8_256.txt $O/r43_w4_256.txt; do grep -E "repeats|M=" $f | sed 's/; SM MHz.*//' | cut -c1-250; done
