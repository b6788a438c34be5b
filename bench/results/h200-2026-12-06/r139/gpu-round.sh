#!/bin/bash
# lead R139 (for the forty-second pass; timeout_s 600, any card, an H200 first). On an H200: R138's rounds (the four
# tailed rows at 4096 tokens beside vLLM's BF16 Triton MoE, then R132's DeepSeek-R1 rounds). On another card:
# scripts/gpu-check without its `gpu`-marked tests (R138 ran 95% of them on an H100, no failure), so the device-aware
# tests, compiled on the GPU, run in full for the first time since R131g.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
round_on_h200 && exec bash bench/results/h200-2026-12-06/r138/gpu-round.sh
rounds() { ( cd .. && GPU_TESTS=0 round_gpu_check "$OUTDIR" 12 "${R139_TOTAL:-560}" ); }
round_run rounds
