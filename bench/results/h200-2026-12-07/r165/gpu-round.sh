#!/bin/bash
# lead R165 (fiftieth pass; timeout_s 300, any card; run inline after R164 on the warm H100): FP8 W8A8 per channel
# 36864x7168 at 16 rows (r) with 128-wide column tiles (288 programs: 2.2 per SM) and 128-deep K tiles in 6 stages
# (configs/fp8_m16_r165.json), 5 repeats beside gemlite and BF16 cuBLAS.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  round_peers "$OUTDIR" r165r 200 --only dense --modes w8a8_fp8_channel --m 16 --shapes 36864x7168 --peers gemlite \
    --gemlite-load-config configs/gemlite_fp8_channel_h200.json --gemlite-tune-ms 5 \
    --dense-variants configs/fp8_m16_r165.json --dense-repeat 5 --dense-warm-s 0.15 --lean
}
round_run rounds
