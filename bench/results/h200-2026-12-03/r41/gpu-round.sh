#!/bin/bash
# lead R41 (fifteenth pass, the last call): scripts/gpu-check's tests on this pass's final code (the XQ test's
# dropped pair against an all-zero expert; the gpt-oss-20b 4096-token entry of R40), with gpt-oss-20b's variants
# compiled beside it; then moe_bisect's rounds: the new entry against the R28 entry, 4 stages, and decode overlapped
# with the GEMMs (DQ_OVERLAP, chunks of 128 / 64 / 32 blocks) (configs/lead_r41_moe.json).
set -o pipefail
O=${ROUND_OUT:-$OUT}; mkdir -p "$O"
source scripts/device-env "$O" || exit 1
export TRITON_CACHE_DIR=/tmp/tc-lead PYTHONUNBUFFERED=1
T0=$SECONDS; el() { echo "[$((SECONDS - T0)) s] $*"; }
(cd bench && timeout 200 python3 -c "
import json, moe_bisect as mb
mb.precompile({}, 'gpt-oss-20b', [4096], 190, json.load(open('configs/lead_r41_moe.json')))" > $O/r41_premoe.log 2>&1) &
GPU_TEST_WORKERS=8 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$O/gc timeout 400 scripts/gpu-check > $O/gc.out 2>&1
el "gpu-check rc $?"; grep -E "passed|failed|^FAILED|^ERROR|exit [0-9]|^summary" $O/gc.out | head -30
wait; el "compiles done"; tail -n 2 $O/r41_premoe.log
cd bench
timeout $(( 575 - (SECONDS - T0) )) python3 moe_bisect.py --shape gpt-oss-20b --m 4096 --variants configs/lead_r41_moe.json \
   --rounds 3 --json $O/r41_moe.json > $O/r41_moe.txt 2>&1
el "moe rc $?"; grep -E "round|FAILED|err vs" $O/r41_moe.txt | cut -c1-230
