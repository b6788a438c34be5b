#!/bin/bash
# lead R156 (prepared in the forty-seventh pass for the next; timeout_s 600, after R155, any card). Cell (p) (FP8 W8A8
# 2048x4096 at 256 rows: the H100 entry 13.5 us, gemlite 12.9, BF16 10.5) on the new quantizer with FASTACC:
# configs/fp8_p_r156.json beside the shipped entry (PDL on it, narrower 64 x 32 / 128 x 32 tiles for more programs,
# 64-wide K tiles in 6 stages, 8 warps, split 2 without GROUP_M), BF16 cuBLAS, gemlite, cuBLASLt on ready codes and
# the quantizer, 5 repeats; then the same at 36864x7168 / 8192x8192 / 7168x18432 for the shipped choice (the
# chunked quantizer above K = 16384 is new since R153). Between them (added in the forty-eighth pass): the three FP8 cells
# at 16 rows short of 1.1x gemlite on the H100 (R154: 2048x4096 1.00x, 8192x8192 1.08x, 7168x18432 1.01x) with
# configs/fp8_m16_r156.json (PDL, split-K, the chunked row quantizer ROWQ) over the shipped entry, 3 repeats.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  local w=$OUTDIR total=${R156_TOTAL:-560}
  local f8=(--only dense --modes w8a8_fp8_channel --m 256 --lean --dense-variants configs/fp8_p_r156.json)
  local peers=(--peers gemlite scaled_mm quantizer --gemlite-load-config configs/gemlite_fp8_channel_h200.json
    --gemlite-quantizer-rows 1 --gemlite-tune-ms 5)
  round_peers "$w" r156a 240 "${f8[@]}" "${peers[@]}" --shapes 2048x4096 --dense-repeat 5 --dense-warm-s 0.15
  round_peers "$w" r156c 170 --only dense --modes w8a8_fp8_channel --m 16 --lean \
    --dense-variants configs/fp8_m16_r156.json --peers gemlite --gemlite-load-config configs/gemlite_fp8_channel_h200.json \
    --gemlite-tune-ms 5 --shapes 2048x4096 8192x8192 7168x18432 --dense-repeat 3 --dense-warm-s 0.15
  round_rest "$w" r156b "$total" "${f8[@]}" "${peers[@]}" --shapes 36864x7168 8192x8192 7168x18432 --dense-repeat 3 \
    --dense-warm-s 0.15
  return 0
}
round_run rounds
