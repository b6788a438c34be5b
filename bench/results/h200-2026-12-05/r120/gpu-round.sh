#!/bin/bash
# lead R120 (thirty-seventh pass), one call (timeout_s 300, whichever card comes): bench/stream_probe.py on the three
# large FP8 shapes: the read-only ceiling of the few-row kernels' row-tile pattern against flat streams and the copy.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  cd bench
  TRITON_CACHE_DIR=/tmp/tc-a timeout "${R120_S:-240}" python3 stream_probe.py ${R120_ARGS:-} > "$OUTDIR/r120.log" 2>&1
  echo "r120 rc $?"; cat "$OUTDIR/r120.log" | cut -c1-220 )
