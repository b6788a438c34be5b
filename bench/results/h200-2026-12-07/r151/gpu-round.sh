#!/bin/bash
# lead R151 (forty-sixth pass; timeout_s 600, any card). R150 again without Nsight Compute (its first run, on an
# H100, returned only the profiles: the device hands back 8 files, so round_run now packs a round into round.tgz),
# (configs/fp8_promo_r151.json: R150's variants less the tiles that spill under PROMO, 128x128 on 4 warps and
# 128x256, plus 128x64 / 256x64 tiles on the two large shapes), then scripts/gpu-check's GPU tests on this code
# (benchmarks off, 12 workers) in the time left.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
round_on_h200 && R141_TOTAL=${R151_TOTAL:-560} exec bash bench/results/h200-2026-12-07/r141/gpu-round.sh
ROUND_OUT=$OUT/r150 R150_CONFIG=configs/fp8_promo_r151.json R150_TOTAL=${R151_R150_S:-260} bash bench/results/h200-2026-12-07/r150/gpu-round.sh
rounds() { ( cd .. && round_gpu_check "$OUTDIR" 12 $(( ${R151_TOTAL:-570} - SECONDS )) ); }
ROUND_OUT=$OUT/gc round_run rounds
round_pack "$OUT"
