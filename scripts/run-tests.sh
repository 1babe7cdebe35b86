#!/usr/bin/env bash
# Runs the whole test suite: the clang-format check of every C++ source, every CTest entry of
# build/ (GoogleTest suites, the PyTorch oracle tests, multi-process tests), then the message
# codec tests again under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/, warnings
# as errors there too).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/moerl-ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$PWD")}"
source scripts/blas-env.sh

echo "== format (.clang-format)"
format_rc=0
scripts/check-format.sh || format_rc=$?

echo "== ctest (build/)"
main_rc=0
(cd build && ctest --output-on-failure --timeout 900 -j 2) || main_rc=$?

echo "== sanitizer build (build-asan/): message codecs under address,undefined"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMOERL_SANITIZE=address,undefined -DMOERL_ENABLE_CUDA=OFF -DMOERL_WERROR=ON > /dev/null
cmake --build build-asan -j "$(nproc)" --target messages_codec_roundtrip_test messages_codec_fuzz_test \
  messages_lease_and_shard_codec_test
asan_rc=0
(cd build-asan && ctest -L messages --output-on-failure) || asan_rc=$?

if [ "$main_rc" -ne 0 ] || [ "$asan_rc" -ne 0 ] || [ "$format_rc" -ne 0 ]; then
  echo "moerl tests FAILED (ctest rc=$main_rc, sanitizer rc=$asan_rc, format rc=$format_rc)"
  exit 1
fi
echo "moerl tests passed"
