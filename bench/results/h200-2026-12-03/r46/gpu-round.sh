#!/bin/bash
# lead R46 (sixteenth pass), one call: (1) Qwen3-30B INT4 with zero points at 2048 / 4096 tokens, the wide
# DEQUANT_MM tiles against the zero-point entries (moe_bisect now builds "-zp" experts with zero points; R45's
# "-zp" rounds timed symmetric experts); (2) the public call of every 4-bit MoE entry this pass changed, beside this
# MoE's BF16 mode and torch._grouped_mm (bench_peers --only moe, 2048 / 4096 tokens). Logs in one tarball.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r46; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
T0=$SECONDS; el() { echo "[$((SECONDS - T0)) s] $*"; }
cd bench
Z=qwen3-30b-a3b-int4-zp
(timeout 120 python3 -c "
import json, moe_bisect as mb
mb.precompile({}, '$Z', [2048, 4096], 115, json.load(open('configs/lead_r45_$Z.json')))" > $W/pre_zp.log 2>&1) &
MM="gpt-oss-20b=2048,4096 gpt-oss-120b=4096 qwen3-235b-a22b-nvfp4=4096 qwen3-30b-a3b-int4=2048,4096 $Z=2048,4096"
timeout 150 python3 bench_peers.py --only moe --shapes gpt-oss-20b gpt-oss-120b qwen3-235b-a22b-nvfp4 qwen3-30b-a3b-int4 $Z \
   --moe-m $MM --precompile 6 --precompile-only > $W/pre_moe.log 2>&1
wait; el "compiles done"; tail -qn 1 $W/pre_*.log | cut -c1-200
timeout 120 python3 moe_bisect.py --shape $Z --m 2048 4096 --variants configs/lead_r45_$Z.json --rounds 2 \
   --json $W/moe_zp.json > $W/moe_zp.txt 2>&1
el "zp rc $?"; grep -E "round|FAILED|err vs" $W/moe_zp.txt | cut -c1-200
timeout $(( 420 - (SECONDS - T0) )) python3 bench_peers.py --only moe --shapes gpt-oss-20b gpt-oss-120b qwen3-235b-a22b-nvfp4 \
   qwen3-30b-a3b-int4 $Z --moe-m $MM --json $W/moe_public.json > $W/moe_public.txt 2>&1
el "public rc $?"; grep -E "M=|config" $W/moe_public.txt | cut -c1-260
tar czf $O/r46.tgz -C $W .
