#!/bin/bash
# lead R112 (thirty-fifth pass). One call, ~480 s, timeout_s 600, whichever card comes (written for the H100 SXM the
# lender gives): the tuned table's sibling entries (tuned.SIBLINGS, shipped: an H100 SXM takes the H200's entry where
# it has none of its own) against the shape rules they replace there, in the same rows and interleaved rounds.
# MoE (bench_peers.py, configs/moe_r112.json 'rules' = SIBLINGS off): Qwen3-235B NVFP4 at 1 / 16 / 256 / 4096 tokens
#   (at 4096 also this MoE's BF16 mode on the H200's tiles, shipped, and on the shape rules', configs/moe_r112_bf16.json),
#   Qwen3-30B FP8 at 1 / 16 / 256, gpt-oss-20b at 16 / 256, Qwen3-30B INT4-zp at 1 / 16 / 256, DeepSeek-R1 FP8 at 1
#   (last: its 256 experts may not fit beside their BF16 copies on an 80 GB card);
#   --moe-rounds 5. Dense (configs/dense_r112.json 'rules'): NVFP4 W4A16 and FP8 W8A8 per channel on 36864x7168 and
#   8192x8192 at 1 / 16 / 256 rows (the FP8 256-row cells have no entry: the rules on both sides).
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  cd bench
  TRITON_CACHE_DIR=/tmp/tc-a timeout ${R112_MOE_LIMIT:-330} python3 bench_peers.py --only moe \
    --shapes qwen3-235b-a22b-nvfp4 qwen3-30b-a3b gpt-oss-20b qwen3-30b-a3b-int4-zp deepseek-r1 \
    --moe-m qwen3-235b-a22b-nvfp4=4096,1,16,256 deepseek-r1=1 qwen3-30b-a3b=1,16,256 gpt-oss-20b=16,256 \
    qwen3-30b-a3b-int4-zp=1,16,256 --moe-variants configs/moe_r112.json --moe-bf16-variants configs/moe_r112_bf16.json \
    --moe-rounds 5 --budget-s ${R112_MOE_BUDGET:-270} --json "$OUTDIR/r112-moe.json" > "$OUTDIR/r112-moe.log" 2>&1
  echo "moe rc $?"; grep -E "M=|interleaved|not measured" "$OUTDIR/r112-moe.log" | cut -c1-420
  TRITON_CACHE_DIR=/tmp/tc-a timeout ${R112_DENSE_LIMIT:-120} python3 bench_peers.py --only dense \
    --shapes 36864x7168 8192x8192 --modes w4a16_nvfp4 w8a8_fp8_channel --m 1 16 256 --peers scaled_mm --lean \
    --dense-variants configs/dense_r112.json --dense-repeat 3 --json "$OUTDIR/r112-dense.json" \
    > "$OUTDIR/r112-dense.log" 2>&1
  echo "dense rc $?"; grep -E "M=|x[0-9]" "$OUTDIR/r112-dense.log" | grep -v "^ *#" | cut -c1-300 | tail -30 )
