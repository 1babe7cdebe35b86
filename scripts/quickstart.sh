#!/usr/bin/env bash
# The README's two commands in one script: installs what is missing (Debian packages,
# idempotent), builds into build/, then either runs the main job (`up`) or the whole test
# suite (`test`). Extra arguments after `up` go to `moerl up`.
#
# `up` installs only what building and running moerl need (install-deps.sh --build-only) and
# builds only the `moerl` binary: a newcomer's first run waits for neither the test tools
# (Chromium, torch, Prometheus, MPI, ...) nor the ~450 test and benchmark targets. `test`
# installs everything and builds everything (what CI runs: .ci/run). Each phase's time goes
# to stderr ("quickstart: ... in N s").
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-}"; shift || true
case "$mode" in up|test) ;; *) echo "usage: scripts/quickstart.sh up|test [args]" >&2; exit 2 ;; esac

phase_start=$SECONDS
phase_done() {
  echo "quickstart: $1 in $((SECONDS - phase_start)) s" >&2
  phase_start=$SECONDS
}

deps_args=()
build_targets=()
if [ "$mode" = up ]; then
  deps_args=(--build-only)
  build_targets=(moerl)
fi
if [ "$(id -u)" -eq 0 ]; then
  scripts/install-deps.sh "${deps_args[@]}"
else
  sudo scripts/install-deps.sh "${deps_args[@]}"
fi
phase_done "packages (install-deps.sh ${deps_args[*]:-all})"
scripts/build.sh "${build_targets[@]}"
phase_done "build (${build_targets[*]:-every target})"

source scripts/blas-env.sh

case "$mode" in
  up) exec build/bin/moerl up "$@" ;;
  test) exec scripts/run-tests.sh ;;
esac
