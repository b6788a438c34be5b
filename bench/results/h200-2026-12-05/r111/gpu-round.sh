#!/bin/bash
# lead R111 (written in the thirty-fourth pass, not run there: its device time ran out). One call, ~450 s,
# timeout_s 600, whichever card comes; the #25 cells want an H200.
# "c": the MoE tests on the GPU with the pass's new defaults (moe.ALIGN_PARTS, moe.TENSOR_SCALE_WIDE: every
#   test_triton_moe*.py file, the gpu-marked ones and the device-aware ones, 12 workers), then every #25 4096-token
#   4-bit row (Qwen3-235B dynamic and static, Qwen3-30B INT4 / INT4-zp, gpt-oss-20b / 120b) beside this MoE's BF16
#   mode, configs/moe_r111.json's 'prev4096' and 'stream4096' (moe_ws.GATHER_STREAM) on two rows, --moe-rounds 7
#   (R111_SHAPES, R111_ROUNDS: fewer, where the session's device time is short).
# "t" (~120 s): only the tests the new defaults reach first (the alignment tests, the WS path with ALIGN_PARTS, the
#   wide amax's bits against torch's, the W4A4 QACT tests, the swap-words MoE with the wide amax, the gather with
#   GATHER_STREAM), gpu-marked or not.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  if [ "$1" = t ]; then       # the tests the new defaults reach first, on 12 workers, no benchmark (short budgets)
    TRITON_CACHE_DIR=/tmp/tc-t timeout ${R111_TIMEOUT:-150} python3 -m pytest -q -n 12 -p no:cacheprovider \
      plugins/triton/tests/test_triton_moe.py plugins/triton/tests/test_triton_moe_small.py \
      plugins/triton/tests/test_triton_moe_ws.py -k "alignment or tensor_scale or swap_words_mid or qact or gather" \
      > "$OUTDIR/r111t-tests.log" 2>&1
    echo "r111t tests rc $?"; grep -E "passed|failed|^FAILED" "$OUTDIR/r111t-tests.log" | tail -8 | cut -c1-300
    exit 0
  fi
  F=$(ls plugins/triton/tests/test_triton_moe*.py)
  TRITON_CACHE_DIR=/tmp/tc-t timeout 200 python3 -m pytest -q -n 12 -p no:cacheprovider -m gpu $F \
    > "$OUTDIR/r111-gpu-tests.log" 2>&1
  echo "gpu-marked MoE tests rc $?"; grep -E "passed|failed|^FAILED" "$OUTDIR/r111-gpu-tests.log" | tail -6 | cut -c1-300
  TRITON_CACHE_DIR=/tmp/tc-t timeout 120 python3 -m pytest -q -n 12 -p no:cacheprovider -m "not gpu" $F \
    > "$OUTDIR/r111-dev-tests.log" 2>&1
  echo "device-aware MoE tests rc $?"; grep -E "passed|failed|^FAILED" "$OUTDIR/r111-dev-tests.log" | tail -6 | cut -c1-300
  cd bench
  # shellcheck disable=SC2086
  round_moe_4096 "$OUTDIR" r111 moe_r111.json "${R111_ROUNDS:-7}" "${R111_TIMEOUT:-220}" ${R111_SHAPES:-qwen3-235b-a22b-nvfp4 \
    qwen3-235b-a22b-nvfp4-static qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp gpt-oss-20b gpt-oss-120b} )
