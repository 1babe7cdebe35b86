#!/usr/bin/env bash
# Liveness at load (issue 31), the long form: `moerl up` (the default job, its Spot
# interruption included) beside a CPU hog holding the machine at load LOAD, RUNS times; each
# run must finish with nothing lost or duplicated and no node declared dead while alive.
# The CI form is ctest -R apps_moerl_up_load_test (load 30, 15 iterations). docs/TESTING.md.
#
#   scripts/load-test.sh [LOAD (default 45)] [RUNS (default 3)] [ITERATIONS (default 25)]
#
# Each run's hog is bounded (3 minutes) and killed with its run; MOERL_KEEP_TMP=1 keeps logs.
set -euo pipefail
cd "$(dirname "$0")/.."
load=${1:-45}
runs=${2:-3}
iterations=${3:-25}
moerl=${MOERL:-build/bin/moerl}
[[ -x $moerl ]] || { echo "load-test.sh: $moerl not built (cmake --build build --target moerl)" >&2; exit 2; }
exec /usr/bin/python3 tests/apps/moerl_up_load_test.py "$moerl" --load "$load" --runs "$runs" \
  --iterations "$iterations"
