#!/bin/bash
# lead R37 (fourteenth pass): the R36 entries through the layer's own choice ("oracle" rows) beside tile variants
# (configs/lead_r37_*.json): FP8 W8A8 per channel M=16 (7168x18432, 8192^2; gemlite pinned), M=1 8192^2, 36864x7168
# M=16 beside gemlite autotuned; INT4 / MXFP4 / NVFP4 W4A16 M=1 2048x4096 beside tinygemm / gemlite / BF16.
set -o pipefail
O=${ROUND_OUT:-/tmp/lead_out}; mkdir -p "$O"
export TRITON_CACHE_DIR=/tmp/tc-lead
T0=$SECONDS; el() { echo "[$((SECONDS - T0)) s] $*"; }
cd bench
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
V8=configs/lead_r37_fp8.json; V4=configs/lead_r37_w4.json; VF=configs/lead_r37_fp4.json
GL="--peers gemlite --lean --gemlite-load-config configs/gemlite_fp8_channel_h200.json --gemlite-quantizer-rows 1 --gemlite-tune-ms 5"
A36="--only dense --shapes 36864x7168 --modes w8a8_fp8_channel --m 16 --gemlite-autotune fast --gemlite-tune-ms 20"
(timeout 80 python3 fp8_numerics.py --workers 4 --timeout-s 75 --variants $V8 --shapes 7168x18432 8192x8192 36864x7168 \
   --m 1 16 > $O/r37_fp8_numerics.txt 2>&1) &
(timeout 80 python3 w4_numerics.py --workers 2 --timeout-s 75 --variants $V4 > $O/r37_w4_numerics.txt 2>&1) &
(timeout 80 python3 w4_numerics.py --workers 2 --timeout-s 75 --variants $VF --modes w4a16_mx w4a16_nvfp4 \
   > $O/r37_fp4_numerics.txt 2>&1) &
(timeout 80 python3 -u bench_peers.py $A36 --precompile 6 --precompile-only --precompile-timeout-s 70 > $O/r37_pre36.log 2>&1) &
(cd .. && timeout 75 python3 -m pytest -q -p no:cacheprovider -n 4 plugins/triton/tests/test_triton_w4_rowgemv.py \
   plugins/triton/tests/test_triton_tuned.py > $O/r37_tests.txt 2>&1; echo "pytest rc=$?" >> $O/r37_tests.txt) &
wait
el "phase 1 done"; tail -2 $O/r37_tests.txt; grep -h "rel_fro\|FAILED\|Error" $O/r37_*numerics.txt | cut -c1-110; tail -2 $O/r37_pre36.log
timeout 70 python3 bench_peers.py --only dense --modes w8a8_fp8_channel --m 16 --shapes 7168x18432 8192x8192 $GL \
   --dense-variants $V8 --dense-warm-s 0.15 --dense-repeat 3 --json $O/r37_fp8_m16.json > $O/r37_fp8_m16.txt 2>&1
el "fp8 m16 rc $?"
timeout 50 python3 bench_peers.py --only dense --modes w8a8_fp8_channel --m 1 --shapes 8192x8192 $GL \
   --dense-variants $V8 --dense-warm-s 0.15 --dense-repeat 3 --json $O/r37_fp8_m1.json > $O/r37_fp8_m1.txt 2>&1
el "fp8 m1 rc $?"
timeout 60 python3 bench_peers.py --only dense --modes w4a16_int4 --m 1 --shapes 2048x4096 --peers tinygemm gemlite \
   --lean --gemlite-tune-ms 5 --dense-variants $V4 --dense-warm-s 0.15 --dense-repeat 3 --json $O/r37_int4.json \
   > $O/r37_int4.txt 2>&1
el "int4 rc $?"
timeout 45 python3 bench_peers.py --only dense --modes w4a16_mx w4a16_nvfp4 --m 1 --shapes 2048x4096 --peers none --lean \
   --dense-variants $VF --dense-warm-s 0.15 --dense-repeat 3 --json $O/r37_fp4.json > $O/r37_fp4.txt 2>&1
el "fp4 rc $?"
timeout $(( 318 - (SECONDS - T0) )) python3 -u bench_peers.py $A36 --dense-variants $V8 --dense-repeat 3 \
   --gemlite-save-config $O/gemlite_36864_m16.json --json $O/r37_fp8_36864_m16.json > $O/r37_fp8_36864.txt 2>&1
el "fp8 36864 rc $?"
for f in $O/r37_fp8_m16.txt $O/r37_fp8_m1.txt $O/r37_int4.txt $O/r37_fp4.txt $O/r37_fp8_36864.txt; do
  grep -E "repeats|M=" $f | sed 's/; SM MHz.*//' | cut -c1-200; done
