# Sourced (bash) by the rounds' gpu-round.sh scripts here (from the repository root, before their subshell).
# round_start O: the carried wheels and the plugins installed (scripts/device-env, its log in O), the GPU's name.
round_start() {
  source scripts/device-env "$1" || return 1
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1
}
# round_gpu_check W WORKERS LIMIT: scripts/gpu-check with the benchmarks off (its logs in W/gc, W/gc.log), WORKERS
# pytest-xdist workers, cut at LIMIT seconds; prints its exit status and the pytest summaries.
round_gpu_check() {
  GPU_TEST_WORKERS=$2 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$1/gc timeout "$3" scripts/gpu-check \
    > "$1/gc.log" 2>&1
  echo "gpu-check rc $?"; grep -E "passed|failed|error" "$1/gc.log" | tail -8 | cut -c1-250
}
