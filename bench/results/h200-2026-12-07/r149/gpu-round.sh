#!/bin/bash
# lead R149 (forty-fifth pass; timeout_s 600, any card). With R149_H200 set, on an H200: R141's rounds instead (cells
# (a), (d) and DeepSeek-R1 at 16 / 256 / 4096 beside vLLM's kernels, which only that card settles). Otherwise: the
# TMA FP8 GEMM (cfg TMA 1, fp8_tma.py) for #26's 256-row FP8 W8A8 cells. First, side by side: the GPU tests of
# test_triton_fp8_tma.py and of the MoE's QPDL (test_triton_moe_fp8_swap.py, not run on a GPU since _round's gdc
# argument), and a compile pass of the variants (timings discarded). Then timed alone: 2048x4096 at 256 rows with
# configs/fp8_tma_r149.json beside the shipped entry, BF16 cuBLAS, gemlite pinned and cuBLASLt, 3 repeats (cell (p));
# then 36864x7168 and 8192x8192 at 256 rows in the time left (cell (m)). The TMA GEMM was removed after this round:
# apply r149/fp8-tma.patch (against cdccf49) before running it again.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
[ -n "$R149_H200" ] && round_on_h200 && R141_TOTAL=${R149_TOTAL:-550} exec bash bench/results/h200-2026-12-07/r141/gpu-round.sh
rounds() {
  local f8=(--only dense --modes w8a8_fp8_channel --m 256 --lean --dense-variants "${R149_VARIANTS:-configs/fp8_tma_r149.json}")
  local peers=(--peers gemlite scaled_mm quantizer --gemlite-load-config configs/gemlite_fp8_channel_h200.json
    --gemlite-quantizer-rows 1 --gemlite-tune-ms 5)
  local n=${R149_NAME:-r149}
  (TRITON_CACHE_DIR=/tmp/tc-a timeout 240 python3 bench_peers.py "${f8[@]}" --shapes ${R149_SHAPES:-2048x4096 36864x7168 8192x8192} \
    --peers none --dense-repeat 1 > "$OUTDIR/$n-pre.log" 2>&1; echo "compile pass rc $?") &
  if [ -z "$R149_NO_TESTS" ]; then
    ( cd .. && round_pytest "$OUTDIR" "${n}tma" 200 plugins/triton/tests/test_triton_fp8_tma.py "replays" \
      && round_pytest "$OUTDIR" "${n}qpdl" 120 plugins/triton/tests/test_triton_moe_fp8_swap.py \
        "dependent_launch or swap_ab_on_gpu" )
  fi
  wait
  grep -E "rror" "$OUTDIR/$n-pre.log" | cut -c1-300 | head -20
  round_peers "$OUTDIR" "${n}a" 200 "${f8[@]}" "${peers[@]}" --shapes 2048x4096 --dense-repeat 3 --dense-warm-s 0.15
  [ -n "$R149_ONLY_A" ] && return 0
  round_rest "$OUTDIR" "${n}b" "${R149_TOTAL:-575}" "${f8[@]}" "${peers[@]}" --shapes 36864x7168 8192x8192 \
    --dense-repeat 3 --dense-warm-s 0.15
}
round_run rounds
