#!/bin/bash
# lead R150 (forty-fifth pass; timeout_s 600, any card). On an H200: R141's rounds (cells (a), (d) and DeepSeek-R1 at
# 16 / 256 / 4096 beside vLLM's kernels), which only that card settles. On another card: the tiled FP8 GEMM's
# written-out promotion (cfg PROMO 1) for #26's 256-row FP8 W8A8 cells. sm90_compile.py's dense found the 128-row
# tiles on one warpgroup waiting on their MMAs 8 times a K tile (the float8 dot's own promotion) and once with PROMO.
# First, side by side: PROMO's GPU tests (test_triton_fp8_promo.py) and a compile pass of the variants (timings
# discarded); then timed alone: 2048x4096 at 256 rows with configs/fp8_promo_r150.json beside the shipped entry,
# BF16 cuBLAS, gemlite pinned, cuBLASLt and the quantizer, 3 repeats (cell (p)); then 36864x7168 and 8192x8192 at
# 256 rows in the time left (cell (m)). R150_NCU=1: then Nsight Compute on cell (p)'s shipped entry and two tiles
# (bench/ncu_probe.py --config; the details page and bench/ncu_stalls.py), with what is left of R150_TOTAL.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
round_on_h200 && R141_TOTAL=${R150_TOTAL:-550} exec bash bench/results/h200-2026-12-07/r141/gpu-round.sh
T='"BLOCK_K": 128, "GROUP_M": 8, "FULL_TILE": 0, "COOP": 0, "ROWQ": 1'
ncu_round() {
  local ncu; ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { echo "no ncu on this machine"; return 1; }
  for spec in "shipped|" \
      "t128x64s1|{\"BLOCK_M\": 128, \"BLOCK_N\": 64, \"SPLIT_K\": 1, \"num_warps\": 4, \"num_stages\": 4, $T}" \
      "t128x64s1promo|{\"BLOCK_M\": 128, \"BLOCK_N\": 64, \"SPLIT_K\": 1, \"num_warps\": 4, \"num_stages\": 4, \"PROMO\": 1, $T}"; do
    [ $(( ${R150_TOTAL:-575} - SECONDS )) -gt 60 ] || return 0
    local name=${spec%%|*} cfg=${spec#*|} args=()
    [ -n "$cfg" ] && args=(--config "$cfg")
    TRITON_CACHE_DIR=/tmp/tc-a timeout 60 "$ncu" --clock-control none --set full --profile-from-start off -f \
      -o "$OUTDIR/ncu-$name" python3 ncu_probe.py --dense 2048x4096 --m 256 "${args[@]}" > "$OUTDIR/ncu-run-$name.log" 2>&1
    echo "== $name: ncu rc $?"; grep -v "^==PROF==" "$OUTDIR/ncu-run-$name.log" | grep -E "M=|rror" | cut -c1-200
    "$ncu" -i "$OUTDIR/ncu-$name.ncu-rep" --page details > "$OUTDIR/ncu-details-$name.txt" 2>&1
    "$ncu" -i "$OUTDIR/ncu-$name.ncu-rep" --page source --print-source sass --csv > "$OUTDIR/ncu-sass-$name.csv" 2>&1
    grep -E "^  [a-zA-Z_].*\(|Duration|L2 Cache Throughput|Compute \(SM\) Thr|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Achieved Occupancy" \
      "$OUTDIR/ncu-details-$name.txt" | cut -c1-150 | head -30
    python3 ncu_stalls.py "$OUTDIR/ncu-sass-$name.csv" --top 6 --regions 3 2>&1 | cut -c1-200 | head -24
    rm -f "$OUTDIR/ncu-$name.ncu-rep"
  done
}
rounds() {
  round_fp8_256 "$OUTDIR" r150 "${R150_CONFIG:-configs/fp8_promo_r150.json}" test_triton_fp8_promo.py "${R150_TOTAL:-575}"
  [ -n "$R150_NCU" ] && ncu_round
  return 0
}
round_run rounds
