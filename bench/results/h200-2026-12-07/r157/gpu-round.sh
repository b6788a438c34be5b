#!/bin/bash
# lead R157 (forty-eighth pass; timeout_s 600, any card, R157_TOTAL seconds in all). After R155 (act_qdq_kernel's fast codes
# equal to torch's cast on an H100) and R156 (PDL on the 16-row swap GEMM: 2048x4096 9.3 -> 8.7 us against gemlite 9.3;
# split 1 on 7168x18432 49.5 against 51.2; ROWQ 2048 on 8192x8192 26.8 against 28.9):
# 1. with ACT_QDQ_FAST_CODES shipped on: the GPU tests of the quantizers' users (R155's -k set);
# 2. the four 16-row FP8 cells with configs/fp8_m16_r157.json (combinations around R156's winners; 36864x7168, 1.09x
# in R154, with PDL / ROWQ / stages / EVICT), 3 repeats;
# 3. cell (p) (2048x4096 at 256 rows) with PDL on the shipped tile and its neighbours (configs/fp8_p_r157.json), 5 repeats.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  local w=$OUTDIR total=${R157_TOTAL:-420}
  ( cd .. && TRITON_CACHE_DIR=/tmp/tc-t timeout 120 python3 -m pytest -q -n 12 -p no:cacheprovider -m gpu -rs \
      plugins/triton/tests/test_triton_gpu.py plugins/triton/tests/test_triton_fp8_gemv.py \
      plugins/triton/tests/test_triton_quotient.py plugins/triton/tests/test_triton_large_m.py \
      plugins/triton/tests/test_triton_moe_small.py \
      -k "per_token_codes or w8a8 or fp8 or codes or block or group" > "$w/r157-tests.log" 2>&1
    echo "r157 tests rc $?"; grep -E "passed|failed|Error|assert" "$w/r157-tests.log" | tail -12 | cut -c1-400 )
  round_peers "$w" r157a 220 --only dense --modes w8a8_fp8_channel --m 16 --lean \
    --dense-variants configs/fp8_m16_r157.json --peers gemlite --gemlite-load-config configs/gemlite_fp8_channel_h200.json \
    --gemlite-tune-ms 5 --shapes 2048x4096 8192x8192 7168x18432 36864x7168 --dense-repeat 3 --dense-warm-s 0.15
  round_rest "$w" r157b "$total" --only dense --modes w8a8_fp8_channel --m 256 --lean \
    --dense-variants configs/fp8_p_r157.json --peers gemlite --gemlite-load-config configs/gemlite_fp8_channel_h200.json \
    --gemlite-tune-ms 5 --shapes 2048x4096 --dense-repeat 5 --dense-warm-s 0.15
  return 0
}
round_run rounds
