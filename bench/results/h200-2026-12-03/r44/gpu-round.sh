#!/bin/bash
# lead R44 (sixteenth pass), one call: the MoE rounds R42 prepared (the gpt-oss-20b 4096-token tiles of R40, 128 + 128
# FC1 / 256 FC2 columns in 3 stages, on the other DEQUANT_MM entries at 4096 tokens: gpt-oss-120b, Qwen3-30B INT4,
# Qwen3-235B NVFP4; moe_bisect rounds against each shipped entry, configs/lead_r42_*.json, compiled first in
# parallel) and FP8 W8A8 row-quantizer variants (configs/lead_r44_fp8.json): the tiled 2048x4096 M=256 entry on
# fp8_rowgemv's row quantizer (R43: 14.9 against 15.6) with 64x64 tiles split in two and other stages, and ROWQ
# 512 / 1024 under the 8192x8192 M=1 / 16 and 7168x18432 M=16 entries, beside gemlite pinned.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
T0=$SECONDS; el() { echo "[$((SECONDS - T0)) s] $*"; }
cd bench
M="gpt-oss-120b qwen3-30b-a3b-int4 qwen3-235b-a22b-nvfp4"
for m in $M; do (timeout 120 python3 -c "
import json, moe_bisect as mb
mb.precompile({}, '$m', [4096], 115, json.load(open('configs/lead_r42_$m.json')))" > $O/r44_pre_$m.log 2>&1) & done
GL="--peers gemlite --lean --gemlite-load-config configs/gemlite_fp8_channel_h200.json --gemlite-quantizer-rows 1 --gemlite-tune-ms 5"
V=configs/lead_r44_fp8.json
timeout 100 python3 bench_peers.py --only dense --modes w8a8_fp8_channel --m 256 --shapes 2048x4096 $GL \
   --dense-variants $V --dense-warm-s 0.15 --dense-repeat 3 --json $O/r44_fp8_256.json > $O/r44_fp8_256.txt 2>&1
el "fp8 256 rc $?"
timeout 140 python3 bench_peers.py --only dense --modes w8a8_fp8_channel --m 1 16 --shapes 8192x8192 7168x18432 $GL \
   --dense-variants $V --dense-warm-s 0.15 --dense-repeat 3 --json $O/r44_fp8_rowq.json > $O/r44_fp8_rowq.txt 2>&1
el "fp8 rowq rc $?"
wait; el "moe compiles done"; tail -qn 1 $O/r44_pre_*.log | cut -c1-200
for m in $M; do
  timeout $(( 575 - (SECONDS - T0) )) python3 moe_bisect.py --shape $m --m 4096 --variants configs/lead_r42_$m.json \
     --rounds 2 --json $O/r44_$m.json > $O/r44_$m.txt 2>&1
  el "$m rc $?"; grep -E "round|FAILED|err vs" $O/r44_$m.txt | cut -c1-200
done
for f in $O/r44_fp8_256.txt $O/r44_fp8_rowq.txt; do grep -E "repeats|M=" $f | sed 's/; SM MHz.*//' | cut -c1-200; done
