#!/usr/bin/env bash
# Configures and builds moerl into build/ (binaries in build/bin/, tests in build/tests/).
# CUDA sources are compiled when nvcc is found (MOERL_ENABLE_CUDA=AUTO).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/moerl-ccache}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${MOERL_CMAKE_ARGS:-}
cmake --build build -j "$(nproc)"
