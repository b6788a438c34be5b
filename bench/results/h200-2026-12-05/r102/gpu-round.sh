#!/bin/bash
# lead R102 (twenty-ninth pass; an H200: the cells' targets are H200 figures). w4_ws's PT 1 (a persistent program
# an SM, the ring and its barriers running on across the program's output tiles), which R101c's profile asked for:
# at the missed 4096-token cells one program an SM left the decode warps waiting at the program's end a fifth of
# their time (the MMA warps' output and the next program's first loads in series with the tensor cores).
# No argument (~480 s): the PT GPU tests first (numerics against oracle-emulation, the same bits as the one-tile
#   grid with 1 / 3 / 5 programs and one an SM, capture / replay), then the shipped WS MoE entries beside the same
#   entry with PT 1 and PT 2 (configs/moe_r102.json) and this MoE's BF16 mode, one process, every launch timed;
#   then the dense 256-row entries on 36864x7168 (576 output tiles) with PT 1 / 2, five interleaved repeats beside
#   BF16 cuBLAS.
# Argument "b" (~400 s): R102b, the other w4_ws GPU tests on this code (test_triton_moe_ws.py, test_triton_gpu.py
#   -k "ws and not persistent": the one-tile forms, whose partitions now take the ring's count C0), then a second
#   sample of R102a's INT4 and gpt-oss-120b rows, Qwen3-30B INT4-zp at 2048 tokens added.
# Argument "g" (~470 s): scripts/gpu-check with the benchmarks off (every GPU test).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r102; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1
  if [ "$1" = b ]; then    # R102b: the w4_ws GPU tests, then a second sample of R102a's MoE rows (2048 too)
    TRITON_CACHE_DIR=/tmp/tc-t timeout 170 python3 -m pytest -q -n 8 -p no:cacheprovider -m gpu \
      plugins/triton/tests/test_triton_moe_ws.py plugins/triton/tests/test_triton_gpu.py -k "ws and not persistent" \
      > $W/ws-tests.log 2>&1
    echo "ws tests rc $?"; tail -4 $W/ws-tests.log | cut -c1-300
    cd bench
    TRITON_CACHE_DIR=/tmp/tc-b timeout 200 python3 bench_peers.py --only moe --shapes qwen3-30b-a3b-int4 \
      qwen3-30b-a3b-int4-zp gpt-oss-120b --moe-m qwen3-30b-a3b-int4=2048,4096 \
      qwen3-30b-a3b-int4-zp=2048,4096 gpt-oss-120b=4096 --moe-launches \
      --moe-variants configs/moe_r102.json --json $W/r102b.json > $W/r102b.log 2>&1
    echo "r102b rc $?"; grep -E "M=" $W/r102b.log | cut -c1-300
    exit 0
  fi
  if [ "$1" = g ]; then
    GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 470 scripts/gpu-check \
      > $W/gc.log 2>&1
    echo "gpu-check rc $?"; grep -E "passed|failed|error" $W/gc.log | tail -8 | cut -c1-250
    exit 0
  fi
  TRITON_CACHE_DIR=/tmp/tc-t timeout 170 python3 -m pytest -q -x -n 6 -p no:cacheprovider \
    plugins/triton/tests/test_triton_gpu.py plugins/triton/tests/test_triton_moe_ws.py -k persistent > $W/pt-tests.log 2>&1
  echo "pt tests rc $?"; tail -5 $W/pt-tests.log | cut -c1-300
  grep -q " passed" $W/pt-tests.log && ! grep -qE "[0-9]+ failed" $W/pt-tests.log || exit 0
  cd bench
  TRITON_CACHE_DIR=/tmp/tc-a timeout 270 python3 bench_peers.py --only moe --shapes qwen3-30b-a3b-int4 \
    qwen3-30b-a3b-int4-zp gpt-oss-20b gpt-oss-120b --moe-m qwen3-30b-a3b-int4=2048,4096 \
    qwen3-30b-a3b-int4-zp=4096 gpt-oss-20b=4096 gpt-oss-120b=4096 --moe-launches \
    --moe-variants configs/moe_r102.json --json $W/r102a.json > $W/r102a.log 2>&1
  echo "r102a rc $?"; grep -E "M=" $W/r102a.log | cut -c1-300
  TRITON_CACHE_DIR=/tmp/tc-d timeout 120 python3 rega_probe.py --m 256 --cfgs configs/ws_r102.json \
    --fmts int4 mxfp4 nvfp4 --repeat 5 --shapes 36864x7168 > $W/r102d.log 2>&1
  echo "r102d rc $?"; grep -E "medians|shipped:|BF16:|ws " $W/r102d.log | grep -v "^[a-z0-9]*x[0-9]* [a-z0-9]* M=" \
    | head -20 | cut -c1-200 )
tar czf $O/r102.tgz -C $W .
