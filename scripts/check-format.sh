#!/usr/bin/env bash
# Fails when a tracked C++ or CUDA source does not follow .clang-format (Debian's
# clang-format). `scripts/check-format.sh --fix` rewrites the files instead.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run -Werror "${files[@]}" 2> /tmp/moerl-format.$$; then
  grep -E '^[^ ].*: (error|warning):' /tmp/moerl-format.$$ | cut -d: -f1 | sort -u |
    sed 's/^/  not formatted: /'
  rm -f /tmp/moerl-format.$$
  echo "clang-format check FAILED: run scripts/check-format.sh --fix" >&2
  exit 1
fi
rm -f /tmp/moerl-format.$$
echo "clang-format check passed (${#files[@]} files)"
