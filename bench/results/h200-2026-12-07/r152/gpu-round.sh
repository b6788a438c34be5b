#!/bin/bash
# lead R152 (for the forty-seventh pass; timeout_s 600, any card, an H200 first). On an H200: R141's rounds (cells
# (a), (d) and DeepSeek-R1 at 16 / 256 / 4096 tokens beside vLLM's kernels), which only that card settles. On another
# card: FASTACC (the float8 dot without promotion over K, as gemlite and vLLM's CUTLASS FP8FastAccum kernels run it;
# torch._scaled_mm's use_fast_accum on SCALED_MM): its GPU tests beside a compile pass, then FP8 W8A8 at 256 rows with
# configs/fp8_fastacc_r152.json beside the shipped entry, BF16 cuBLAS, gemlite (pinned configs), cuBLASLt on ready
# codes and the quantizer, 3 repeats: 2048x4096 (cell (p)), then 36864x7168 (cell (m)) and 8192x8192. Compiled for
# sm_90, FASTACC takes 128 x 256 tiles on 8 warps (gemlite's H100 choice at 256 rows of large N) from 255 registers
# and 272 bytes of spills to 220 and none, and their K loop from 322 instructions to 131. Then the parts of
# scripts/gpu-check R151 did not reach (b12x selection on a detected SM90, `oracle explain --detect`) in the time left.
set -o pipefail
source bench/results/h200-2026-12-05/round-lib.sh
round_on_h200 && R141_TOTAL=${R152_TOTAL:-560} exec bash bench/results/h200-2026-12-07/r141/gpu-round.sh
rounds() {
  local total=${R152_TOTAL:-560}
  round_fp8_256 "$OUTDIR" r152 configs/fp8_fastacc_r152.json test_triton_fp8_fastacc.py $(( total - 100 ))
  local left=$(( total - SECONDS ))
  [ "$left" -gt 60 ] && ( cd .. && GPU_TESTS=0 DEVICE_AWARE=0 round_gpu_check "$OUTDIR" 6 $(( left - 10 )) )
  return 0
}
round_run rounds
