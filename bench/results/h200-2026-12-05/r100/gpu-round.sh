#!/bin/bash
# lead R100 (twenty-seventh pass, written for an H200: that session could start none; R100b rewritten in the
# twenty-eighth pass), four calls.
# R100a (no argument, ~330 s): the H200 figures of the entries this pass shipped (WS_HALF, INT4's silu in FC1, the
#   switches on, the 4-instruction E2M1 decoder) beside the twenty-fifth pass's entries with the switches off ("r97",
#   configs/moe_r100.json) and this MoE's BF16 mode, every launch timed; gpt-oss-20b at 512 / 1024 tokens with
#   WS_HALF ("half512" / "half1024": every expert's pairs fill at most half a 256-pair block there); the dense MXFP4
#   / NVFP4 WS entries at 256 rows beside BF16 cuBLAS (the NVFP4 cells at 0.795x, against the 0.8x target).
# R100b, two calls (the twenty-eighth pass: the patch, r100/rega-decoder-shared.patch, travels applied in the
#   working tree; in that pass "a" took it out first; since 89db871 it is main's code, see below). w4_rega's E2M1 decoder in 4
#   instructions a pair (w4_ws's and w4_rega's pairs from one generator, w4_rega.pair_lines, the placement w4_ws
#   took in the twenty-seventh pass) against the shipped one, each in its own process and Triton cache: the MXFP4
#   MoE at 16 / 256 tokens (SWAP 3, w4_rega's MoE mode) and the dense MXFP4 REGA entries at 16 rows.
#   Argument "g" (~530 s): the patched decoder timed, then scripts/gpu-check on the patched tree (benchmarks off:
#   every GPU test, the REGA ones among them). Argument "s" (~150 s): the patch taken out, the shipped decoder timed.
# R100c (argument "c", ~300 s): Nsight Compute (--set full, --clock-control none) on the first call's FC1 and FC2
#   WS launches at gpt-oss-20b 4096 tokens (bench_peers under ncu, the kernels matched by name): the details page
#   and the SASS source page with each instruction's warp-stall samples (CSV), to tell what the decode warps wait
#   on (R98b: they bound the launch; R99: not their instruction count).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r100; mkdir -p $W
P=bench/results/h200-2026-12-05/r100/rega-decoder-shared.patch
unpatch() { git apply -R --check $P 2>/dev/null && git apply -R $P && echo "($P taken out)"; }
# Since 89db871 (twenty-eighth pass) the patch is main's code: "a", "c" and "g" run main as it is; "s" takes the patch
# out to time the decoder main had before.
[ "$1" = s ] && { unpatch || exit 1; }
if [ "$1" = c ]; then
  ( source scripts/device-env "$O" || exit 1
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    cd bench
    TRITON_CACHE_DIR=/tmp/tc-c timeout 280 $NCU --clock-control none --set full -k regex:w4_ws_kernel --launch-count 2 \
      -f -o $W/moe-ws python3 bench_peers.py --only moe --shapes gpt-oss-20b --moe-m gpt-oss-20b=4096 > $W/ncu-run.log 2>&1
    echo "ncu rc $?"; grep -v "^==PROF==" $W/ncu-run.log | grep -E "M=|Error" | cut -c1-200
    $NCU -i $W/moe-ws.ncu-rep --page details > $W/ncu-details.txt 2>&1
    $NCU -i $W/moe-ws.ncu-rep --page source --print-source sass --csv > $W/ncu-sass.csv 2>&1
    grep -E "Duration|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Compute \(SM\) Throughput" $W/ncu-details.txt \
      | head -10 | cut -c1-150
    rm -f $W/moe-ws.ncu-rep )
  tar czf $O/r100.tgz -C $W .
  exit 0
fi
( source scripts/device-env "$O" || exit 1
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1
  if [ -z "$1" ]; then
    cd bench
    TRITON_CACHE_DIR=/tmp/tc-a timeout 340 python3 bench_peers.py --shapes gpt-oss-20b gpt-oss-120b qwen3-30b-a3b-int4 \
      qwen3-30b-a3b-int4-zp 36864x7168 7168x18432 8192x8192 --modes w4a16_mx w4a16_nvfp4 --m 256 --peers none \
      --moe-m gpt-oss-20b=512,1024,2048,4096 gpt-oss-120b=4096 qwen3-30b-a3b-int4=2048,4096 qwen3-30b-a3b-int4-zp=2048,4096 \
      --moe-launches --moe-variants configs/moe_r100.json --json $W/r100a.json > $W/r100a.log 2>&1
    echo "r100a rc $?"; grep -E "M=" $W/r100a.log | cut -c1-300
    exit 0
  fi
  b() {   # $1 label
    (cd bench && TRITON_CACHE_DIR=/tmp/tc-$1 timeout 150 python3 bench_peers.py --shapes gpt-oss-20b gpt-oss-120b \
      36864x7168 7168x18432 8192x8192 --modes w4a16_mx --m 16 --peers none --moe-m gpt-oss-20b=16,256 \
      gpt-oss-120b=16,256 --moe-launches --json $W/r100b_$1.json > $W/r100b_$1.log 2>&1)
    echo "$1 rc $?"; grep -E "M=" $W/r100b_$1.log | cut -c1-260
  }
  if [ "$1" = s ]; then b shipped; exit 0; fi
  git apply -R --check $P 2>/dev/null || { echo "$P is not applied"; exit 1; }
  b patched
  GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$W/gc timeout 380 scripts/gpu-check > $W/gc.log 2>&1
  echo "gpu-check rc $?"; grep -E "passed|failed|error" $W/gc.log | tail -8 | cut -c1-250 )
tar czf $O/r100.tgz -C $W .
