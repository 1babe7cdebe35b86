#!/usr/bin/env bash
# Installs every package moerl needs on Debian 12, idempotently (run as root).
# Only Debian's packages and PyPI are used. Skips apt entirely when all are present.
# `--pods` also installs POD_PACKAGES (the container engine of scripts/pods.sh); the build
# and the test suite never need them.
set -euo pipefail

# `--build-only` installs BUILD_PACKAGES alone: what compiling build/bin/moerl needs, none of
# the test, benchmark and development tools and no PyPI (deploy/image/Dockerfile's build
# stage: the image compiles without tests, and PyPI may not be reachable from inside a build).
with_pods=0
build_only=0
for arg in "$@"; do
  case "$arg" in
    --pods) with_pods=1 ;;
    --build-only) build_only=1 ;;
    *) echo "usage: scripts/install-deps.sh [--pods] [--build-only]" >&2; exit 2 ;;
  esac
done

# Compiling moerl (cmake/MoerlDependencies.cmake; GTest is found there even without tests).
BUILD_PACKAGES=(
  build-essential cmake ninja-build ccache git pkg-config
  libcaf-dev libssl-dev
  libfabric-dev libfabric-bin
  libzmq3-dev cppzmq-dev
  capnproto libcapnp-dev
  libspdlog-dev libgtest-dev libgmock-dev
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev
  libopenblas-dev libcurl4-openssl-dev
  libxxhash-dev  # policy/params.cpp: XXH3 content hash, header-only
  openssl iproute2 procps
  python3-dev pybind11-dev  # python/ is configured with every build (only `test` compiles it)
)

# The tests, benchmarks and development tools on top.
DEV_PACKAGES=(
  clang-format
  libopenmpi-dev openmpi-bin  # bench/ep: the MPI_Alltoallv peer (optional in CMake)
  linux-perf  # profiling the expert plane (bench/ep)
  python3 python3-pip python3-venv python3-torch python3-numpy python3-pytest python3-yaml python3-zmq
  python3-matplotlib  # bench/model (the scale model) and bench/package (the report): PNG plots
  prometheus chromium python3-websocket  # console: promtool check metrics; the dashboard test's headless browser
  curl  # console: the HTTPS console test reads /metrics with it
  zzuf tcpdump  # tests/fuzz: the live-port fuzzer (zzuf) mutating frames captured from the run (tcpdump)
)

# Only for scripts/pods.sh (the rendered deploy/ manifests played as pods, issue 17): the
# engine (podman; runc because crun refuses hybrid cgroup layouts; netavark and aardvark-dns
# for the bridge network and names between pods), buildah for the image, debootstrap for the
# Debian 12 base image (no registry can be pulled from), tini for that base's pid 1,
# openssl for the cluster's CA and certificate (the TLS Secret pods.sh makes).
POD_PACKAGES=(
  podman buildah runc netavark aardvark-dns iptables catatonit debootstrap tini openssl
)
DEBIAN_PACKAGES=("${BUILD_PACKAGES[@]}")
((build_only)) || DEBIAN_PACKAGES+=("${DEV_PACKAGES[@]}")
((with_pods)) && DEBIAN_PACKAGES+=("${POD_PACKAGES[@]}")

# Python packages from PyPI, installed for Debian's /usr/bin/python3.
PYPI_PACKAGES=(
  'moto[server]'  # store: S3 API server for tests/store (started by the test itself)
  'kubernetes-validate'  # deploy: offline schema check of every rendered overlay (tests/deploy)
)

# One dpkg-query for all of them (one per package took seconds on a loaded machine).
declare -A installed=()
while read -r pkg status; do
  [ "$status" = "install ok installed" ] && installed[$pkg]=1
done < <(dpkg-query -W -f='${Package} ${Status}\n' "${DEBIAN_PACKAGES[@]}" 2>/dev/null || true)
missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  [ -n "${installed[$pkg]:-}" ] || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "moerl: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! ((build_only)) && ((${#PYPI_PACKAGES[@]})); then
  for spec in "${PYPI_PACKAGES[@]}"; do
    mod="${spec%%[*}"; mod="${mod%%=*}"
    /usr/bin/python3 -c "import ${mod//-/_}" 2>/dev/null && continue
    echo "moerl: installing from PyPI: $spec"
    /usr/bin/python3 -m pip install -q --break-system-packages "$spec"
  done
fi
