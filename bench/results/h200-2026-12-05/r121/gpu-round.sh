#!/bin/bash
# lead R121 (thirty-seventh pass), one call (timeout_s 600, whichever card comes): the FP8 W8A8 per-channel swap
# GEMM's weights streaming while its quantizer runs. R120 (bench/stream_probe.py --ablate 16) found the quantizer
# 2-4.6 us of every 16-row call, hardly overlapped; here, beside the entries at 16 rows: PDL off / on, the row heads
# asked of L2 before the wait (PF_HEAD 512-2048 bytes), the first 1 / 2 weight tiles loaded into registers before it
# (PRE_W, new), gemlite and BF16, 5 repeats (configs/fp8_pre_r121.json).
# 1. GPU tests: PRE_W bit for bit the ordinary launches (+ replay), and the FP8 swap / PDL tests.
# 2. bench_peers.py's dense rows.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  round_pytest "$OUTDIR" prew "${R121_TEST_S:-150}" plugins/triton/tests/test_triton_gpu.py "fp8_swap"
  cd bench
  round_peers "$OUTDIR" r121 "${R121_BENCH_S:-400}" --only dense --modes w8a8_fp8_channel --m 16 \
    --shapes 7168x18432 8192x8192 36864x7168 --peers gemlite --lean --gemlite-quantizer-rows 1 --gemlite-tune-ms 5 \
    --dense-variants configs/fp8_pre_r121.json --dense-warm-s 0.15 --dense-repeat 5 )
