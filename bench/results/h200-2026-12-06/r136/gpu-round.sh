#!/bin/bash
# lead R136 (fortieth pass; timeout_s 600, any card): the GPU tests of the 32-pair tail the 4096-token WS entries ship
# since R135 (test_triton_moe_ws.py's tail and dynamic-QACT tests, test_triton_tuned.py), then on an H200 R132's
# DeepSeek-R1 rounds (16 / 256 / 4096 tokens, configs/moe_r132.json, beside vLLM's kernels), on another card the
# public call (no variants) for the four tailed rows at 4096 tokens beside vLLM's BF16 Triton MoE, 5 rounds.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  local total=${R136_TOTAL:-560}
  ( cd .. && round_pytest "$OUTDIR" r136 200 plugins/triton/tests/test_triton_moe_ws.py "tail or qact_dynamic" )
  ( cd .. && TRITON_CACHE_DIR=/tmp/tc-t timeout 120 python3 -m pytest -q -n 6 -p no:cacheprovider \
    plugins/triton/tests/test_triton_tuned.py > "$OUTDIR/r136t-tests.log" 2>&1 )
  echo "r136t tests rc $?"; grep -E "passed|failed|Error|assert" "$OUTDIR/r136t-tests.log" | tail -8 | cut -c1-400
  if round_on_h200; then
    round_rest "$OUTDIR" r136ds "$total" --only moe --shapes deepseek-r1 --moe-m deepseek-r1=16,256,4096 \
      --moe-variants configs/moe_r132.json --moe-rounds 5 --moe-launches
  else
    round_rest "$OUTDIR" r136w4 "$total" --only moe --shapes qwen3-235b-a22b-nvfp4 qwen3-30b-a3b-int4 \
      qwen3-30b-a3b-int4-zp gpt-oss-20b --moe-m qwen3-235b-a22b-nvfp4=4096 qwen3-30b-a3b-int4=4096 \
      qwen3-30b-a3b-int4-zp=4096 gpt-oss-20b=4096 --moe-rounds 5 --moe-launches
  fi
}
round_run rounds
