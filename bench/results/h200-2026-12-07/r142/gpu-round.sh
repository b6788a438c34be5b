#!/bin/bash
# lead R142 (for the forty-fourth pass; timeout_s 600, any card). PF_AHEAD / PF_AHEAD2 (new this pass: each FP8
# weight row's K tile that many tiles ahead asked of L2 inside the MoE GEMMs' K loop): its GPU test (the products
# of the entries with and without it, emulation, replay; test_triton_moe_fp8_swap.py -k prefetch_ahead), then
# DeepSeek-R1 at 1 token with configs/moe_r142.json (2 / 4 / 8 tiles ahead on the H100's entry, FC2 too, 4 on the
# H200's) and at 16 tokens (2 / 4 on the H200's entry), beside vLLM's kernels, 5 interleaved rounds. On an H200,
# then R141's rounds (cells (a), (d) and DeepSeek-R1 at 16 / 256 / 4096) in the time left: R142_TOTAL counts both.
# R142_NAME: the logs' name (r142; R143 ran it as r143 on the line prefetch that replaced R142's bulk one).
# PF_AHEAD was measured slower or level and removed after R143: to run this again, apply pf-ahead.patch here
# (against 360b206: the kernel option, its launch, table keys, sm90_compile case and tests) first.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  local total=${R142_TOTAL:-560} n=${R142_NAME:-r142}
  ( cd .. && round_pytest "$OUTDIR" "$n" 150 plugins/triton/tests/test_triton_moe_fp8_swap.py "prefetch_ahead" )
  round_peers "$OUTDIR" "${n}ds1" 140 --only moe --shapes deepseek-r1 --moe-m deepseek-r1=1 \
    --moe-variants configs/moe_r142.json --moe-rounds 5 --moe-launches
  round_rest "$OUTDIR" "${n}ds16" $(( total * 60 / 100 )) --only moe --shapes deepseek-r1 --moe-m deepseek-r1=16 \
    --moe-variants configs/moe_r142.json --moe-rounds 5 --moe-launches
  round_on_h200 || return 0
  round_rest "$OUTDIR" r141w4 "$total" "${TAILED_4096[@]}" --moe-variants configs/moe_r138.json --moe-rounds 5 \
    --moe-launches
}
round_run rounds
