#!/bin/bash
# lead R58 (seventeenth pass), one call: the two device-aware tests R57's gpu-check failed, after their fixes (the
# bf16-mode MoE reference on the CPU; w4_ws's spill bound under Triton 3.6), and the w4_ws GPU tests once more.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r58; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs \
  "plugins/triton/tests/test_triton_tuned.py::test_the_bf16_mode_of_the_fused_moe_uses_its_entry" \
  "plugins/triton/tests/test_triton_dense.py::test_ws_kernel_compiles_for_sm90_without_spills" \
  plugins/triton/tests/test_triton_ws.py > $W/pytest-fixed.log 2>&1
echo "device-aware rc $?"; tail -4 $W/pytest-fixed.log
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rs -k "ws" plugins/triton/tests/test_triton_gpu.py > $W/pytest-ws.log 2>&1
echo "gpu ws rc $?"; tail -3 $W/pytest-ws.log
tar czf $O/r58.tgz -C $W .
