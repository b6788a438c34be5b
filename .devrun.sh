# one H200 measurement run for issue #24 (not committed): GPU tests, then bench_decode for three models
set -o pipefail
ROOT=$(pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
cd .dev/i24
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . -e plugins/emulation -e plugins/torch -e plugins/triton >/dev/null 2>&1 || { echo install failed; exit 1; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
T0=$(date +%s)
timeout ${T_TEST:-90} python3 -m pytest -q -p no:cacheprovider tests/test_hf_decode_gpu.py 2>&1 | grep -v DEBUG | tail -40 > $OUT/gpu_tests.txt; R=$?; tail -25 $OUT/gpu_tests.txt; grep -qiE 'not permitted when stream is capturing|StreamCapture|CaptureError|ImportError|ModuleNotFound' $OUT/gpu_tests.txt && { echo GPU tests errored, stopping; exit 1; }
timeout ${T_QWEN:-200} python3 bench/bench_decode.py --config examples/qwen3-30b-a3b-fp8/config.json ${QWEN_ARGS} --timeout 120 2>&1 | grep -v DEBUG > $OUT/qwen3.txt; tail -30 $OUT/qwen3.txt
timeout ${T_OSS:-110} python3 bench/bench_decode.py --config examples/gpt-oss-20b/config.json ${OSS_ARGS} --timeout 100 2>&1 | grep -v DEBUG > $OUT/gptoss.txt; tail -20 $OUT/gptoss.txt
timeout ${T_DS:-90} python3 bench/bench_decode.py --config examples/deepseek-r1/config.json --layers 5 ${DS_ARGS} --timeout 85 2>&1 | grep -v DEBUG > $OUT/deepseek.txt; tail -20 $OUT/deepseek.txt
echo total $(( $(date +%s) - T0 )) s
