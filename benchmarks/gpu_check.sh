#!/usr/bin/env bash
# The GPU machine's prepared check, one run, in order of value, each step in its own process with
# its own time limit so a step cut off loses only itself; benchmarks.gpu also rewrites its JSON
# after every row, so even a cut-off step keeps the rows it measured. Fits 10 minutes on one H100:
#   s      FIRST, "does it work": the four trials of a default GPU search (compile auto, each packed on a
#          quarter of the GPU, FLOPs + throughput + latency), at once; a real `archsearch search` where
#          Ray and Optuna are installed, else the same trial configs through run_trial in four processes
#          (benchmarks.gpu_search_check; carry fvcore's wheels to count FLOPs there). Exits 1 on any
#          trial that did not complete compiled: the speed parts after it measure a path that works.
#   a      CaiT-S24 and CoAtNet-0 at 224, bf16 training: timm eager, ours eager (CaiT also with
#          autocast's fp32 softmax, and fused talking heads), ours regional-compiled as trials
#          compile (CaiT explicit and fused); MFU. Whole-graph rows: STEPS=a BENCH_ARGS="--compile-modes whole"
#   t      after the check, if time is left: talking-heads attention alone, explicit vs fused
#   w      regional compile of CaiT-S24 cold vs warm from cache artifacts (fresh processes)
#   c      1 vs 4 packed 32x32 trials, without and with the MPS daemon
#   tests  the cuda-marked tests (the OOM contract among them)
#
#   OUT=gpu-check bash benchmarks/gpu_check.sh                   # on a GPU machine (torch + timm)
#   OUT=gpu-check STEPS="a:200 tests:90" bash benchmarks/gpu_check.sh
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
declare -A args=(
  [a]="--compile-modes eager,regional"
  [w]=""
  [c]="--packing 1,4 --mps --small-epochs 2"
  [b]=""
  [d]=""
)
status=0
for item in ${STEPS:-s:150 a:210 w:90 c:110 tests:60}; do
  step=${item%%:*}
  limit=${item#*:}
  [ "$limit" = "$item" ] && limit=300
  if [ "$step" = s ]; then
    echo "== part s: a default GPU search, end to end (limit ${limit}s)" | tee -a "$out/gpu.log"
    timeout "$limit" "$python" -m benchmarks.gpu_search_check --json "$out/search.json" 2>&1 | tee -a "$out/gpu.log" \
      || status=1
  elif [ "$step" = tests ]; then
    timeout "$limit" "$python" -m pytest -p no:cacheprovider -q -rs -m cuda tests/test_gpu_training.py tests/test_regional_and_softmax.py \
      2>&1 | tee -a "$out/cuda-tests.log" || status=1
  else
    echo "== part $step (limit ${limit}s)" | tee -a "$out/gpu.log"
    timeout "$limit" "$python" -m benchmarks.gpu --parts "$step" --json "$out/gpu-$step.json" \
      --small-train-size "${SMALL_TRAIN:-20000}" ${args[$step]:-} ${BENCH_ARGS:-} 2>&1 | tee -a "$out/gpu.log" || status=1
  fi
done
exit $status
