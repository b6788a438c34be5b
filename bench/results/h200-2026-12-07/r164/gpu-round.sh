#!/bin/bash
# lead R164 (fiftieth pass; timeout_s 600, any card). On an H200: R141's H200 branch (cell (a) of #25, the tailed
# 4096-token rows for (d), DeepSeek-R1 at 16 / 256 / 4096) in R164_TOTAL seconds, with the H100's FP8 entries timed
# on the H200 (configs/fp8_h100_on_h200_r161.json, R161a's rows) after cell (a). On another card: R163's round,
# FP8 W8A8 per channel 36864x7168 at 16 rows (r) with 2 / 4 / 7 K splits (configs/fp8_m16_r163.json); with
# R164_H100=0, nothing (R164 ran that round on an H100 in the fiftieth pass).
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  local total=${R164_TOTAL:-540} w=$OUTDIR
  if round_on_h200; then
    round_peers "$w" r164ds1 $(( total * 20 / 100 )) --only moe --shapes deepseek-r1 --moe-m deepseek-r1=1 \
      --moe-variants configs/moe_r141.json --moe-rounds 7 --moe-launches
    round_peers "$w" r164f8 160 --only dense --modes w8a8_fp8_channel --m 16 256 --shapes 2048x4096 7168x18432 \
      --peers gemlite --gemlite-load-config configs/gemlite_fp8_channel_h200.json --gemlite-tune-ms 5 \
      --dense-variants configs/fp8_h100_on_h200_r161.json --dense-repeat 3 --dense-warm-s 0.15 --lean
    round_peers "$w" r164w4 $(( total * 30 / 100 )) "${TAILED_4096[@]}" --moe-variants configs/moe_r138.json \
      --moe-rounds 5 --moe-launches
    round_rest "$w" r164ds "$total" --only moe --shapes deepseek-r1 --moe-m deepseek-r1=16,256,4096 \
      --moe-variants configs/moe_r141.json --moe-rounds 5 --moe-launches
    return 0
  fi
  [ "${R164_H100:-1}" = 0 ] && { echo "not an H200: nothing run (R164_H100=0)"; return 0; }
  round_peers "$w" r164r 200 --only dense --modes w8a8_fp8_channel --m 16 --shapes 36864x7168 --peers gemlite \
    --gemlite-load-config configs/gemlite_fp8_channel_h200.json --gemlite-tune-ms 5 \
    --dense-variants configs/fp8_m16_r163.json --dense-repeat 5 --dense-warm-s 0.15 --lean
  return 0
}
round_run rounds
