#!/bin/bash
# lead R92 (twenty-second pass), one call: SWAP 3's GPU tests against oracle-emulation (now with XP: the activations
# permuted into the copy order first), then XP beside R91's best tiles on gpt-oss-20b, gpt-oss-120b and Qwen3-235B-A22B
# NVFP4 W4A4 at M=16 and 256, with the shipped choices, this MoE's BF16 mode and the HBM limit (bench_peers).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r92; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
timeout 220 python3 -m pytest -q plugins/triton/tests/test_triton_moe_rega.py > $W/tests.log 2>&1
echo "tests rc $?"; tail -30 $W/tests.log | cut -c1-300
tar czf $O/r92.tgz -C $W .
cd bench
timeout 300 python3 bench_peers.py --only moe --shapes gpt-oss-20b gpt-oss-120b qwen3-235b-a22b-nvfp4 \
  --moe-m gpt-oss-20b=16,256 gpt-oss-120b=256 qwen3-235b-a22b-nvfp4=16,256 --moe-launches \
  --moe-variants configs/moe_swap3_r92.json --json $W/moe_r92.json > $W/moe_r92.log 2>&1
echo "bench rc $?"; grep -E "M=" $W/moe_r92.log | cut -c1-200
tar czf $O/r92.tgz -C $W .
