#!/usr/bin/env bash
# Prints the Debian packages that own the shared libraries BINARY links, one line, space
# separated: what a runtime image must install for the binary to start (deploy/image's
# Dockerfiles). Exits 2 naming the libraries outside the system's library directories (a
# CUDA toolkit under /usr/local, as a build that found nvcc links): an image built from
# Debian's packages cannot have them, and every pod would exit "cannot open shared object".
# MOERL_BASE_IMAGE_LIBS=PREFIX[:PREFIX...]: libraries under these prefixes are the runtime base
# image's own (deploy/image/Dockerfile.cuda: /usr/local/cuda, which NVIDIA's runtime image
# holds), accepted and left out of the list.
set -euo pipefail
binary="${1:?usage: scripts/runtime-packages.sh BINARY}"
[ -x "$binary" ] || { echo "runtime-packages: $binary is not an executable" >&2; exit 2; }
libs=$(ldd "$binary" | awk '$3 ~ /^\// {print $3}')
IFS=: read -ra base_prefixes <<< "${MOERL_BASE_IMAGE_LIBS:-}"
for prefix in "${base_prefixes[@]}"; do
  [ -n "$prefix" ] && libs=$(printf '%s\n' "$libs" | awk -v p="$prefix" 'index($1, p) != 1')
done
outside=$(printf '%s\n' "$libs" | awk '$1 !~ /^\/(usr\/)?lib(32|64)?\//' | tr '\n' ' ')
if [ -n "${outside// /}" ]; then
  echo "runtime-packages: $binary links libraries outside the system's library directories: $outside" >&2
  exit 2
fi
# dpkg knows a library by the path its package installed, which usrmerge may have moved
# (/lib/x86_64-linux-gnu vs /usr/lib/...): try the path ldd gives, its real path and that
# without /usr. A library no package owns is left out (the base image has its loader).
for lib in $libs; do
  real=$(realpath "$lib")
  for path in "$lib" "$real" "${real#/usr}"; do
    owner=$(dpkg -S "$path" 2>/dev/null | head -1) && { echo "${owner%%:*}"; break; }
  done
done | sort -u | tr '\n' ' '
echo
