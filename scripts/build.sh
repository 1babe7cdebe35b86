#!/usr/bin/env bash
# Configures and builds moerl into build/ (binaries in build/bin/, tests in build/tests/):
# every target, or only the targets named (`scripts/build.sh moerl`: the binary alone, what
# `scripts/quickstart.sh up` needs).
# CUDA sources are compiled when nvcc is found (MOERL_ENABLE_CUDA=AUTO). Warnings are errors
# here (MOERL_WERROR=ON): the supported toolchain (Debian 12's g++) builds with none, so a new
# one fails the build and CI.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/moerl-ccache}"
# Worktrees and clean clones in other directories share the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$PWD")}"
# Configure only when build/ is not configured as this script configures it, or when
# MOERL_CMAKE_ARGS asks for something: otherwise the build re-runs CMake by itself when a
# CMakeLists.txt changed, and a second `scripts/quickstart.sh up` skips a configure that takes
# 5-30 s on a loaded 2-core machine.
cache=build/CMakeCache.txt
if [ -n "${MOERL_CMAKE_ARGS:-}" ] || [ ! -f build/build.ninja ] ||
   ! grep -qx 'CMAKE_BUILD_TYPE:STRING=Release' "$cache" || ! grep -qx 'MOERL_WERROR:BOOL=ON' "$cache"; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERL_WERROR=ON ${MOERL_CMAKE_ARGS:-}
fi
if (($#)); then
  cmake --build build -j "$(nproc)" --target "$@"
else
  cmake --build build -j "$(nproc)"
fi

# The Python package (python/, built into build/python/moerl): a moerl.pth in the system
# interpreter's site directory (/usr/local/lib/python3.X/dist-packages, which Debian keeps for
# the local administrator) puts build/python on its path, so `python3 -c "import moerl"` works
# after this script with no PYTHONPATH, and a rebuild is picked up without reinstalling. It
# needs root (the README's commands run as root); otherwise say how to point Python at it.
MOERL_PYTHON="${MOERL_PYTHON:-/usr/bin/python3}"
if [ -x "$MOERL_PYTHON" ] && [ -d build/python/moerl ]; then
  if [ "$(id -u)" = 0 ]; then
    site="$("$MOERL_PYTHON" -c 'import site; print(site.getsitepackages()[0])')"
    mkdir -p "$site"
    echo "$PWD/build/python" > "$site/moerl.pth"
  else
    echo "build.sh: not root, so no moerl.pth: use PYTHONPATH=$PWD/build/python $MOERL_PYTHON" >&2
  fi
fi
