#!/bin/bash
# lead R144 (for the forty-fourth pass; timeout_s 600, any card). On an H200: R141's rounds (cells (a), (d) and
# DeepSeek-R1 at 16 / 256 / 4096 beside vLLM's kernels), which only that card settles. On another card: DeepSeek-R1 at
# one token with configs/moe_r144.json (FC1 on 64- and 32-column tiles with the input row rounded by one quantization
# launch instead of by every FC1 program, QUANT_PRO off; the entry without QUANT_PRO; R123's 64-column tile with it),
# beside vLLM's kernels, 5 interleaved rounds. R144_NAME / R144_VARIANTS / R144_TESTS: another round of the same
# form (R145: r145, configs/moe_r145.json, and the GPU tests of test_triton_moe_fp8_swap.py -k R144_TESTS first;
# PF_LINES, which R145 timed, was removed after it: pf-lines.patch, against b5b3402, holds it. R146: r146 with this
# round's variants again on the quantization launch's few-row tiles, and -k swap_ab_on_gpu).
# R147: r147, configs/moe_r147.json (QPDL), -k "dependent_launch or swap_ab_on_gpu".
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
round_on_h200 && R141_TOTAL=${R144_TOTAL:-550} exec bash bench/results/h200-2026-12-07/r141/gpu-round.sh
rounds() {
  local n=${R144_NAME:-r144}
  [ -n "$R144_TESTS" ] && ( cd .. && round_pytest "$OUTDIR" "$n" 150 plugins/triton/tests/test_triton_moe_fp8_swap.py \
    "$R144_TESTS" )
  round_rest "$OUTDIR" "${n}ds1" $(( ${R144_TOTAL:-550} - 30 )) --only moe --shapes deepseek-r1 \
    --moe-m deepseek-r1=1 --moe-variants "${R144_VARIANTS:-configs/moe_r144.json}" --moe-rounds 5 --moe-launches
}
round_run rounds
