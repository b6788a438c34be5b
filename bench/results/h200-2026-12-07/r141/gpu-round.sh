#!/bin/bash
# lead R141 (for the forty-fourth pass; timeout_s 600, any card, an H200 first). On an H200: DeepSeek-R1 at 1 token
# with configs/moe_r141.json (the H100's entry, K_PAIR 3 with 3 stages, and each half of it, beside the H200's R23
# entry, last timed on an H200 in R31a) for cell (a), 7 interleaved rounds; then R138's four tailed rows at 4096
# tokens beside vLLM's BF16 Triton MoE for cell (d); then DeepSeek-R1 at 16 / 256 / 4096 tokens beside vLLM's
# kernels (R132's variants) in the time left. On another card: the 1-token rows only (the same variants, 5 rounds),
# since R139 ran scripts/gpu-check whole on this code; with R141_H100=0, nothing (R141 / R141b have those rows).
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  local total=${R141_TOTAL:-560}
  if ! round_on_h200; then
    [ "${R141_H100:-1}" = 0 ] && { echo "not an H200: nothing run (R141_H100=0)"; return 0; }
    round_peers "$OUTDIR" r141ds1 $(( total - 30 )) --only moe --shapes deepseek-r1 --moe-m deepseek-r1=1 \
      --moe-variants configs/moe_r141.json --moe-rounds 5 --moe-launches
    return 0
  fi
  round_peers "$OUTDIR" r141ds1 $(( total * 20 / 100 )) --only moe --shapes deepseek-r1 --moe-m deepseek-r1=1 \
    --moe-variants configs/moe_r141.json --moe-rounds 7 --moe-launches
  round_peers "$OUTDIR" r141w4 $(( total * 40 / 100 )) "${TAILED_4096[@]}" --moe-variants configs/moe_r138.json \
    --moe-rounds 5 --moe-launches
  round_rest "$OUTDIR" r141ds "$total" --only moe --shapes deepseek-r1 --moe-m deepseek-r1=16,256,4096 \
    --moe-variants configs/moe_r141.json --moe-rounds 5 --moe-launches
}
round_run rounds
