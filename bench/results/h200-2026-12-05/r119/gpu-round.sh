#!/bin/bash
# lead R119 (thirty-seventh pass), one call (timeout_s 600, whichever card comes): the FP8 W8A8 per-channel swap
# tiles at 16 rows with 512- and 1024-wide K tiles (each weight row read in 512 / 1024-byte stretches a step instead
# of 256: fewer, longer DRAM bursts per row), beside the entries, gemlite (its own tuning for the card, 5 ms a
# configuration where it has none) and BF16 cuBLAS, 5 repeats (configs/fp8_bk_r119.json).
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  cd bench
  round_peers "$OUTDIR" r119 "${R119_BENCH_S:-560}" --only dense --modes w8a8_fp8_channel --m 16 \
    --shapes 7168x18432 8192x8192 36864x7168 --peers gemlite --lean --gemlite-quantizer-rows 1 --gemlite-tune-ms 5 \
    --dense-variants configs/fp8_bk_r119.json --dense-warm-s 0.15 --dense-repeat 5 )
