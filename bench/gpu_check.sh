#!/usr/bin/env bash
# GPU check for kernels/, sized for a short device lease (< 5 minutes on an H200):
#   1. configures and builds only the CUDA twins' test and the kernels benchmark,
#   2. runs the CUDA-vs-CPU test (gtest JSON),
#   3. runs the benchmark on the GPU (`moerl bench kernels --cuda --json`),
# and writes everything under $OUT (default ./gpu_check_out): summary.json, the test's
# JSON and log, kernels_bench_cuda.json, build logs. Exits non-zero if any step failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
BUILD="${MOERL_GPU_BUILD_DIR:-$ROOT/build-gpu-check}"
JOBS="$(nproc)"
mkdir -p "$OUT"
t0=$(date +%s)
declare -A step_rc step_s

run_step() {  # run_step NAME TIMEOUT_S CMD...
  local name=$1 limit=$2
  shift 2
  local s=$(date +%s)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  step_rc[$name]=$?
  step_s[$name]=$(($(date +%s) - s))
  echo "gpu_check: $name rc=${step_rc[$name]} (${step_s[$name]} s)"
}

run_step gpu_visible 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
run_step configure 90 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DMOERL_ENABLE_CUDA=ON \
  -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3
run_step build 150 ninja -C "$BUILD" -j"$JOBS" kernels_cuda_twins_test moerl_bench_kernels_main
if [[ ${step_rc[build]} -eq 0 ]]; then
  run_step cuda_twins_test 60 "$BUILD/tests/kernels_cuda_twins_test" --gtest_color=no \
    --gtest_output=json:"$OUT/cuda_twins_test.json"
  # A skipped suite means no GPU was visible to the test: that is a failed check here.
  if grep -q "SKIPPED" "$OUT/cuda_twins_test.log"; then
    step_rc[cuda_twins_test]=3
    echo "gpu_check: cuda_twins_test was skipped (no GPU visible to it): counted as failed (rc 3)"
  fi
  s=$(date +%s)
  timeout 120 "$BUILD/bin/moerl_bench_kernels_main" kernels --cuda --json \
    >"$OUT/kernels_bench_cuda.json" 2>"$OUT/kernels_bench_cuda.log"
  step_rc[bench]=$?
  step_s[bench]=$(($(date +%s) - s))
  echo "gpu_check: bench rc=${step_rc[bench]} (${step_s[bench]} s)"
fi

overall=0
{
  echo "{"
  echo "  \"check\": \"kernels gpu\","
  echo "  \"total_s\": $(($(date +%s) - t0)),"
  echo "  \"steps\": {"
  first=1
  for name in gpu_visible configure build cuda_twins_test bench; do
    [[ -v step_rc[$name] ]] || continue
    [[ ${step_rc[$name]} -ne 0 ]] && overall=1
    [[ $first -eq 1 ]] || echo ","
    printf '    "%s": {"rc": %d, "seconds": %d}' "$name" "${step_rc[$name]}" "${step_s[$name]}"
    first=0
  done
  echo ""
  echo "  },"
  echo "  \"ok\": $([[ $overall -eq 0 ]] && echo true || echo false)"
  echo "}"
} >"$OUT/summary.json"
cat "$OUT/summary.json"
exit $overall
