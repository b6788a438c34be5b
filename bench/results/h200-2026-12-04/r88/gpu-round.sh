#!/bin/bash
# lead R88 (twenty-first pass), one call: XQ 2 with its one form (the activation launch, then nvfp4_round_kernel;
# the RSEP / RBLOCK keys and the one-program kernel removed): the W4A4 GPU tests and the sm_90 compile tests of the
# one-row and REGA groups, then Qwen3-235B-A22B at M=1 through the public call (the shipped entry), --moe-launches.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r88; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -n 8 plugins/triton/tests/test_triton_moe_w4a4.py \
  "plugins/triton/tests/test_triton_gemv.py::test_small_batch_kernels_compile_for_sm90_without_spills" \
  "plugins/triton/tests/test_triton_dense.py::test_rega_kernel_keeps_the_decoded_words_in_registers_on_sm90" \
  > $W/tests.log 2>&1
echo "tests rc $?"; grep -E "passed|failed|Error|assert" $W/tests.log | tail -8 | cut -c1-300
tar czf $O/r88.tgz -C $W .
cd bench
timeout 150 python3 bench_peers.py --only moe --shapes qwen3-235b-a22b-nvfp4 --m 1 --moe-repeat 3 --moe-launches \
  --json $W/moe_r88.json > $W/moe_r88.log 2>&1
echo "bench rc $?"; grep -vE "^\s*$" $W/moe_r88.log | tail -14 | cut -c1-230
tar czf $O/r88.tgz -C $W .
