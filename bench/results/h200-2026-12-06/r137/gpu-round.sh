#!/bin/bash
# lead R137 (fortieth pass), as run inline in that call (warm H100): the public call at 4096 tokens beside vLLM's BF16 MoE, 3 rounds
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
r() { round_peers "$OUTDIR" r137 200 --budget-s 170 --only moe --shapes qwen3-235b-a22b-nvfp4 qwen3-30b-a3b-int4-zp gpt-oss-20b --moe-m qwen3-235b-a22b-nvfp4=4096 qwen3-30b-a3b-int4-zp=4096 gpt-oss-20b=4096 --moe-rounds 3 --moe-launches; }
round_run r
