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

source scripts/blas-env.sh

case "$mode" in
  up) exec build/bin/moerl up "$@" ;;
  test) exec scripts/run-tests.sh ;;
esac
