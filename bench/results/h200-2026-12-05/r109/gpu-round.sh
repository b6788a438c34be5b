#!/bin/bash
# lead R109 (thirty-third pass; wants an H200: the #25 targets are H200 figures). Ran as R109a ("ta") and R109g
# (r108/gpu-round.sh g) on an H100 in that pass (rounds.md).
# "t" (~90 s): the new GPU tests: the NVFP4 rounding's quotients by reciprocal and FMAs (test_triton_quotient.py:
#   the same bits as the division) and WS_QACT's dynamic form with FC2's input rounded on the live 16-row tiles
#   (test_triton_moe_ws.py -k qact_dynamic, the "live_tiles" case with FAST_NVFP4_DIV).
# "a" (~250 s): every #25 4096-token 4-bit row (Qwen3-235B dynamic and static, Qwen3-30B INT4 / INT4-zp, gpt-oss-20b
#   / 120b), the shipped entries beside this MoE's BF16 mode and, for Qwen3-235B, the live-tiles / fast-division
#   variants (configs/moe_r109.json), then --moe-rounds 7: all of a row's candidates again in seven interleaved
#   rounds (ABBA), the median and worst ratio to the BF16 mode of the same round (R108a / R108c put the BF16 mode
#   15% apart on one H200 in two processes: one sequential pass does not settle a cell at the line).
# "ta": "t" then "a". "g" (~560 s, call with timeout_s 600): scripts/gpu-check, benchmarks off, 12 test workers.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  case "$1" in
    g) round_gpu_check "$OUTDIR" 12 585; exit 0 ;;
    t|ta) round_pytest "$OUTDIR" r109q 150 plugins/triton/tests/test_triton_quotient.py "gpu"
          round_pytest "$OUTDIR" r109w 200 plugins/triton/tests/test_triton_moe_ws.py "qact_dynamic" ;;
  esac
  [ "$1" = t ] && exit 0
  cd bench
  SH="qwen3-235b-a22b-nvfp4 qwen3-235b-a22b-nvfp4-static qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp gpt-oss-20b gpt-oss-120b"
  MM=$(for s in $SH; do printf "%s=4096 " $s; done)
  TRITON_CACHE_DIR=/tmp/tc-a timeout ${R109_TIMEOUT:-420} python3 bench_peers.py --only moe --shapes $SH --moe-m $MM \
    --moe-launches --moe-variants configs/moe_r109.json --moe-rounds 7 --json "$OUTDIR/r109.json" \
    > "$OUTDIR/r109.log" 2>&1
  echo "r109 rc $?"; grep -E "M=|interleaved" "$OUTDIR/r109.log" | cut -c1-600 )
