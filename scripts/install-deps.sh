#!/usr/bin/env bash
# Installs every package moerl needs on Debian 12, idempotently (run as root).
# Only Debian's packages and PyPI are used. Skips apt entirely when all are present.
set -euo pipefail

DEBIAN_PACKAGES=(
  build-essential cmake ninja-build ccache git pkg-config clang-format
  libcaf-dev libssl-dev
  libfabric-dev libfabric-bin
  libzmq3-dev cppzmq-dev
  capnproto libcapnp-dev
  libspdlog-dev libgtest-dev libgmock-dev
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev
  libopenblas-dev libcurl4-openssl-dev
  python3 python3-dev python3-pip python3-venv pybind11-dev python3-torch python3-numpy python3-pytest python3-yaml python3-zmq
  openssl iproute2 procps
)

# Python packages from PyPI, installed for Debian's /usr/bin/python3.
PYPI_PACKAGES=(
  'moto[server]'  # store: S3 API server for tests/store (started by the test itself)
)

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "moerl: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ((${#PYPI_PACKAGES[@]})); then
  for spec in "${PYPI_PACKAGES[@]}"; do
    mod="${spec%%[*}"; mod="${mod%%=*}"
    /usr/bin/python3 -c "import ${mod//-/_}" 2>/dev/null && continue
    echo "moerl: installing from PyPI: $spec"
    /usr/bin/python3 -m pip install -q --break-system-packages "$spec"
  done
fi
