#!/usr/bin/env bash
# Configures and builds moerl into build/ (binaries in build/bin/, tests in build/tests/).
# CUDA sources are compiled when nvcc is found (MOERL_ENABLE_CUDA=AUTO). Warnings are errors
# here (MOERL_WERROR=ON): the supported toolchain (Debian 12's g++) builds with none, so a new
# one fails the build and CI.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/moerl-ccache}"
# Worktrees and clean clones in other directories share the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$PWD")}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERL_WERROR=ON ${MOERL_CMAKE_ARGS:-}
cmake --build build -j "$(nproc)"
