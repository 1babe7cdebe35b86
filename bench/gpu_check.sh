#!/usr/bin/env bash
# GPU check, sized for a short device lease (< 5 minutes on an H200):
#   1. configures and builds only the CUDA tests and the kernels benchmark,
#   2. runs the CUDA-vs-CPU tests (gtest JSON each): kernels/'s MoE twins, the policy's
#      dense-op and Adam twins (and their host-side checks), and fabric's NCCL path on a
#      one-member group (built only where configure found NCCL; its absence fails the check),
#   3. runs the benchmark on the GPU (`moerl bench kernels --cuda --json`),
# and writes everything under $OUT (default ./gpu_check_out): summary.json, each test's
# JSON and log, kernels_bench_cuda.json, build logs. A skipped test means the GPU was not
# visible to it: counted as failed. Exits non-zero if any step failed.
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
TESTS=(kernels_cuda_twins_test policy_cuda_twins_test policy_cuda_host_checks_test)
have_nccl=0
if ninja -C "$BUILD" -t targets all 2>/dev/null | grep -q '^fabric_nccl_smoke_test:'; then
  TESTS+=(fabric_nccl_smoke_test)
  have_nccl=1
fi
run_step build 240 ninja -C "$BUILD" -j"$JOBS" "${TESTS[@]}" moerl_bench_kernels_main

run_gtest() {  # run_gtest TEST_TARGET: a step named after it, its JSON and log under $OUT
  local t=$1
  run_step "$t" 60 "$BUILD/tests/$t" --gtest_color=no --gtest_output=json:"$OUT/$t.json"
  # A skipped test means no GPU was visible to it: that is a failed check here.
  if grep -q "SKIPPED" "$OUT/$t.log"; then
    step_rc[$t]=3
    echo "gpu_check: $t was skipped (no GPU visible to it): counted as failed (rc 3)"
  fi
}

if [[ ${step_rc[build]} -eq 0 ]]; then
  for t in "${TESTS[@]}"; do run_gtest "$t"; done
  if [[ $have_nccl -eq 0 ]]; then
    step_rc[fabric_nccl_smoke_test]=4
    step_s[fabric_nccl_smoke_test]=0
    echo "gpu_check: fabric_nccl_smoke_test not built: configure found no NCCL (rc 4)"
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
  echo "  \"check\": \"kernels, policy and nccl gpu\","
  echo "  \"total_s\": $(($(date +%s) - t0)),"
  echo "  \"steps\": {"
  first=1
  for name in gpu_visible configure build kernels_cuda_twins_test policy_cuda_twins_test \
    policy_cuda_host_checks_test fabric_nccl_smoke_test bench; do
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
