#!/bin/bash
# lead R104 (thirtieth pass; an H200 where one comes, else an H100). NVFP4 experts on WS (moe_ws): the decode's g
# 2**-8 (E2M1 value x E4M3 scale x it exact in bf16), each expert's 256 x g in w4_ws's epilogue (HAS_BIAS 2), W4A4's
# inputs rounded through NVFP4 before FC1's gather and after the activation. (R104b and R104c ran as gpu-round-b.sh
# and gpu-round-c.sh with these same commands; merged here afterwards.)
# "a" (~130 s, R104a): the NVFP4 WS GPU tests (test_triton_moe_ws.py -k nvfp4: W4A4 and W4A16 against
#   oracle-emulation over the one-tile forms, PT 1 / 2 against the one-tile grid, capture / replay), then Qwen3-235B
#   NVFP4 W4A4 at 4096 tokens: the shipped DEQUANT_MM entry, the WS forms of configs/moe_r104.json and this MoE's
#   BF16 mode, one process, every launch timed.
# "b" (~570 s, R104b; after the one-reduction amax, linear.dynamic_tensor_scale): the WS form with PT 2
#   (configs/moe_r104b.json) beside the shipped choice and the BF16 mode, then scripts/gpu-check, benchmarks off.
# "c" (~100 s, R104c): the shipped entry (WS PT 2 since R104a) beside the previous one (configs/moe_r104c.json)
#   and the BF16 mode.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r104$1; mkdir -p $W
case "$1" in a) B=110; V=moe_r104.json ;; b) B=110; V=moe_r104b.json ;; c) B=105; V=moe_r104c.json ;;
  *) echo "argument: a, b or c"; exit 2 ;; esac
( source scripts/device-env "$O" || exit 1
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1
  if [ "$1" = a ]; then
    TRITON_CACHE_DIR=/tmp/tc-t timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -m gpu \
      plugins/triton/tests/test_triton_moe_ws.py -k nvfp4 > $W/nv-tests.log 2>&1
    echo "nvfp4 ws tests rc $?"; tail -6 $W/nv-tests.log | cut -c1-400
  fi
  (cd bench && TRITON_CACHE_DIR=/tmp/tc-a timeout $B python3 bench_peers.py --only moe \
    --shapes qwen3-235b-a22b-nvfp4 --moe-m qwen3-235b-a22b-nvfp4=4096 --moe-launches --moe-variants configs/$V \
    --json $W/r104$1.json > $W/r104$1.log 2>&1)
  echo "r104$1 rc $?"; grep -E "M=|error|kernels" $W/r104$1.log | cut -c1-900
  if [ "$1" = b ]; then
    GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 455 scripts/gpu-check \
      > $W/gc.log 2>&1
    echo "gpu-check rc $?"; grep -E "passed|failed|error" $W/gc.log | tail -8 | cut -c1-250
  fi )
tar czf $O/r104$1.tgz -C $W .
