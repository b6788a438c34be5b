#!/bin/bash
# lead R82 (twenty-first pass), one call: the one-token NVFP4 W4A4 MoE on w4_rega's MoE mode (XQ 2: FC1 and FC2 as
# register-A wgmma on the exact byte-table weights, one program for the activation and FC2's input rounding, the
# top-k sum): its GPU tests and the dense REGA regressions, then Qwen3-235B-A22B at M=1 through bench_peers (the
# shipped XQ 1 entry, this MoE's BF16 mode, _grouped_mm, the HBM limit) beside seven XQ 2 variants
# (configs/moe_w4a4_xq2_r82.json), three interleaved repeats.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r82; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
[ -n "$PROBE_ONLY" ] || timeout 240 python3 -m pytest -q -n 8 plugins/triton/tests/test_triton_moe_w4a4.py \
  plugins/triton/tests/test_triton_rega_nvfp4.py plugins/triton/tests/test_triton_gpu.py -k "xq or act_round or rega" \
  > $W/tests.log 2>&1
echo "tests rc $?"; grep -E "passed|failed|Error|assert" $W/tests.log | tail -12 | cut -c1-300
tar czf $O/r82.tgz -C $W .
cd bench
timeout 300 python3 bench_peers.py --only moe --shapes qwen3-235b-a22b-nvfp4 --m 1 --moe-repeat 3 \
  --moe-variants configs/moe_w4a4_xq2_r82.json --json $W/moe_r82.json > $W/moe_r82.log 2>&1
echo "bench rc $?"; grep -vE "^\s*$" $W/moe_r82.log | tail -40 | cut -c1-200
tar czf $O/r82.tgz -C $W .
