#!/usr/bin/env bash
# GPU check, sized for a short device lease (< 8 minutes on an H200):
#   1. configures and builds only the CUDA tests and the kernels benchmark (`moerl`, most of
#      the build, comes before step 4, so that a slow build costs that step only),
#   2. runs the CUDA-vs-CPU tests (gtest JSON each): kernels/'s MoE twins, the policy's
#      dense-op and Adam twins (and their host-side checks), the device policy against the CPU
#      policy (policy_model_cuda_test), and fabric's NCCL path on a one-member group (built
#      only where configure found NCCL; its absence fails the check),
#   3. runs the benchmark on the GPU (`moerl bench kernels --cuda --json`),
#   4. runs `moerl learn --set grpo.iterations=200` with job.device=cuda and job.device=cpu side
#      by side (separate processes; the CPU one uses one core of 16) and records both wall
#      times and final rewards (mean of the last 10 iterations); the device run fails the
#      check unless its final reward is clearly above the task's reward_random
#      (> reward_random + 0.25 * (reward_max - reward_random)),
#   5. runs the expert plane on device memory with 2 and 4 processes on the one GPU through
#      CUDA IPC, and moerl.ep.Buffer on CUDA tensors, normal and low-latency (issue 29's
#      section, before the summary),
#   6. (its own section below) the device expert-parallel group and trainer against the host
#      ones, and a short `moerl up` with job.device=cuda beside job.device=cpu (issue 29),
# and writes everything under $OUT (default ./gpu_check_out): summary.json, each test's
# JSON and log, kernels_bench_cuda.json, learn_{cuda,cpu}.json, build logs. A skipped test
# means the GPU was not visible to it: counted as failed. Exits non-zero if any step failed.
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
TESTS=(kernels_cuda_twins_test policy_cuda_twins_test policy_cuda_host_checks_test
  policy_model_cuda_test)
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

  # Step 4: the same GRPO run on the device and on the CPU, concurrently (see the header).
  # moerl is built only now (it is most of the build): a slow build costs this step only,
  # not the test results above.
  run_step build_moerl 270 ninja -C "$BUILD" -j"$JOBS" moerl
fi
if [[ ${step_rc[build_moerl]:-1} -eq 0 ]]; then
  s=$(date +%s)
  for dev in cuda cpu; do
    timeout 150 "$BUILD/bin/moerl" learn --set job.device=$dev --set grpo.iterations=200 \
      --print-every 20 --report "$OUT/learn_$dev.json" >"$OUT/learn_$dev.log" 2>&1 &
    eval "learn_pid_$dev=\$!"
  done
  wait "$learn_pid_cuda"
  step_rc[learn_cuda]=$?
  wait "$learn_pid_cpu"
  step_rc[learn_cpu]=$?
  step_s[learn_cuda]=$(($(date +%s) - s))
  step_s[learn_cpu]=${step_s[learn_cuda]}
  # Final reward = mean of the last 10 iterations' mean_reward (learn's own summary line).
  learn_json=$(/usr/bin/python3 - "$OUT/learn_cuda.json" "$OUT/learn_cpu.json" <<'PY'
import json, sys
out = {}
for path, dev in zip(sys.argv[1:], ["cuda", "cpu"]):
    try:
        r = json.load(open(path))
    except Exception as e:  # the run failed: its rc says so; record why the report is missing
        out[dev] = {"error": "no report: %s" % e}
        continue
    curve = [p["mean_reward"] for p in r["reward_curve"]]
    last = curve[-10:]
    out[dev] = {"wall_s": r["wall_s"], "iterations": len(curve),
                "final_reward": sum(last) / max(1, len(last)),
                "reward_random": r["reward_random"], "reward_max": r["reward_max"],
                "device": r.get("device"), "final_weights_hash": r["final_weights_hash"]}
c = out.get("cuda", {})
c["above_random"] = ("final_reward" in c and
                     c["final_reward"] > c["reward_random"] + 0.25 * (c["reward_max"] - c["reward_random"]))
print(json.dumps(out))
PY
)
  echo "gpu_check: learn cuda rc=${step_rc[learn_cuda]} cpu rc=${step_rc[learn_cpu]}" \
    "(${step_s[learn_cuda]} s): $learn_json"
  if [[ ${step_rc[learn_cuda]} -eq 0 ]] && ! grep -q '"above_random": true' <<<"$learn_json"; then
    step_rc[learn_cuda]=5
    echo "gpu_check: the device run's final reward is not clearly above reward_random (rc 5)"
  fi
fi

# ---- issue 29: the expert plane on device memory (fabric/DEVICE_MEMORY.md) ----------------
# Processes sharing the one GPU, as ranks of one host: fabric_device_transport_test (2 and 4
# processes write each other's cudaMalloc'd regions through CUDA IPC handles, from device and
# host sources, and device bytes into host regions; a network peer without FI_HMEM refused),
# fabric_ep_device_test (the low-latency and normal groups with their payload rows in device
# memory, ep_memory::cuda: 2 and 4 processes, bf16 and fp32, every check of the EP tests with
# x, the expert outputs and y on the device, low-latency's dispatch_buffer()/combine_buffer()
# read in place and normal's rows stored in place into the peers' device outputs through CUDA
# IPC, normal's two nodes of two processes through the gateways; a group spanning hosts over
# tcp refused naming host staging, both modes), then test_ep_cuda.py (moerl.ep.Buffer given
# CUDA tensors, normal and low-latency, 2 and 4 processes, DeepEP-style checks: received rows,
# counts, weights and combine against torch references; both on the device path, normal's
# top-k and FP8 channels staged through host memory). A skipped
# test (no GPU visible to it) counts as failed. Steps: build_ep_device, the three tests.
ep_device_steps=(build_ep_device fabric_device_transport_test fabric_ep_device_test python_ep_cuda_test)
if [[ ${step_rc[configure]} -eq 0 ]]; then
  run_step build_ep_device 300 ninja -C "$BUILD" -j"$JOBS" fabric_device_transport_test \
    fabric_ep_device_test moerl_python
fi
if [[ ${step_rc[build_ep_device]:-1} -eq 0 ]]; then
  run_gtest fabric_device_transport_test
  run_gtest fabric_ep_device_test
  run_step python_ep_cuda_test 300 env PYTHONPATH="$BUILD/python" PYTHONDONTWRITEBYTECODE=1 \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider -rs "$ROOT/tests/python/test_ep_cuda.py"
  if grep -qi "skipped" "$OUT/python_ep_cuda_test.log"; then
    step_rc[python_ep_cuda_test]=3
    echo "gpu_check: python_ep_cuda_test skipped its GPU cases (no GPU visible): counted as failed (rc 3)"
  fi
fi
# ---- end of issue 29's section ------------------------------------------------------------
# ---- moerl up on the device (issue 29, job/ep_policy_group.h) -------------------------------
# A short `moerl up --set job.device=cuda` (every rollout and trainer rank on the GPU, the
# trainer group's all-reduce over NCCL, the expert exchange host-staged) and the same run with
# job.device=cpu, one after the other (each is a whole local cluster of node processes). One
# GPU: one trainer rank in all, trainer.group_size=1 and job.trainer_ep_ranks=1 (NCCL puts each
# trainer rank on its own device); the rollout group keeps moerl up's default shape. The device run
# must learn: its final 10-iteration mean reward clearly above reward_random (as the learn step
# above). Figures: wall time and samples/s (samples trained / wall time) of each; up_{cuda,cpu}
# .json and .log under $OUT, the comparison in summary.json's "up".
# First the device group and trainer against the host ones (tests/job/ep_device_test.cpp; its
# two-rank trainer test needs two GPUs and is left out on one).
UP_ITERATIONS=200
if [[ ${step_rc[build_moerl]:-1} -eq 0 ]]; then
  run_step build_job_ep_device_test 120 ninja -C "$BUILD" -j"$JOBS" job_ep_device_test
  if [[ ${step_rc[build_job_ep_device_test]} -eq 0 ]]; then
    run_step job_ep_device_test 120 "$BUILD/tests/job_ep_device_test" --gtest_color=no \
      --gtest_filter=-*two_device_ranks* --gtest_output=json:"$OUT/job_ep_device_test.json"
    if grep -q "SKIPPED" "$OUT/job_ep_device_test.log"; then
      step_rc[job_ep_device_test]=3
      echo "gpu_check: job_ep_device_test was skipped (no GPU visible to it): failed (rc 3)"
    fi
  fi
  for dev in cuda cpu; do
    s=$(date +%s)
    timeout 240 "$BUILD/bin/moerl" up --no-interrupt --iterations "$UP_ITERATIONS" \
      --timeout 230 --run-dir "$OUT/up_runs_$dev" --report "$OUT/up_$dev.json" \
      --set job.device=$dev --set trainer.group_size=1 --set job.trainer_ep_ranks=1 \
      --set store.url="$OUT/up_store_$dev" >"$OUT/up_$dev.log" 2>&1
    step_rc[up_$dev]=$?
    step_s[up_$dev]=$(($(date +%s) - s))
    echo "gpu_check: up_$dev rc=${step_rc[up_$dev]} (${step_s[up_$dev]} s)"
  done
  up_json=$(/usr/bin/python3 - "$OUT/up_cuda.json" "$OUT/up_cpu.json" <<'PY'
import json, sys
out = {}
for path, dev in zip(sys.argv[1:], ["cuda", "cpu"]):
    try:
        r = json.load(open(path))
        curve = [p["mean_reward"] for p in r["reward_curve"]]
        last = curve[-10:]
        trained = r.get("accounting", {}).get("trained", 0)
        out[dev] = {"wall_s": r["wall_s"], "iterations": len(curve),
                    "final_reward": sum(last) / max(1, len(last)),
                    "reward_random": r["reward_random"], "reward_max": r["reward_max"],
                    "samples_trained": trained,
                    "samples_per_s": trained / r["wall_s"] if r["wall_s"] else None,
                    "lost": r.get("accounting", {}).get("lost")}
    except Exception as e:  # the run failed: its rc says so; record why the figures are missing
        out[dev] = {"error": "no report figures: %s" % e}
c = out.get("cuda", {})
c["above_random"] = ("final_reward" in c and
                     c["final_reward"] > c["reward_random"] + 0.25 * (c["reward_max"] - c["reward_random"]))
if out.get("cpu", {}).get("samples_per_s") and c.get("samples_per_s"):
    out["samples_per_s_cuda_over_cpu"] = c["samples_per_s"] / out["cpu"]["samples_per_s"]
print(json.dumps(out))
PY
)
  echo "gpu_check: up cuda rc=${step_rc[up_cuda]} cpu rc=${step_rc[up_cpu]}: $up_json"
  if [[ ${step_rc[up_cuda]} -eq 0 ]] && ! grep -q '"above_random": true' <<<"$up_json"; then
    step_rc[up_cuda]=5
    echo "gpu_check: moerl up on the device did not learn: final reward not clearly above" \
      "reward_random (rc 5)"
  fi
fi
# ---- end of the moerl up section ------------------------------------------------------------

overall=0
{
  echo "{"
  echo "  \"check\": \"kernels, policy, device policy, learn, nccl and expert plane gpu\","
  echo "  \"total_s\": $(($(date +%s) - t0)),"
  echo "  \"steps\": {"
  first=1
  for name in gpu_visible configure build kernels_cuda_twins_test policy_cuda_twins_test \
    policy_cuda_host_checks_test policy_model_cuda_test fabric_nccl_smoke_test bench \
    build_moerl learn_cuda learn_cpu "${ep_device_steps[@]}" build_job_ep_device_test \
    job_ep_device_test up_cuda up_cpu; do
    [[ -v step_rc[$name] ]] || continue
    [[ ${step_rc[$name]} -ne 0 ]] && overall=1
    [[ $first -eq 1 ]] || echo ","
    printf '    "%s": {"rc": %d, "seconds": %d}' "$name" "${step_rc[$name]}" "${step_s[$name]}"
    first=0
  done
  echo ""
  echo "  },"
  echo "  \"learn\": ${learn_json:-null},"
  echo "  \"up\": ${up_json:-null},"
  echo "  \"ok\": $([[ $overall -eq 0 ]] && echo true || echo false)"
  echo "}"
} >"$OUT/summary.json"
cat "$OUT/summary.json"
exit $overall
