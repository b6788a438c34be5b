#!/bin/bash
# lead R89 (twenty-second pass), one call: SWAP 3 (moe_rega: the MoE's E2M1 experts on w4_rega's grouped register-A
# mode) on gpt-oss-20b at M=256 beside the rule's SWAP 2 tiles, this MoE's BF16 mode and the HBM limit (bench_peers,
# variants), then its GPU tests against oracle-emulation.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r89; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
cd bench
timeout 330 python3 bench_peers.py --only moe --shapes gpt-oss-20b --m 256 --moe-launches \
  --moe-variants configs/moe_swap3_r89.json --json $W/moe_r89.json > $W/moe_r89.log 2>&1
echo "bench rc $?"; grep -vE "^\s*$" $W/moe_r89.log | tail -40 | cut -c1-300
tar czf $O/r89.tgz -C $W .
cd ..
timeout 200 python3 -m pytest -q -x plugins/triton/tests/test_triton_moe_rega.py > $W/tests.log 2>&1
echo "tests rc $?"; tail -30 $W/tests.log | cut -c1-300
tar czf $O/r89.tgz -C $W .
