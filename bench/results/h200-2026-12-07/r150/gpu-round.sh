#!/bin/bash
# lead R150 (forty-fifth pass; timeout_s 600, any card). On an H200: R141's rounds (cells (a), (d) and DeepSeek-R1 at
# 16 / 256 / 4096 beside vLLM's kernels), which only that card settles. On another card: Nsight Compute on #26's cell
# (p), FP8 W8A8 2048x4096 at 256 rows, to say why every larger tile is slower there with either loader (R43 on an
# H200, pointer loads; R149 on an H100, TMA): one steady call each (bench/ncu_probe.py) of the shipped entry (64 x 64
# tiles, split 2), 128 x 128 tiles split 4 on 8 warps, 64 x 64 unsplit, 128 x 64 unsplit, and cuBLASLt's FP8 GEMM
# on ready codes (scaled_mm): the details page's throughputs and each kernel's warp stalls (bench/ncu_stalls.py).
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
round_on_h200 && R141_TOTAL=${R150_TOTAL:-550} exec bash bench/results/h200-2026-12-07/r141/gpu-round.sh
T='"BLOCK_K": 128, "GROUP_M": 8, "FULL_TILE": 0, "COOP": 0, "ROWQ": 1'
rounds() {
  local ncu; ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { echo "no ncu on this machine"; return 1; }
  local i=0
  for spec in "shipped|" \
      "t128x128s4w8|{\"BLOCK_M\": 128, \"BLOCK_N\": 128, \"SPLIT_K\": 4, \"num_warps\": 8, \"num_stages\": 3, $T}" \
      "t64x64s1|{\"BLOCK_M\": 64, \"BLOCK_N\": 64, \"SPLIT_K\": 1, \"num_warps\": 4, \"num_stages\": 4, $T}" \
      "t128x64s1|{\"BLOCK_M\": 128, \"BLOCK_N\": 64, \"SPLIT_K\": 1, \"num_warps\": 4, \"num_stages\": 4, $T}" \
      "scaled_mm|"; do
    local name=${spec%%|*} cfg=${spec#*|} args=()
    [ -n "$cfg" ] && args=(--config "$cfg")
    [ "$name" = scaled_mm ] && args=(--cand scaled_mm)
    TRITON_CACHE_DIR=/tmp/tc-150 timeout 100 "$ncu" --clock-control none --set full --profile-from-start off -f \
      -o "$OUTDIR/ncu-$name" python3 ncu_probe.py --dense 2048x4096 --m 256 "${args[@]}" > "$OUTDIR/ncu-run-$name.log" 2>&1
    echo "== $name: ncu rc $?"; grep -v "^==PROF==" "$OUTDIR/ncu-run-$name.log" | grep -E "M=|Error|rror" | cut -c1-200
    "$ncu" -i "$OUTDIR/ncu-$name.ncu-rep" --page details > "$OUTDIR/ncu-details-$name.txt" 2>&1
    "$ncu" -i "$OUTDIR/ncu-$name.ncu-rep" --page source --print-source sass --csv > "$OUTDIR/ncu-sass-$name.csv" 2>&1
    grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Thr|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|L2 Hit Rate|Grid Size|Shared Memory Config" \
      "$OUTDIR/ncu-details-$name.txt" | cut -c1-150 | head -60
    python3 ncu_stalls.py "$OUTDIR/ncu-sass-$name.csv" --top 8 --regions 4 2>&1 | cut -c1-200 | head -40
    rm -f "$OUTDIR/ncu-$name.ncu-rep"
    i=$((i + 1))
  done
}
round_run rounds
