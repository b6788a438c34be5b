#!/bin/bash
# lead R161 (prepared in the forty-eighth pass for the next; timeout_s 600, any card, R161_TOTAL seconds in all).
# Any card: the FP8 entries R158-R160 found (timed there as --dense-variants) run as shipped: test_triton_tuned.py's
# GPU tests, then 2048x4096 at 16 / 256 rows and 7168x18432 at 16 rows through the public call beside gemlite and
# BF16 cuBLAS, 5 repeats, with the H100 entries' configs (configs/fp8_h100_on_h200_r161.json) as variants, which on an
# H200 times them against its own entries; then 2048x4096 at 256 rows alone in a process of its own (r161c: BF16
# cuBLAS took 10.6 us on the forty-eighth pass's first H100 and 11.5-11.8 on its second). On an H200, then cell (a)
# of #25 (DeepSeek-R1 at 1 token, R141's variants, 7 rounds) in the time left.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
rounds() {
  local w=$OUTDIR total=${R161_TOTAL:-560}
  ( cd .. && TRITON_CACHE_DIR=/tmp/tc-t timeout 90 python3 -m pytest -q -n 8 -p no:cacheprovider -m gpu \
      plugins/triton/tests/test_triton_tuned.py > "$w/r161-tests.log" 2>&1
    echo "r161 tests rc $?"; grep -E "passed|failed|Error|assert" "$w/r161-tests.log" | tail -6 | cut -c1-400 )
  local peers=(--peers gemlite --gemlite-load-config configs/gemlite_fp8_channel_h200.json --gemlite-tune-ms 5
    --dense-variants configs/fp8_h100_on_h200_r161.json --dense-repeat 5 --dense-warm-s 0.15 --lean)
  round_peers "$w" r161a 150 --only dense --modes w8a8_fp8_channel --m 16 256 --shapes 2048x4096 "${peers[@]}"
  round_peers "$w" r161c 90 --only dense --modes w8a8_fp8_channel --m 256 --shapes 2048x4096 "${peers[@]}"
  round_peers "$w" r161b 120 --only dense --modes w8a8_fp8_channel --m 16 --shapes 7168x18432 "${peers[@]}"
  round_on_h200 && round_rest "$w" r161ds1 "$total" --only moe --shapes deepseek-r1 --moe-m deepseek-r1=1 \
    --moe-variants configs/moe_r141.json --moe-rounds 7 --moe-launches
  return 0
}
round_run rounds
