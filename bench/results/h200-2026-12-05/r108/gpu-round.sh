#!/bin/bash
# lead R108 (written in the thirty-second pass, lent no GPU; wants an H200). Supersedes R107 (never run): the shipped
# rows of R108 are R107's WS_TAIL entries, timed beside this MoE's BF16 mode in the same process.
# Ran in the thirty-second pass as R108b (t, H100), R108a (ab, H200) and R108c (b, H200), with the WS_GATHER
# variants that pass then removed (r108/gather.patch); what is left:
# "t" (~120 s): the WS_QACT GPU tests (test_triton_moe_ws.py -k qact: static and dynamic scales, AMAX_BY_WARP on
#   and off), then "b".
# "a" (~150 s): Qwen3-30B INT4 / INT4-zp and gpt-oss-20b / 120b at 4096 tokens: the shipped entries and the BF16 mode.
# "b" (~60 s): Qwen3-235B at 4096 tokens, dynamic scales (the #25 cell; the shipped WS_QACT 1 against none and
#   against AMAX_BY_WARP) and its checkpoint's static ones (against WS_QACT 2).
# "ab": the tests of "t", then the shapes of "a" and "b" in one run.
# "g" (~560 s on an H100, call it with timeout_s 600): scripts/gpu-check, benchmarks off, 12 test workers.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"    # the logs straight into OUT: a run cut short still returns them
( round_start "$OUTDIR" || exit 1
  case "$1" in
    g) round_gpu_check "$OUTDIR" 12 585; exit 0 ;;
    t|ab) round_pytest "$OUTDIR" r108 240 plugins/triton/tests/test_triton_moe_ws.py "qact" ;;
  esac
  cd bench
  case "$1" in
    a) SH="qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp gpt-oss-20b gpt-oss-120b" ;;
    ab) SH="qwen3-235b-a22b-nvfp4 qwen3-235b-a22b-nvfp4-static qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp gpt-oss-20b \
gpt-oss-120b" ;;
    *) SH="qwen3-235b-a22b-nvfp4 qwen3-235b-a22b-nvfp4-static" ;;
  esac
  MM=$(for s in $SH; do printf "%s=4096 " $s; done)
  TRITON_CACHE_DIR=/tmp/tc-a timeout ${R108_TIMEOUT:-500} python3 bench_peers.py --only moe --shapes $SH --moe-m $MM \
    --moe-launches --moe-variants configs/moe_r108.json --json "$OUTDIR/r108.json" > "$OUTDIR/r108.log" 2>&1
  echo "r108 rc $?"; grep -E "M=" "$OUTDIR/r108.log" | cut -c1-700 )
