#!/bin/bash
# lead R152 (for the forty-seventh pass; timeout_s 600, any card, an H200 first). On an H200: R141's rounds (cells
# (a), (d) and DeepSeek-R1 at 16 / 256 / 4096 tokens beside vLLM's kernels), which only that card settles. On another
# card: the parts of scripts/gpu-check that R151 / R151b (H100, forty-sixth pass) did not reach on this code: the b12x
# selection tests on a detected SM90 and `oracle explain --detect` (GPU tests and device-aware tests off, benchmarks
# off); then R141's 1-token DeepSeek-R1 rows (the H100's proxy for cell (a)) in the time left.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
round_on_h200 && R141_TOTAL=${R152_TOTAL:-560} exec bash bench/results/h200-2026-12-07/r141/gpu-round.sh
rounds() {
  ( cd .. && GPU_TESTS=0 DEVICE_AWARE=0 round_gpu_check "$OUTDIR" 6 180 )
  local left=$(( ${R152_TOTAL:-560} - SECONDS ))
  [ "$left" -gt 120 ] || return 0
  round_peers "$OUTDIR" r152ds1 $(( left - 20 )) --only moe --shapes deepseek-r1 --moe-m deepseek-r1=1 \
    --moe-variants configs/moe_r141.json --moe-rounds 5 --moe-launches
}
round_run rounds
