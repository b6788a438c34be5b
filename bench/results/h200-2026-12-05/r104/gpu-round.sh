#!/bin/bash
# lead R104 (thirtieth pass; an H200 where one comes, else an H100). NVFP4 experts on WS (moe_ws): the decode's g
# 2**-8 (E2M1 value x E4M3 scale x it exact in bf16), each expert's 256 x g in w4_ws's epilogue (HAS_BIAS 2), W4A4's
# inputs rounded through NVFP4 before FC1's gather and after the activation.
# No argument (~450 s): the NVFP4 WS GPU tests (test_triton_moe_ws.py -k nvfp4: W4A4 and W4A16 against
#   oracle-emulation over the one-tile forms, PT 1 / 2 against the one-tile grid, capture / replay), then Qwen3-235B
#   NVFP4 W4A4 at 4096 tokens: the shipped DEQUANT_MM entry, the WS forms of configs/moe_r104.json and this MoE's
#   BF16 mode, one process, every launch timed.
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r104; mkdir -p $W
( source scripts/device-env "$O" || exit 1
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1
  TRITON_CACHE_DIR=/tmp/tc-t timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -m gpu \
    plugins/triton/tests/test_triton_moe_ws.py -k nvfp4 > $W/nv-tests.log 2>&1
  echo "nvfp4 ws tests rc $?"; tail -6 $W/nv-tests.log | cut -c1-400
  cd bench
  TRITON_CACHE_DIR=/tmp/tc-a timeout 300 python3 bench_peers.py --only moe --shapes qwen3-235b-a22b-nvfp4 \
    --moe-m qwen3-235b-a22b-nvfp4=4096 --moe-launches --moe-variants configs/moe_r104.json --json $W/r104a.json \
    > $W/r104a.log 2>&1
  echo "r104a rc $?"; grep -E "M=|error" $W/r104a.log | cut -c1-400
  python3 - $W/r104a.json <<'PY' 2>&1 | head -20
import json, sys
for row in json.load(open(sys.argv[1])).get("rows", []):
    for peer, v in row.get("peers", {}).items():
        if isinstance(v, dict):
            print(peer, {k: v.get(k) for k in ("graph", "eager", "err", "vs_shipped", "error")},
                  [(k[0][:18], round(k[1], 1)) for k in (v.get("kernels") or [])][:8] if isinstance(v.get("kernels"), list) else v.get("kernels"))
PY
)
tar czf $O/r104.tgz -C $W .
