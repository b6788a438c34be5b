#!/bin/bash
# lead R110 (thirty-fourth pass; wants an H200: the #25 targets are H200 figures).
# "a" (~300 s): every #25 4096-token 4-bit row (Qwen3-235B dynamic and static, Qwen3-30B INT4 / INT4-zp, gpt-oss-20b
#   / 120b), the shipped entries beside this MoE's BF16 mode and configs/moe_r110.json's variants ('new4096': the
#   alignment on a program per 1024 pairs, the gather on whole rows, FC1's input amax in one launch; 'off4096':
#   the thirty-second pass's FC2 rounding), then --moe-rounds 7; first the alignment tests of test_triton_moe.py
#   on the GPU (moe.ALIGN_PARTS among them).
# "g" (~560 s, call with timeout_s 600): scripts/gpu-check with the thirty-third pass's defaults on.
# "auto": "a" on an H200, "g" on any other card (the first call of a session, whichever card comes).
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  round_checked "$OUTDIR" "$1" && exit 0
  TRITON_CACHE_DIR=/tmp/tc-t timeout 90 python3 -m pytest -q -p no:cacheprovider plugins/triton/tests/test_triton_moe.py \
    -k alignment > "$OUTDIR/r110al-tests.log" 2>&1
  echo "alignment tests rc $?"; tail -3 "$OUTDIR/r110al-tests.log" | cut -c1-300
  cd bench
  round_moe_4096 "$OUTDIR" r110 moe_r110.json 7 "${R110_TIMEOUT:-440}" qwen3-235b-a22b-nvfp4 \
    qwen3-235b-a22b-nvfp4-static qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp gpt-oss-20b gpt-oss-120b )
