#!/bin/bash
# lead R155 (prepared in the forty-seventh pass, not run there; timeout_s 600, R155_TOTAL 560 on a fresh budget). On an H200: cell (a) of #25 (DeepSeek-R1
# at 1 token beside R141's variants, the row only that card settles). Otherwise, after R154 (every -m gpu test passed on this pass's row quantizer and
# fast-accumulating SCALED_MM), on the code since then (act_qdq_kernel's codes by the hardware conversion and, per
# token and per 1x128 group, the reciprocal's quotients: FP8 block W8A8, the two passes above K = 16384, MoE):
# 1. the GPU tests of the quantizers' users (-k as R153, and the block-scaled ones); 2. bench/token_quantizer.py (now with
# the group quantizer, division against reciprocal); 3. scripts/gpu-check's device-aware tests (GPU_TESTS=0) and its
# b12x / explain parts, 12 workers, in the time left.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
h200_rounds() {       # cell (a) only: DeepSeek-R1 at 1 token with R141's variants, 7 interleaved rounds
  round_peers "$OUTDIR" r155ds1 $(( ${R155_TOTAL:-560} - 40 )) --only moe --shapes deepseek-r1 \
    --moe-m deepseek-r1=1 --moe-variants configs/moe_r141.json --moe-rounds 7 --moe-launches
}
round_on_h200 && { round_run h200_rounds; exit $?; }
rounds() {
  local w=$OUTDIR total=${R155_TOTAL:-560}
  ( cd .. && TRITON_CACHE_DIR=/tmp/tc-t timeout 160 python3 -m pytest -q -n 12 -p no:cacheprovider -m gpu \
      plugins/triton/tests/test_triton_gpu.py plugins/triton/tests/test_triton_fp8_gemv.py \
      plugins/triton/tests/test_triton_quotient.py plugins/triton/tests/test_triton_fp8_fastacc.py \
      plugins/triton/tests/test_triton_large_m.py plugins/triton/tests/test_triton_moe_small.py \
      -k "per_token_codes or scaled_mm or w8a8 or fp8 or row_codes or fastacc or quotient or fast_nvfp4 or gemv or \
codes or block" > "$w/r155-tests.log" 2>&1
    echo "r155 tests rc $?"; grep -E "passed|failed|Error|assert" "$w/r155-tests.log" | tail -12 | cut -c1-400 )
  TRITON_CACHE_DIR=/tmp/tc-q timeout 90 python3 token_quantizer.py > "$w/r155-quant.log" 2>&1
  echo "token_quantizer rc $?"; cut -c1-300 "$w/r155-quant.log"
  local left=$(( total - SECONDS ))
  [ "$left" -gt 60 ] && ( cd .. && GPU_TESTS=0 round_gpu_check "$w" 12 $(( left - 10 )) )
  return 0
}
round_run rounds
