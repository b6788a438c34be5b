#!/bin/bash
# lead R51 (seventeenth pass), one call: w4_rega with many activation rows per program (BM, the wgmma's N), two
# activation chunk buffers (XBUF 2) and WAIT 1 across the K loop: its GPU tests (and the M=16 REGA tests it must not
# break), then M=256 on the four shapes beside BF16 and the shipped entry (configs/rega_wide_r51.json).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"; W=/tmp/r51; mkdir -p $W
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rs -k "rega" plugins/triton/tests/test_triton_gpu.py \
  plugins/triton/tests/test_triton_rega_nvfp4.py > $W/pytest-rega.log 2>&1
echo "pytest rc $?"; tail -15 $W/pytest-rega.log | cut -c1-300
cd bench
for i in 0 1 2 3 4 5 6 7; do
  timeout 150 python3 rega_probe.py --m 256 --cfgs configs/rega_wide_r51.json --fmts int4 mxfp4 nvfp4 \
    --shapes 8192x8192 7168x18432 36864x7168 2048x4096 --compile-only $i --workers 8 > $W/compile-$i.log 2>&1 &
done
wait
cat $W/compile-*.log | cut -c1-300 | head -20
timeout 330 python3 rega_probe.py --m 256 --cfgs configs/rega_wide_r51.json --fmts int4 mxfp4 nvfp4 \
  --shapes 8192x8192 7168x18432 36864x7168 2048x4096 --budget-s 300 > $W/probe256.log 2>&1
echo "probe rc $?"; grep -v "^    diagnose" $W/probe256.log | cut -c1-260
tar czf $O/r51.tgz -C $W .
