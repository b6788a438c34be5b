#!/bin/bash
# lead R38 (fourteenth pass): the R37 entries (FP8 8192^2 M=16 6 stages, M=1 ROWQ 1024; NVFP4 2048x4096 M=1 8 warps)
# through the layer's own choice beside gemlite / BF16; then the device-aware tests not marked gpu (DEV = cuda where
# a GPU is present, else the interpreter) compiled on the GPU: gpu-check's -m gpu run never runs them there.
set -o pipefail
O=${ROUND_OUT:-/tmp/lead_out}; mkdir -p "$O"
export TRITON_CACHE_DIR=/tmp/tc-lead
T0=$SECONDS; el() { echo "[$((SECONDS - T0)) s] $*"; }
GL="--peers gemlite --lean --gemlite-load-config configs/gemlite_fp8_channel_h200.json --gemlite-quantizer-rows 1 --gemlite-tune-ms 5"
(cd bench && timeout 45 python3 bench_peers.py --only dense --modes w8a8_fp8_channel --m 1 16 --shapes 8192x8192 $GL \
   --dense-warm-s 0.15 --dense-repeat 3 --json $O/r38_fp8.json > $O/r38_fp8.txt 2>&1; el "fp8 rc $?")
(cd bench && timeout 25 python3 bench_peers.py --only dense --modes w4a16_nvfp4 --m 1 --shapes 2048x4096 --peers none --lean \
   --dense-warm-s 0.15 --dense-repeat 3 --json $O/r38_nvfp4.json > $O/r38_nvfp4.txt 2>&1; el "nvfp4 rc $?")
F="plugins/triton/tests/test_triton_gemv.py plugins/triton/tests/test_triton_moe_dropped_ids.py
 plugins/triton/tests/test_triton_moe_w4a4.py plugins/triton/tests/test_triton_moe.py plugins/triton/tests/test_triton_large_m.py
 plugins/triton/tests/test_triton_tuned.py plugins/triton/tests/test_triton_fp8_gemv.py plugins/triton/tests/test_triton_moe_small.py
 plugins/triton/tests/test_triton_w4_rowgemv.py plugins/triton/tests/test_triton_moe_fp8_swap.py
 plugins/triton/tests/test_triton_dense.py plugins/triton/tests/test_triton_moe_dequant.py"
timeout $(( 175 - (SECONDS - T0) )) python3 -m pytest -q -m "not gpu" -p no:cacheprovider -n 8 -rfE $F > $O/r38_nongpu_tests.txt 2>&1
el "non-gpu tests on the GPU rc $?"; tail -3 $O/r38_nongpu_tests.txt; grep "^FAILED\|^ERROR" $O/r38_nongpu_tests.txt | head -20
for f in $O/r38_fp8.txt $O/r38_nvfp4.txt; do grep -E "repeats|M=" $f | sed 's/; SM MHz.*//' | cut -c1-200; done
