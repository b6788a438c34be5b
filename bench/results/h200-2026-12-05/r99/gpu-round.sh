#!/bin/bash
# lead R99 (twenty-seventh pass), one call (~500 s): w4_ws's E2M1 decoder in 4 instructions a pair (PRMT's sign
# replication) against the one before it (r99/new-decoder.patch applied in reverse), each in its own process and
# Triton cache: the 4-bit MoE cells at 2048 / 4096 tokens, the shipped entries (WS_HALF, INT4's silu in FC1, the
# switches on) beside the twenty-fifth pass's H200 entries with the switches off (configs/moe_r99.json, "r97"),
# this MoE's BF16 mode in the same row; on an H200 also the dense MXFP4 / NVFP4 WS entries at 256 rows beside
# BF16 cuBLAS (the H100 has no dense entries). Then the WS and table GPU tests on the new decoder. Argument "new"
# (R99h): the new decoder's process only.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r99; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export PYTHONUNBUFFERED=1
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "gpu: $gpu"
  dense=(); case "$gpu" in *H200*) dense=(--shapes gpt-oss-20b gpt-oss-120b qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp \
    36864x7168 7168x18432 8192x8192 --modes w4a16_mx w4a16_nvfp4 --m 256 --peers none) ;; esac
  [ ${#dense[@]} = 0 ] && dense=(--only moe --shapes gpt-oss-20b gpt-oss-120b qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp)
  run() {   # $1 label, $2 seconds, rest: extra args
    local l=$1 s=$2; shift 2
    (cd bench && TRITON_CACHE_DIR=/tmp/tc-$l timeout $s python3 bench_peers.py "${dense[@]}" \
      --moe-m gpt-oss-20b=2048,4096 gpt-oss-120b=4096 qwen3-30b-a3b-int4=2048,4096 qwen3-30b-a3b-int4-zp=4096 \
      --moe-launches "$@" --json $W/r99_$l.json > $W/r99_$l.log 2>&1)
    echo "$l rc $?"; grep -E "M=" $W/r99_$l.log | cut -c1-260
  }
  run new $([ "$1" = new ] && echo 330 || echo 200) --moe-variants configs/moe_r99.json
  [ "$1" = new ] && exit 0     # R99h: the new process alone (the H200 confirmation of the shipped entries)
  git apply -R bench/results/h200-2026-12-05/r99/new-decoder.patch || exit 1
  run old 170
  git apply bench/results/h200-2026-12-05/r99/new-decoder.patch || exit 1
  cd plugins/triton/tests
  TRITON_CACHE_DIR=/tmp/tc-new timeout 200 python3 -m pytest -q -p no:cacheprovider -n 12 test_triton_moe_ws.py \
    test_triton_tuned.py test_triton_gpu.py::test_ws_kernel_matches_emulation_and_replays \
    test_triton_gpu.py::test_tuned_ws_entry_serves_the_whole_layer_call > $W/pytest_r99.log 2>&1
  echo "pytest rc $?"; grep -E "Error|passed|failed" $W/pytest_r99.log | tail -8 | cut -c1-300 )
tar czf $O/r99.tgz -C $W .
