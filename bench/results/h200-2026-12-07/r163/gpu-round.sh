#!/bin/bash
# lead R163 (forty-ninth pass; timeout_s 240, any card): FP8 W8A8 per channel, 36864x7168 at 16 rows (r), with K
# splits (configs/fp8_m16_r163.json; never tried on this cell): 576 programs of 64 columns leave 132 SMs 4 or 5
# each (15% apart); 2 / 4 / 7 splits make 1152 / 2304 / 4032, 3% / 3% / 1.6% apart. 5 repeats beside gemlite, BF16.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  local w=$OUTDIR
  round_peers "$w" r163a 200 --only dense --modes w8a8_fp8_channel --m 16 --shapes 36864x7168 --peers gemlite \
    --gemlite-load-config configs/gemlite_fp8_channel_h200.json --gemlite-tune-ms 5 \
    --dense-variants configs/fp8_m16_r163.json --dense-repeat 5 --dense-warm-s 0.15 --lean
  return 0
}
round_run rounds
