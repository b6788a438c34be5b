#!/bin/bash
# lead R90 (twenty-second pass), one call: SWAP 3 with WAIT 1 (the next tile decoded beside this tile's MMAs) on
# gpt-oss-20b at M=16, 256 and 4096 beside the shipped choices, this MoE's BF16 mode and the HBM limit (bench_peers,
# variants), then its GPU tests against oracle-emulation.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r90; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
cd bench
timeout 360 python3 bench_peers.py --only moe --shapes gpt-oss-20b --m 16 256 4096 --moe-launches \
  --moe-variants configs/moe_swap3_r90.json --json $W/moe_r90.json > $W/moe_r90.log 2>&1
echo "bench rc $?"; grep -vE "^\s*$" $W/moe_r90.log | tail -40 | cut -c1-300
tar czf $O/r90.tgz -C $W .
cd ..
timeout 170 python3 -m pytest -q -x plugins/triton/tests/test_triton_moe_rega.py > $W/tests.log 2>&1
echo "tests rc $?"; tail -30 $W/tests.log | cut -c1-300
tar czf $O/r90.tgz -C $W .
