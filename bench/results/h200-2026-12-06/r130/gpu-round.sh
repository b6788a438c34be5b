#!/bin/bash
# lead R130 (thirty-ninth pass; timeout_s 600, any card): the H100's new DeepSeek-R1 entries (R129) under test and in
# the public call. tests/test_triton_tuned.py and test_triton_moe_dropped_ids.py on the GPU; DeepSeek-R1 at 256 and
# 4096 tokens, the shipped choice beside both vLLM peers, 5 interleaved rounds. On an H200 then: R129's variants
# there (the H200 keeps its own 256-token entry and takes the H100's 4096 one), then the 1- and 16-token rows.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  ( cd .. && TRITON_CACHE_DIR=/tmp/tc-t timeout 200 python3 -m pytest -q -n 6 -p no:cacheprovider \
    plugins/triton/tests/test_triton_tuned.py plugins/triton/tests/test_triton_moe_dropped_ids.py \
    > "$OUTDIR/tests.log" 2>&1 )
  echo "tests rc $?"; grep -E "passed|failed|Error|assert" "$OUTDIR/tests.log" | tail -8 | cut -c1-400
  round_peers "$OUTDIR" r130ds 150 --only moe --shapes deepseek-r1 --moe-m deepseek-r1=256,4096 --moe-rounds 5 \
    --moe-launches
  round_on_h200 || return 0
  round_peers "$OUTDIR" r130h200 180 --only moe --shapes deepseek-r1 --moe-m deepseek-r1=256,4096 \
    --moe-variants configs/moe_r129.json --moe-rounds 5 --moe-launches
  round_rest "$OUTDIR" r130lo 560 --only moe --shapes deepseek-r1 qwen3-30b-a3b \
    --moe-m deepseek-r1=1,16 qwen3-30b-a3b=1,16 --moe-rounds 5 --moe-launches
}
round_run rounds
