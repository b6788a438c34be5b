#!/bin/bash
# lead R116 (thirty-sixth pass; timeout_s 600, whichever card comes): the cells counted missed "at the line" in one call.
# On an H200, first R113's "a" (the #25 4096-token rows beside the BF16 mode, DeepSeek-R1 at 1 / 16 tokens), then, in
# the time left, the dense rows below. On any other card the dense rows alone (a proxy: the targets are the H200's):
# - #26 (g): NVFP4 W4A16 at 256 rows on 36864x7168 and 7168x18432 beside BF16 cuBLAS, 7 repeats each (medians);
# - #26 (k), (n), (r): FP8 W8A8 per channel at 16 rows on the three large shapes beside gemlite (its own tuning for
#   the card, 5 ms a configuration where it has none) and BF16, 5 repeats.
set -o pipefail
LIMIT=${R116_LIMIT_S:-585}
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) ROUND_OUT=${ROUND_OUT:-$OUT}/a bash bench/results/h200-2026-12-05/r113/gpu-round.sh a ;;
esac
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
left() { echo $(( LIMIT - SECONDS )); }
( round_start "$OUTDIR" || exit 1
  cd bench
  [ "$(left)" -gt 60 ] || { echo "no time left for the dense rows"; exit 0; }
  TRITON_CACHE_DIR=/tmp/tc-d timeout "$(( $(left) / 2 ))" python3 bench_peers.py --only dense --modes w4a16_nvfp4 \
    --m 256 --shapes 36864x7168 7168x18432 --peers none --lean --dense-warm-s 0.15 --dense-repeat 7 \
    --json "$OUTDIR/r116nv.json" > "$OUTDIR/r116nv.log" 2>&1
  echo "r116nv rc $?"; grep -E "repeats|M=|rror" "$OUTDIR/r116nv.log" | sed 's/; SM MHz.*//' | cut -c1-260
  [ "$(left)" -gt 40 ] || { echo "no time left for the FP8 rows"; exit 0; }
  TRITON_CACHE_DIR=/tmp/tc-d timeout "$(( $(left) - 10 ))" python3 bench_peers.py --only dense \
    --modes w8a8_fp8_channel --m 16 --shapes 7168x18432 8192x8192 36864x7168 --peers gemlite --lean \
    --gemlite-quantizer-rows 1 --gemlite-tune-ms 5 --dense-warm-s 0.15 --dense-repeat 5 \
    --json "$OUTDIR/r116fp8.json" > "$OUTDIR/r116fp8.log" 2>&1
  echo "r116fp8 rc $?"; grep -E "repeats|M=|rror" "$OUTDIR/r116fp8.log" | sed 's/; SM MHz.*//' | cut -c1-260 )
