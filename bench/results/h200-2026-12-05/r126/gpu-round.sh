#!/bin/bash
# lead R126 (thirty-seventh pass; an H200 only, what the session's last 270 s allowed): DeepSeek-R1 at one token,
# the H200's shipped entry beside the H100's K_PAIR 3 / 3-stage entry (configs/moe_r126.json) and the BF16 mode,
# 7 interleaved rounds, launches. On any other card it only names the card.
set -o pipefail
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in *H200*) ;; *)
  nvidia-smi --query-gpu=name --format=csv,noheader; exit 0 ;; esac
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  cd bench
  round_peers "$OUTDIR" r126 "${R126_BENCH_S:-170}" --only moe --shapes deepseek-r1 --moe-m deepseek-r1=1 \
    --moe-variants configs/moe_r126.json --moe-rounds 7 --moe-launches )
