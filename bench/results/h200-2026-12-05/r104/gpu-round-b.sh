#!/bin/bash
# lead R104b (thirtieth pass; an H200 where one comes). After R104a: the dynamic per-tensor amax as one inf-norm
# reduction (linear.dynamic_tensor_scale) and the W4A4 WS test at the project's NVFP4 bound.
# (~570 s) Qwen3-235B NVFP4 W4A4 at 4096 tokens: the shipped DEQUANT_MM entry, WS with PT 2
# (configs/moe_r104b.json) and this MoE's BF16 mode, one process, every launch timed; then scripts/gpu-check with
# the benchmarks off (every GPU test, the new NVFP4 WS ones among them).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r104b; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1
  cd bench
  TRITON_CACHE_DIR=/tmp/tc-a timeout 110 python3 bench_peers.py --only moe --shapes qwen3-235b-a22b-nvfp4 \
    --moe-m qwen3-235b-a22b-nvfp4=4096 --moe-launches --moe-variants configs/moe_r104b.json --json $W/r104b.json \
    > $W/r104b.log 2>&1
  echo "r104b rc $?"; grep -E "M=|error" $W/r104b.log | cut -c1-400
  python3 - $W/r104b.json <<'PY' 2>&1 | head -20
import json, sys
for row in json.load(open(sys.argv[1])).get("rows", []):
    for peer, v in row.get("peers", {}).items():
        if isinstance(v, dict):
            ks = v.get("kernels")
            print(peer, {k: v.get(k) for k in ("graph", "eager", "err", "vs_shipped", "error")}, str(ks)[:900])
PY
  cd ..
  GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 455 scripts/gpu-check \
    > $W/gc.log 2>&1
  echo "gpu-check rc $?"; grep -E "passed|failed|error" $W/gc.log | tail -8 | cut -c1-250
  grep -E "^FAILED|^ERROR" $W/gc/pytest-*.log | head -10 | cut -c1-300 )
tar czf $O/r104b.tgz -C $W .
