#!/bin/bash
# lead R122 (thirty-seventh pass), one call (timeout_s 300, whichever card comes): bench/stream_probe.py on dense
# stand-ins for DeepSeek-R1's one-token MoE launches (#25 (a)): FC1 reads 8 experts x 4096 rows x 7168 (the gate
# and up rows of a 128-column tile: 256 rows a program), FC2 8 x 7168 rows x 2048; the loads alone at the entries'
# tiles and others, beside the copy, to tell the access pattern's bound from the kernels' own losses (R118 on an
# H100: FC1 85.0 us, FC2 44.2).
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  cd bench
  TRITON_CACHE_DIR=/tmp/tc-a timeout 120 python3 stream_probe.py --shapes 32768x7168 \
    --tiles 256x128:1:4:8 256x128:1:3:8 256x256:1:3:8 256x128:1:6:8 128x128:1:4:4 128x256:1:4:4 64x256:1:4:4 \
    > "$OUTDIR/r122-fc1.log" 2>&1
  echo "fc1 rc $?"; cut -c1-200 "$OUTDIR/r122-fc1.log"
  TRITON_CACHE_DIR=/tmp/tc-a timeout 120 python3 stream_probe.py --shapes 57344x2048 \
    --tiles 128x128:1:3:4 128x128:1:4:4 128x256:1:3:4 64x256:1:4:4 256x128:1:4:8 64x128:1:6:4 128x512:1:2:4 \
    > "$OUTDIR/r122-fc2.log" 2>&1
  echo "fc2 rc $?"; cut -c1-200 "$OUTDIR/r122-fc2.log" )
