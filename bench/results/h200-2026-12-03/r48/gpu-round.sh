#!/bin/bash
# lead R48 (sixteenth pass), one call: this MoE's BF16 mode (the baseline oracle-bf16) with the wide GEMM tiles that
# the 4-bit DEQUANT_MM entries took this pass (128 FC1 columns per gate/up accumulator, 256 FC2 columns, 3 stages;
# bench_peers --moe-bf16-variants configs/lead_r48_bf16.json) beside its rule's tiles, the 4-bit entries' public call
# and torch._grouped_mm, at 2048 / 4096 tokens. Logs in one tarball.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r48; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
T0=$SECONDS; el() { echo "[$((SECONDS - T0)) s] $*"; }
cd bench
Z=qwen3-30b-a3b-int4-zp
S="gpt-oss-20b gpt-oss-120b qwen3-235b-a22b-nvfp4 qwen3-30b-a3b-int4 $Z"
MM="gpt-oss-20b=2048,4096 gpt-oss-120b=4096 qwen3-235b-a22b-nvfp4=4096 qwen3-30b-a3b-int4=2048,4096 $Z=2048,4096"
timeout 150 python3 bench_peers.py --only moe --shapes $S --moe-m $MM --precompile 6 --precompile-only > $W/pre_moe.log 2>&1
el "compiles rc $?"; tail -n 1 $W/pre_moe.log | cut -c1-200
timeout 300 python3 bench_peers.py --only moe --shapes $S --moe-m $MM --moe-bf16-variants configs/lead_r48_bf16.json \
   --json $W/moe_bf16.json > $W/moe_bf16.txt 2>&1
el "moe rc $?"; grep -E "M=|rror" $W/moe_bf16.txt | cut -c1-330
tar czf $O/r48.tgz -C $W .
