#!/bin/bash
# lead R47 (sixteenth pass), one call on the pass's final code: scripts/gpu-check's tests (GPU-marked, device-aware,
# b12x on SM90) with every tuned entry of this pass, and the public call of the INT4 zero-point MoE at 2048 / 4096
# tokens on its new entries beside this MoE's BF16 mode and torch._grouped_mm. Logs in one tarball.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r47; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
T0=$SECONDS; el() { echo "[$((SECONDS - T0)) s] $*"; }
Z=qwen3-30b-a3b-int4-zp
(cd bench && timeout 100 python3 bench_peers.py --only moe --shapes $Z --moe-m $Z=2048,4096 --precompile 2 --precompile-only \
   > $W/pre_moe.log 2>&1) &
GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 380 scripts/gpu-check > $W/gc.out 2>&1
el "gpu-check rc $?"; grep -E "passed|failed|^FAILED|^ERROR" $W/gc.out | head -30
wait
(cd bench && timeout $(( 520 - (SECONDS - T0) )) python3 bench_peers.py --only moe --shapes $Z --moe-m $Z=2048,4096 \
   --json $W/moe_zp.json > $W/moe_zp.txt 2>&1)
el "zp public rc $?"; grep -E "M=|config" $W/moe_zp.txt | cut -c1-260
tar czf $O/r47.tgz -C $W .
