#!/bin/bash
# lead R98b (twenty-sixth pass; not run: no GPU was lent, so it waits for the next session), one call (~300 s):
# which side bounds the MoE's WS launches. r98/ablate.patch (device copy only) lets WS_ABLATE=1 drop the decode
# (the MMA warps alone: what WS_HALF can shorten) and WS_ABLATE=2 the wgmma (the decode warps alone: what only
# fewer decodes, larger blocks, can shorten); each in its own process and Triton cache, gpt-oss-20b at 4096 tokens
# and Qwen3-30B INT4 at 2048, the shipped entry and configs/moe_half_r98.json's variants, every launch's time.
# The ablated outputs are wrong by design: read the kernels' device times only.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r98b; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  git apply bench/results/h200-2026-12-05/r98/ablate.patch || exit 1
  export PYTHONUNBUFFERED=1
  cd bench
  for a in 0 1 2; do
    WS_ABLATE=$a TRITON_CACHE_DIR=/tmp/tc-abl$a timeout 140 python3 bench_peers.py --only moe \
      --shapes gpt-oss-20b qwen3-30b-a3b-int4 --moe-m gpt-oss-20b=4096 qwen3-30b-a3b-int4=2048 --moe-launches \
      --moe-variants configs/moe_half_r98.json --json $W/moe_r98b_abl$a.json > $W/moe_r98b_abl$a.log 2>&1
    echo "ablate $a rc $?"; grep -E "w4_ws_kernel" $W/moe_r98b_abl$a.log | cut -c1-220
  done )
tar czf $O/r98b.tgz -C $W .
