#!/usr/bin/env bash
# The GPU machine's checks as one prepared run (DEVELOPERS.md: "run the cuda tests and
# python -m benchmarks.gpu there first"): the device's facts, the cuda-marked tests, then
# benchmarks.gpu one part per process, so a part cut off by a time limit loses only itself.
# Every table lands in $OUT/gpu.log and each part's numbers in $OUT/gpu-PART.json.
#
#   OUT=gpu-check STEPS="tests d a" bash benchmarks/gpu_check.sh      # on a GPU machine (torch + timm)
#   OUT=gpu-check STEPS="b c" SMALL_TRAIN=20000 BENCH_ARGS=--no-compile bash benchmarks/gpu_check.sh
set -u -o pipefail
out=${OUT:-gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
python=${PYTHON:-python3}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  "$python" -c "import torch, timm; print('torch', torch.__version__, 'timm', timm.__version__, 'cuda', torch.version.cuda)"
  nproc
} 2>&1 | tee -a "$out/device.txt"
status=0
for step in ${STEPS:-tests d a b c}; do
  if [ "$step" = tests ]; then
    timeout "${TESTS_TIMEOUT:-300}" "$python" -m pytest -p no:cacheprovider -q -rs -m cuda tests/test_gpu_training.py \
      2>&1 | tee -a "$out/cuda-tests.log" || status=1
  else
    echo "== part $step" | tee -a "$out/gpu.log"
    timeout "${PART_TIMEOUT:-300}" "$python" -m benchmarks.gpu --parts "$step" --json "$out/gpu-$step.json" \
      --small-train-size "${SMALL_TRAIN:-50000}" ${BENCH_ARGS:-} 2>&1 | tee -a "$out/gpu.log" || status=1
  fi
done
exit $status
