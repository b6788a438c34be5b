#!/bin/bash
# lead R134 (fortieth pass), as run inline in that call (warm H100): WS_TAIL 32 on the other tailed 4096-token entries, 3 rounds
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
r() { round_peers "$OUTDIR" r134 400 --only moe --shapes qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp gpt-oss-20b --moe-m qwen3-30b-a3b-int4=4096 qwen3-30b-a3b-int4-zp=4096 gpt-oss-20b=4096 --moe-variants configs/moe_r134.json --moe-rounds 3 --moe-launches; }
round_run r
