#!/bin/bash
# lead R45 (sixteenth pass), one call: (1) the R44 wide DEQUANT_MM tiles on the cells R44 did not time: Qwen3-30B
# INT4 with zero points at 2048 / 4096 tokens, symmetric INT4 and gpt-oss-20b at 2048 (moe_bisect against each
# entry); (2) the R44 FP8 entries through the layer's choice beside gemlite pinned (2048x4096 M=256 with the R14
# entry as a variant, 8192x8192 M=16) and variants of 7168x18432 / 8192x8192 M=16 (configs/lead_r45_fp8.json);
# (3) INT4 2048x4096 M=1 W4ROW columns x warps beside tinygemm (configs/lead_r45_int4.json). Logs go into one
# tarball (the device returns at most 8 files).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r45; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
T0=$SECONDS; el() { echo "[$((SECONDS - T0)) s] $*"; }
cd bench
M="qwen3-30b-a3b-int4-zp qwen3-30b-a3b-int4 gpt-oss-20b"
for m in $M; do (timeout 120 python3 -c "
import json, moe_bisect as mb
mb.precompile({}, '$m', [2048, 4096] if '$m'.endswith('zp') else [2048], 115, json.load(open('configs/lead_r45_$m.json')))" > $W/pre_$m.log 2>&1) & done
GL="--peers gemlite --lean --gemlite-load-config configs/gemlite_fp8_channel_h200.json --gemlite-quantizer-rows 1 --gemlite-tune-ms 5"
timeout 60 python3 bench_peers.py --only dense --modes w8a8_fp8_channel --m 256 --shapes 2048x4096 $GL \
   --dense-variants configs/lead_r45_fp8.json --dense-warm-s 0.15 --dense-repeat 3 --json $W/fp8_256.json > $W/fp8_256.txt 2>&1
el "fp8 256 rc $?"
timeout 120 python3 bench_peers.py --only dense --modes w8a8_fp8_channel --m 16 --shapes 8192x8192 7168x18432 $GL \
   --dense-variants configs/lead_r45_fp8.json --dense-warm-s 0.15 --dense-repeat 3 --json $W/fp8.json > $W/fp8.txt 2>&1
el "fp8 16 rc $?"
timeout 80 python3 bench_peers.py --only dense --modes w4a16_int4 --m 1 --shapes 2048x4096 --peers tinygemm --lean \
   --dense-variants configs/lead_r45_int4.json --dense-warm-s 0.15 --dense-repeat 3 --json $W/int4.json > $W/int4.txt 2>&1
el "int4 rc $?"
wait; el "moe compiles done"; tail -qn 1 $W/pre_*.log | cut -c1-200
for m in $M; do
  ms=2048; [ $m = qwen3-30b-a3b-int4-zp ] && ms="2048 4096"
  timeout $(( 560 - (SECONDS - T0) )) python3 moe_bisect.py --shape $m --m $ms --variants configs/lead_r45_$m.json \
     --rounds 2 --json $W/moe_$m.json > $W/moe_$m.txt 2>&1
  el "$m rc $?"; grep -E "round|FAILED|err vs" $W/moe_$m.txt | cut -c1-200
done
for f in $W/fp8_256.txt $W/fp8.txt $W/int4.txt; do grep -E "repeats|M=" $f | sed 's/; SM MHz.*//' | cut -c1-200; done
tar czf $O/r45.tgz -C $W .
