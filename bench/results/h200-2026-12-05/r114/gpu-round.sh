#!/bin/bash
# lead R114 (thirty-sixth pass), one call (timeout_s 600, whichever card comes): the FP8 swap kernel's weight tiles
# by TMA (gemm.fp8_swap_kernel WTMA, Triton's pipeline over descriptor loads).
# 1. GPU tests: WTMA bit for bit the plain loads (+ replay), and the FP8 swap tests it touches.
# 2. bench_peers.py's dense FP8 W8A8 per-channel rows at 1 and 16 tokens on the three large shapes, the entries
#    beside WTMA on them (configs/fp8_wtma_r114.json: the entry's tiles, deeper rings, 128-row tiles), gemlite on
#    its own tuning for this card (autotuned 5 ms a config where its file has none) and BF16 cuBLAS, 3 repeats.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  round_pytest "$OUTDIR" wtma "${R114_TEST_S:-150}" plugins/triton/tests/test_triton_gpu.py "fp8_swap"
  cd bench
  round_peers "$OUTDIR" r114 "${R114_BENCH_S:-380}" --only dense --modes w8a8_fp8_channel --m 1 16 \
    --shapes 7168x18432 8192x8192 36864x7168 --peers gemlite --lean --gemlite-quantizer-rows 1 --gemlite-tune-ms 5 \
    --dense-variants configs/fp8_wtma_r114.json --dense-warm-s 0.15 --dense-repeat 3 )
