#!/bin/bash
# lead R124 (thirty-seventh pass; timeout_s 600, whichever card comes).
# Any card: tests/test_bench_stream_probe.py on the GPU (stream_probe's kernels read every word once).
# On an H200 then, the cells only that card can settle: DeepSeek-R1 at 1 and 16 tokens beside the H100's K_PAIR
# entry and R118's variants (configs/moe_r118.json), 5 interleaved rounds; every #25 4096-token 4-bit row beside
# this MoE's BF16 mode (R113 "a", configs/moe_r113.json), 7 rounds; in the time left R116's dense rows.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
( round_start "$OUTDIR" || exit 1
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_bench_stream_probe.py > "$OUTDIR/probe-tests.log" 2>&1
  echo "probe tests rc $?"; tail -2 "$OUTDIR/probe-tests.log"
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in *H200*) ;; *) exit 0 ;; esac
  cd bench
  round_peers "$OUTDIR" r124ds 130 --only moe --shapes deepseek-r1 --moe-m deepseek-r1=1,16 \
    --moe-variants configs/moe_r118.json --moe-rounds 5 --moe-launches
  round_moe_4096 "$OUTDIR" r124 moe_r113.json 7 300 qwen3-235b-a22b-nvfp4 qwen3-235b-a22b-nvfp4-static \
    qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp gpt-oss-20b gpt-oss-120b
  left=$(( 560 - SECONDS )); [ "$left" -gt 60 ] || exit 0
  round_peers "$OUTDIR" r124fp8 "$left" --only dense --modes w8a8_fp8_channel --m 16 \
    --shapes 7168x18432 8192x8192 36864x7168 --peers gemlite --lean --gemlite-quantizer-rows 1 --gemlite-tune-ms 5 \
    --dense-warm-s 0.15 --dense-repeat 5 )
