#!/bin/bash
# lead R42 (fifteenth pass): the gpt-oss-20b 4096-token tiles of R40 (128 + 128 FC1 / 256 FC2 columns, 3 stages) on
# the other DEQUANT_MM entries at 4096 tokens (gpt-oss-120b, Qwen3-30B INT4, Qwen3-235B NVFP4), moe_bisect rounds
# against each shipped entry (configs/lead_r42_*.json), compiled first in parallel.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
T0=$SECONDS; el() { echo "[$((SECONDS - T0)) s] $*"; }
cd bench
M="gpt-oss-120b qwen3-30b-a3b-int4 qwen3-235b-a22b-nvfp4"
for m in $M; do (timeout 90 python3 -c "
import json, moe_bisect as mb
mb.precompile({}, '$m', [4096], 85, json.load(open('configs/lead_r42_$m.json')))" > $O/r42_pre_$m.log 2>&1) & done
wait; el "compiles done"; tail -qn 1 $O/r42_pre_*.log
for m in $M; do
  timeout $(( 250 - (SECONDS - T0) )) python3 moe_bisect.py --shape $m --m 4096 --variants configs/lead_r42_$m.json \
     --rounds 2 --json $O/r42_$m.json > $O/r42_$m.txt 2>&1
  el "$m rc $?"; grep -E "round|FAILED|err vs" $O/r42_$m.txt | cut -c1-200
done
