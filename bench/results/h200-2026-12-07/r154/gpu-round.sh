#!/bin/bash
# lead R154 (forty-seventh pass; timeout_s 600, after R153 on the same card). The per-token quantizer R153 timed
# (launch.token_codes) now serves every FP8 W8A8 per-token call, dense and MoE, and the rules' SCALED_MM sums
# without promotion, so: 1. every GPU test (-m gpu, 12 workers) beside the device-aware tests of the files this
# pass changed (compiled on the GPU: the quantizer routing, row codes, FASTACC, the quotient, large M); 2.
# bench/token_quantizer.py again (R153 printed its "shipped" column after the variants had set the switches: the
# column now reads them first; TOKEN_SPLIT_CHUNK 4096 up to 256 rows is new); 3. FP8 W8A8 per channel at 1 and 16
# rows on the four shapes, shipped choice beside BF16 cuBLAS and gemlite, in the time left.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  local w=$OUTDIR total=${R154_TOTAL:-570}
  ( cd .. && TRITON_CACHE_DIR=/tmp/tc-g timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider -n 12 \
      > "$w/r154-gpu.log" 2>&1; echo "gpu tests rc $?"; grep -E "passed|failed|Error" "$w/r154-gpu.log" | tail -12 \
      | cut -c1-300 ) &
  ( cd .. && TRITON_CACHE_DIR=/tmp/tc-d timeout 330 python3 -m pytest -q -m "not gpu" -p no:cacheprovider -n 4 \
      plugins/triton/tests/test_triton_fp8_gemv.py plugins/triton/tests/test_triton_fp8_fastacc.py \
      plugins/triton/tests/test_triton_quotient.py plugins/triton/tests/test_triton_large_m.py \
      > "$w/r154-dev.log" 2>&1; echo "device-aware rc $?"; grep -E "passed|failed|Error" "$w/r154-dev.log" | tail -8 \
      | cut -c1-300 ) &
  wait
  TRITON_CACHE_DIR=/tmp/tc-q timeout 120 python3 token_quantizer.py > "$w/r154-quant.log" 2>&1
  echo "token_quantizer rc $?"; cut -c1-300 "$w/r154-quant.log"
  round_rest "$w" r154a "$total" --only dense --modes w8a8_fp8_channel --m 1 16 --lean --peers gemlite \
    --gemlite-load-config configs/gemlite_fp8_channel_h200.json --gemlite-quantizer-rows 1 --gemlite-tune-ms 5 \
    --shapes 36864x7168 2048x4096 8192x8192 7168x18432 --dense-repeat 3 --dense-warm-s 0.15
  return 0
}
round_run rounds
