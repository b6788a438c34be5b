#!/bin/bash
# lead R40 (fifteenth pass), one call: scripts/gpu-check's tests on this pass's code (the direct / XQ MoE tests now
# against the emulation on the CPU; the FP8 36864x7168 M=16 entry), with two compiles beside it: gpt-oss-20b's
# DEQUANT_MM GEMM tiles at 4096 tokens (moe_bisect --precompile) and gemlite's "fast" list at 36864x7168 M=16; then
# moe_bisect's rounds (the entry against the tile variants, configs/lead_r40_moe.json) and the FP8 36864x7168 M=16
# layer's choice beside gemlite autotuned and the R34 entry.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
T0=$SECONDS; el() { echo "[$((SECONDS - T0)) s] $*"; }
A36="--only dense --shapes 36864x7168 --modes w8a8_fp8_channel --m 16 --gemlite-autotune fast --gemlite-tune-ms 20"
(cd bench && timeout 200 python3 -u bench_peers.py $A36 --precompile 4 --precompile-only --precompile-timeout-s 190 \
   > $O/r40_pre36.log 2>&1) &
(cd bench && timeout 200 python3 -c "
import json, moe_bisect as mb
mb.precompile({}, 'gpt-oss-20b', [4096], 190, json.load(open('configs/lead_r40_moe.json')))" > $O/r40_premoe.log 2>&1) &
GPU_TEST_WORKERS=6 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$O/gc timeout 330 scripts/gpu-check > $O/gc.out 2>&1
el "gpu-check rc $?"; grep -E "passed|failed|^FAILED|^ERROR" $O/gc.out | head -30
wait; el "compiles done"; tail -2 $O/r40_pre36.log $O/r40_premoe.log
cd bench
timeout 150 python3 moe_bisect.py --shape gpt-oss-20b --m 4096 --variants configs/lead_r40_moe.json --rounds 3 \
   --json $O/r40_moe.json > $O/r40_moe.txt 2>&1
el "moe rc $?"; grep -v "^ *$" $O/r40_moe.txt | cut -c1-230 | tail -30
echo '{"36864x7168": {"m16 r34": {"ONLY_M": 16, "BASE": 1, "BLOCK_K": 128, "num_stages": 3}}}' > /tmp/r40_v.json
timeout $(( 570 - (SECONDS - T0) )) python3 -u bench_peers.py $A36 --dense-variants /tmp/r40_v.json --dense-repeat 3 \
   --dense-warm-s 0.15 --json $O/r40_fp8_36864.json > $O/r40_fp8_36864.txt 2>&1
el "fp8 36864 rc $?"; grep -E "repeats|M=" $O/r40_fp8_36864.txt | sed 's/; SM MHz.*//' | cut -c1-220
