#!/bin/bash
# lead R153 (forty-seventh pass; timeout_s 600, any card, an H200 first). On an H200: R141's rounds (the #25 cells
# only that card settles). On another card: the per-token FP8 quantizer rebuilt (launch.token_codes:
# fp8_rowgemv.row_codes_kernel's hardware E4M3 conversion, and the quotients from the row scale's reciprocal,
# dequant.scaled_quotients, where act_qdq_kernel took ~45 instructions an element: 7.6 us for 256 x 7168 in R152)
# and the rules' SCALED_MM with use_fast_accum (launch.SCALED_MM_FAST_ACCUM; R152: 143.4 -> 127.3 us on 36864x7168):
# 1. the GPU tests of both (codes against torch's float8 cast on hostile rows; FASTACC, SCALED_MM, the FP8 GEMV and
#    swap paths that read the codes) beside a compile pass of the benchmark;
# 2. bench/token_quantizer.py (each quantizer at K 4096 / 7168 / 8192 / 18432 x M 1 / 16 / 256 / 4096, bits checked);
# 3. bench/fastacc_error.py (the error fast accumulation costs, random and same-sign sums, K up to 18432);
# 4. FP8 W8A8 per channel at 256 rows, configs/fp8_r153.json beside the shipped choice, BF16 cuBLAS, gemlite,
#    cuBLASLt on ready codes and the quantizer: 2048x4096 (cell (p)), then 36864x7168 (cell (m)), 8192x8192 and
#    7168x18432 in the time left; 3 repeats.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
round_on_h200 && R141_TOTAL=${R153_TOTAL:-560} exec bash bench/results/h200-2026-12-07/r141/gpu-round.sh
rounds() {
  local w=$OUTDIR total=${R153_TOTAL:-565}
  local f8=(--only dense --modes w8a8_fp8_channel --m 256 --lean --dense-variants configs/fp8_r153.json)
  local peers=(--peers gemlite scaled_mm quantizer --gemlite-load-config configs/gemlite_fp8_channel_h200.json
    --gemlite-quantizer-rows 1 --gemlite-tune-ms 5)
  (TRITON_CACHE_DIR=/tmp/tc-a timeout 200 python3 bench_peers.py "${f8[@]}" --shapes 2048x4096 36864x7168 8192x8192 \
    7168x18432 --peers none --dense-repeat 1 > "$w/r153-pre.log" 2>&1; echo "compile pass rc $?") &
  ( cd .. && TRITON_CACHE_DIR=/tmp/tc-t timeout 220 python3 -m pytest -q -n 6 -p no:cacheprovider -m gpu \
      plugins/triton/tests/test_triton_gpu.py plugins/triton/tests/test_triton_fp8_gemv.py \
      plugins/triton/tests/test_triton_quotient.py plugins/triton/tests/test_triton_fp8_fastacc.py \
      plugins/triton/tests/test_triton_large_m.py -k "per_token_codes or scaled_mm or w8a8 or fp8_channel or \
row_codes or fastacc or quotient or fast_nvfp4 or gemv or codes" > "$w/r153-tests.log" 2>&1
    echo "r153 tests rc $?"; grep -E "passed|failed|Error|assert" "$w/r153-tests.log" | tail -12 | cut -c1-400 )
  wait
  grep -E "rror" "$w/r153-pre.log" | cut -c1-300 | head -20
  TRITON_CACHE_DIR=/tmp/tc-q timeout 150 python3 token_quantizer.py > "$w/r153-quant.log" 2>&1
  echo "token_quantizer rc $?"; cat "$w/r153-quant.log" | cut -c1-300
  TRITON_CACHE_DIR=/tmp/tc-q timeout 90 python3 fastacc_error.py > "$w/r153-err.log" 2>&1
  echo "fastacc_error rc $?"; cat "$w/r153-err.log" | cut -c1-300
  round_peers "$w" r153a 130 "${f8[@]}" "${peers[@]}" --shapes 2048x4096 --dense-repeat 3 --dense-warm-s 0.15
  round_rest "$w" r153b "$total" "${f8[@]}" "${peers[@]}" --shapes 36864x7168 8192x8192 7168x18432 --dense-repeat 3 \
    --dense-warm-s 0.15
  return 0
}
round_run rounds
