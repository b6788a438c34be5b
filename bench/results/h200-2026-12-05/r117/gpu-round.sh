#!/bin/bash
# lead R117 (thirty-sixth pass, the session's last call; timeout_s 600, whichever card comes).
# On an H200: R116 (R113's "a", then the at-the-line dense rows). On any other card: Nsight Compute (--set full,
# --clock-control none) on one warmed steady call each (bench/ncu_probe.py) of
# - DeepSeek-R1's fused MoE at one token (#25 (a): FC1 / FC2 stream at 0.90 / 0.88 of the copy rate, the cell's
#   reason says "each K step waits on the float8 MMA before promoting the block scales"; never profiled),
# - the FP8 W8A8 per-channel 7168x18432 layer at 16 rows, ours (quantizer + swap GEMM) and gemlite's (#26 (n)),
# keeping the details pages and the warp-stall summaries (bench/ncu_stalls.py) of each launch.
set -o pipefail
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) exec bash bench/results/h200-2026-12-05/r116/gpu-round.sh ;;
esac
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"; W=/tmp/r117; mkdir -p $W
( round_start "$OUTDIR" || exit 1
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  echo "ncu: $NCU"
  cd bench
  for spec in "ds1|--moe deepseek-r1 --m 1" "fp8o|--dense 7168x18432 --m 16 --cand oracle" \
              "fp8g|--dense 7168x18432 --m 16 --cand gemlite"; do
    tag=${spec%%|*}; args=${spec#*|}
    # shellcheck disable=SC2086
    TRITON_CACHE_DIR=/tmp/tc-n timeout 170 "$NCU" --profile-from-start off --clock-control none --set full \
      -f -o "$W/$tag" python3 ncu_probe.py $args > "$OUTDIR/ncu-run-$tag.log" 2>&1
    echo "ncu $tag rc $?"; grep -v "^==PROF==" "$OUTDIR/ncu-run-$tag.log" | grep -E "M=|Error|rror" | cut -c1-200
    [ -f "$W/$tag.ncu-rep" ] || continue
    "$NCU" -i "$W/$tag.ncu-rep" --page details > "$OUTDIR/ncu-details-$tag.txt" 2>&1
    "$NCU" -i "$W/$tag.ncu-rep" --page source --print-source sass --csv > "$W/sass-$tag.csv" 2>&1
    python3 ncu_stalls.py "$W/sass-$tag.csv" > "$OUTDIR/ncu-stalls-$tag.txt" 2>&1
    grep -E "^  [a-z_0-9]+.*\(|Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|Achieved Occupancy|Registers Per|Grid Size|Block Size|Warp Cycles Per Issued|No Eligible" \
      "$OUTDIR/ncu-details-$tag.txt" | cut -c1-150 | head -60
    head -8 "$OUTDIR/ncu-stalls-$tag.txt" | cut -c1-200
  done
  tar czf "$OUTDIR/r117-sass.tgz" -C $W $(cd $W && ls sass-*.csv 2>/dev/null) )
