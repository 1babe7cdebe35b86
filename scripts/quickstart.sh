#!/usr/bin/env bash
# The README's two commands in one script: installs what is missing (Debian packages,
# idempotent), builds into build/, then either runs the main job (`up`) or the whole test
# suite (`test`). Extra arguments after `up` go to `moerl up`.
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-}"; shift || true
case "$mode" in up|test) ;; *) echo "usage: scripts/quickstart.sh up|test [args]" >&2; exit 2 ;; esac

if [ "$(id -u)" -eq 0 ]; then
  scripts/install-deps.sh
else
  sudo scripts/install-deps.sh
fi
scripts/build.sh

# OpenBLAS 0.3.21 (Debian 12) does not recognise some newer Xeons (seen here: a Sapphire
# Rapids VM reporting "Intel(R) Xeon(R) Processor") and falls back to its Prescott (SSE3)
# kernels: slow, and with a different summation order per matrix height, so the same row can
# round differently in a longer batch. Name the core from the CPU's own flags unless the user
# chose one.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
  fi
fi

case "$mode" in
  up) exec build/bin/moerl up "$@" ;;
  test) exec scripts/run-tests.sh ;;
esac
