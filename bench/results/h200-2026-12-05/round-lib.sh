# Sourced (bash) by the rounds' gpu-round.sh scripts here (from the repository root, before their subshell).
# round_start O: the carried wheels and the plugins installed (scripts/device-env, its log in O), the GPU's name.
round_start() {
  source scripts/device-env "$1" || return 1
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1
}
# round_checked W MODE: MODE "g", or "auto" on any card but an H200 (the first call of a session takes whichever card
# comes; the #25 rounds want an H200): scripts/gpu-check on 12 workers (round_gpu_check) and success, so the caller
# exits; any other MODE ("a", or "auto" on an H200): failure, the caller runs its rounds. Prints the mode.
round_checked() {
  local mode=$2
  [ "$mode" = auto ] && case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
    *H200*) mode=a ;; *) mode=g ;; esac
  echo "mode $mode"
  [ "$mode" = g ] || return 1
  round_gpu_check "$1" 12 585
  return 0
}
# round_gpu_check W WORKERS LIMIT: scripts/gpu-check with the benchmarks off (its logs in W/gc, W/gc.log), WORKERS
# pytest-xdist workers, cut at LIMIT seconds; prints its exit status and the pytest summaries.
round_gpu_check() {
  GPU_TEST_WORKERS=$2 BENCH_EMULATION=0 BENCH_TORCH=0 BENCH_TRITON=0 OUT=$1/gc timeout "$3" scripts/gpu-check \
    > "$1/gc.log" 2>&1
  echo "gpu-check rc $?"; grep -E "passed|failed|error" "$1/gc.log" | tail -8 | cut -c1-250
}
# round_pytest W NAME LIMIT FILE EXPR: the GPU tests of FILE selected by -k EXPR on 6 workers, cut at LIMIT seconds
# (log W/NAME-tests.log); prints their exit status and pytest's summary lines.
round_pytest() {
  TRITON_CACHE_DIR=/tmp/tc-t timeout "$3" python3 -m pytest -q -n 6 -p no:cacheprovider -m gpu "$4" -k "$5" \
    > "$1/$2-tests.log" 2>&1
  echo "$2 tests rc $?"; grep -E "passed|failed|Error|assert" "$1/$2-tests.log" | tail -8 | cut -c1-400
}
# round_moe_4096 W NAME VARIANTS ROUNDS LIMIT SHAPES...: bench_peers.py's MoE table at 4096 tokens for SHAPES with
# --moe-launches, configs/VARIANTS and --moe-rounds ROUNDS, cut at LIMIT seconds (W/NAME.log, W/NAME.json); run from
# bench/; prints its exit status and the rows, rounds and launch profiles.
round_moe_4096() {
  local w=$1 name=$2 variants=$3 rounds=$4 limit=$5; shift 5
  local mm; mm=$(for s in "$@"; do printf "%s=4096 " "$s"; done)
  # shellcheck disable=SC2086
  TRITON_CACHE_DIR=/tmp/tc-a timeout "$limit" python3 bench_peers.py --only moe --shapes "$@" --moe-m $mm \
    --moe-launches --moe-variants "configs/$variants" --moe-rounds "$rounds" --json "$w/$name.json" > "$w/$name.log" 2>&1
  echo "$name rc $?"; grep -E "M=|interleaved|kernels" "$w/$name.log" | cut -c1-600
}
# round_peers W NAME LIMIT ARGS...: bench_peers.py ARGS (run from bench/) with --json W/NAME.json, its log in
# W/NAME.log, cut at LIMIT seconds; prints its exit status and the rows (the dense rows' repeats, the MoE rows'
# interleaved rounds and launches, any error).
round_peers() {
  local w=$1 name=$2 limit=$3; shift 3
  TRITON_CACHE_DIR=/tmp/tc-a timeout "$limit" python3 bench_peers.py "$@" --json "$w/$name.json" > "$w/$name.log" 2>&1
  echo "$name rc $?"; grep -E "repeats|M=|interleaved|kernels|rror" "$w/$name.log" | sed 's/; SM MHz.*//' | cut -c1-700
}
# round_on_h200: success on an H200 (the #25 cells only that card settles), else failure.
round_on_h200() {
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in *H200*) return 0 ;; *) return 1 ;; esac
}
# round_rest W NAME TOTAL ARGS...: round_peers with the seconds left of TOTAL since the script began (none if 60 or
# fewer), bench_peers.py's --budget-s 45 s under that.
round_rest() {
  local w=$1 name=$2 left=$(( $3 - SECONDS )); shift 3
  [ "$left" -gt 60 ] || return 0
  round_peers "$w" "$name" "$left" --budget-s $(( left - 45 )) "$@"
}
# round_run FN: FN in a subshell from bench/, after round_start, with OUTDIR ($ROUND_OUT, else the device's $OUT)
# made; the script's exit status is FN's (round_start failing: 1).
round_run() {
  OUTDIR=${ROUND_OUT:-$OUT}; mkdir -p "$OUTDIR"
  ( round_start "$OUTDIR" || exit 1; cd bench && "$1" )
  local rc=$?; round_pack "$OUTDIR"; return $rc
}
# round_pack DIR: the device returns at most 8 files from $OUT, so a round's many logs (subfolders included) go
# back as one round.tgz beside install.log.
round_pack() {
  local n; n=$(find "$1" -type f ! -name round.tgz | wc -l)
  [ "$n" -gt 6 ] || return 0
  ( cd "$1" && find . -mindepth 1 -maxdepth 1 ! -name round.tgz ! -name install.log -printf '%P\n' > /tmp/round-pack.list \
    && tar czf round.tgz -T /tmp/round-pack.list && xargs -d '\n' rm -rf < /tmp/round-pack.list )
}
# TAILED_4096: bench_peers.py's arguments for cell (d)'s four tailed rows at 4096 tokens (Qwen3-235B NVFP4, Qwen3-30B
# INT4 with and without zero points, gpt-oss-20b), for round_peers / round_rest after their W NAME LIMIT.
TAILED_4096=(--only moe --shapes qwen3-235b-a22b-nvfp4 qwen3-30b-a3b-int4 qwen3-30b-a3b-int4-zp gpt-oss-20b
  --moe-m qwen3-235b-a22b-nvfp4=4096 qwen3-30b-a3b-int4=4096 qwen3-30b-a3b-int4-zp=4096 gpt-oss-20b=4096)
# round_fp8_256 W NAME CONFIG TESTS TOTAL: FP8 W8A8 per channel at 256 rows with the --dense-variants CONFIG beside
# the shipped entry, BF16 cuBLAS, gemlite (pinned configs), cuBLASLt on ready codes and the quantizer: a compile
# pass of every shape beside the GPU tests of TESTS (a file under plugins/triton/tests), then 2048x4096 (cell (p);
# W/NAMEa) and 36864x7168 / 8192x8192 (W/NAMEb) in what is left of TOTAL seconds since the script began, 3 repeats.
round_fp8_256() {
  local w=$1 name=$2 cfg=$3 tests=$4 total=$5
  local f8=(--only dense --modes w8a8_fp8_channel --m 256 --lean --dense-variants "$cfg")
  local peers=(--peers gemlite scaled_mm quantizer --gemlite-load-config configs/gemlite_fp8_channel_h200.json
    --gemlite-quantizer-rows 1 --gemlite-tune-ms 5)
  (TRITON_CACHE_DIR=/tmp/tc-a timeout 200 python3 bench_peers.py "${f8[@]}" --shapes 2048x4096 36864x7168 8192x8192 \
    --peers none --dense-repeat 1 > "$w/$name-pre.log" 2>&1; echo "compile pass rc $?") &
  ( cd .. && round_pytest "$w" "$name" 200 "plugins/triton/tests/$tests" "gpu" )
  wait
  grep -E "rror" "$w/$name-pre.log" | cut -c1-300 | head -20
  round_peers "$w" "${name}a" 150 "${f8[@]}" "${peers[@]}" --shapes 2048x4096 --dense-repeat 3 --dense-warm-s 0.15
  round_rest "$w" "${name}b" "$total" "${f8[@]}" "${peers[@]}" --shapes 36864x7168 8192x8192 --dense-repeat 3 \
    --dense-warm-s 0.15
}
