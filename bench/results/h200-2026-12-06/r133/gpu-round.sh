#!/bin/bash
# lead R133 (fortieth pass; timeout_s 600, any card): Qwen3-235B NVFP4 W4A4 at 4096 tokens (cell (d)), the shipped
# WS entry beside configs/moe_r133.json's one-change variants (the tail block 32 / 48 / 96 pairs, 2 or 3 ring slots,
# PT 1), vLLM's BF16 Triton MoE and this MoE's BF16 mode in the same process, 5 interleaved rounds.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  round_peers "$OUTDIR" r133qw ${R133_TOTAL:-560} --only moe --shapes qwen3-235b-a22b-nvfp4 \
    --moe-m qwen3-235b-a22b-nvfp4=4096 --moe-variants configs/moe_r133.json --moe-rounds 5 --moe-launches
}
round_run rounds
