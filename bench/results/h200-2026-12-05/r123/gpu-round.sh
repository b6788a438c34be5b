#!/bin/bash
# lead R123 (thirty-seventh pass), one call (timeout_s 400, whichever card comes): DeepSeek-R1 at one token, FC1 on
# 64- and 32-column tiles with K_PAIR (configs/moe_r123.json; R122's stand-ins streamed those patterns 2-3 us
# faster than the entries' on an H100) beside the shipped entry and the BF16 modes, 5 interleaved rounds, launches.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  cd bench
  round_peers "$OUTDIR" r123 "${R123_BENCH_S:-330}" --only moe --shapes deepseek-r1 --moe-m deepseek-r1=1 \
    --moe-variants configs/moe_r123.json --moe-rounds 5 --moe-launches )
