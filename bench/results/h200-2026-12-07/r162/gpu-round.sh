#!/bin/bash
# lead R162 (forty-ninth pass; timeout_s 400, any card): FP8 W8A8 per channel at 16 rows on the two cells short of
# 1.1x gemlite on the H100 (36864x7168 (r), 8192x8192 (k)) with wider / narrower tiles, deeper K tiles and the
# split-row quantizer (configs/fp8_m16_r162.json), 5 repeats beside gemlite and BF16 cuBLAS, one process per shape.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  local w=$OUTDIR
  local peers=(--peers gemlite --gemlite-load-config configs/gemlite_fp8_channel_h200.json --gemlite-tune-ms 5
    --dense-variants configs/fp8_m16_r162.json --dense-repeat 5 --dense-warm-s 0.15 --lean)
  round_peers "$w" r162a 170 --only dense --modes w8a8_fp8_channel --m 16 --shapes 36864x7168 "${peers[@]}"
  round_peers "$w" r162b 130 --only dense --modes w8a8_fp8_channel --m 16 --shapes 8192x8192 "${peers[@]}"
  return 0
}
round_run rounds
