#!/bin/bash
# (SK is not in the code: this ran an earlier form of r77/stream-k.patch, one division or two a K step)
# lead R75 (twentieth pass), one call: where R74's stream-K time went (configs/ws_r75.json): SK equal to the tile count
# (one whole tile a program in the plain grid's order: SK's step arithmetic and in-loop finish alone) and twice it
# (each tile shared by two adjacent programs), against the shipped entries.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r75; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
cd bench
timeout 250 python3 rega_probe.py --m 256 --cfgs configs/ws_r75.json --fmts int4 nvfp4 --repeat 3 \
  --shapes 2048x4096 36864x7168 7168x18432 --budget-s 230 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -E "^    [sBw]|^[0-9]" $W/probe256.log | sed -e "s/num_warps 4 BM 256 //" | cut -c1-140
tar czf $O/r75.tgz -C $W .
