#!/usr/bin/env bash
# Builds the GPU node image (deploy/image/Dockerfile.cuda) where its CUDA base images are
# available to the builder, and says plainly when they are not: no registry is reachable from
# the development machines, so there this stops with exit 3 and the CPU node image
# (deploy/image/Dockerfile) stays what every overlay but eks-gpu runs.
#
#   deploy/image/build-cuda.sh [--check] [--no-pull] [-t TAG]
#     --check     only say whether both base images are available (exit 0 or 3), build nothing
#     --no-pull   use the engine's local images only (no registry is asked)
#     -t TAG      the image's tag (default localhost/moerl-cuda:latest; overlays/eks-gpu names
#                 moerl-cuda: `kustomize edit set image moerl-cuda=REGISTRY/moerl-cuda:TAG`)
#   CUDA_DEVEL_IMAGE, CUDA_RUNTIME_IMAGE: other bases than Dockerfile.cuda's ARG defaults (the
#     same CUDA version in both)
#   MOERL_IMAGE_ENGINE: podman or docker (a path or a name; default: podman if found, else docker)
#   MOERL_PULL_TIMEOUT_S: the limit on each pull (default 300)
# Exit: 0 built (or --check: available), 2 usage, 3 a base image is not available (or no engine),
# else the engine's build failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
DOCKERFILE=deploy/image/Dockerfile.cuda

usage() { sed -n '7,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
check_only=0 pull=1 tag=localhost/moerl-cuda:latest
while (($#)); do
  case "$1" in
    --check) check_only=1 ;;
    --no-pull) pull=0 ;;
    -t) (($# >= 2)) || usage; tag="$2"; shift ;;
    *) echo "build-cuda: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done

# The defaults are the Dockerfile's own ARGs, so the two never disagree.
arg_default() { sed -n "s/^ARG $1=//p" "$DOCKERFILE" | head -1; }
devel="${CUDA_DEVEL_IMAGE:-$(arg_default CUDA_DEVEL_IMAGE)}"
runtime="${CUDA_RUNTIME_IMAGE:-$(arg_default CUDA_RUNTIME_IMAGE)}"
[ -n "$devel" ] && [ -n "$runtime" ] || { echo "build-cuda: no CUDA base ARG defaults in $DOCKERFILE" >&2; exit 2; }

not_available() {
  echo "build-cuda: $1" >&2
  echo "build-cuda: a CUDA base image is not available to this builder, so the GPU image" \
       "($DOCKERFILE) cannot be built here; the CPU node" \
       "image (deploy/image/Dockerfile) stays the default. Where NVIDIA's images are reachable" \
       "(or loaded into ${kind:-the engine}'s store), run this again, or name other bases with" \
       "CUDA_DEVEL_IMAGE and CUDA_RUNTIME_IMAGE." >&2
  exit 3
}

engine="${MOERL_IMAGE_ENGINE:-}"
if [ -z "$engine" ]; then
  if command -v podman > /dev/null; then engine=podman
  elif command -v docker > /dev/null; then engine=docker
  fi
fi
[ -n "$engine" ] && command -v "$engine" > /dev/null \
  || not_available "no container engine (podman or docker${engine:+; MOERL_IMAGE_ENGINE=$engine is not a command})"
kind=$(basename "$engine")

# An image is available when the engine's store has it, or (unless --no-pull) a pull brings it.
available() {
  local image="$1" out
  if "$engine" image inspect "$image" > /dev/null 2>&1; then
    echo "build-cuda: $image is in $kind's local store"
    return 0
  fi
  ((pull)) || not_available "$image is not in $kind's local store (--no-pull: no registry asked)"
  echo "build-cuda: pulling $image"
  if out=$(timeout "${MOERL_PULL_TIMEOUT_S:-300}" "$engine" pull "$image" 2>&1); then
    return 0
  fi
  not_available "$image is not in $kind's local store and pulling it failed: $(printf '%s' "$out" | tail -3 | tr '\n' ' ')"
}
available "$devel"
available "$runtime"
if ((check_only)); then
  echo "build-cuda: both CUDA base images are available to $kind; build with $0"
  exit 0
fi

# The bases are local now: podman must not ask a registry again (--pull=never); docker needs
# BuildKit for the Dockerfile's ccache mount, and reads Dockerfile.cuda.dockerignore (a link to
# dockerignore) beside the Dockerfile, as podman reads --ignorefile: a host's build/ stays out.
args=(build -f "$DOCKERFILE" --build-arg "CUDA_DEVEL_IMAGE=$devel"
      --build-arg "CUDA_RUNTIME_IMAGE=$runtime" -t "$tag")
case "$kind" in
  podman*) args+=(--pull=never --ignorefile deploy/image/dockerignore) ;;
  *) export DOCKER_BUILDKIT=1 ;;
esac
echo "build-cuda: $engine ${args[*]} ."
"$engine" "${args[@]}" .
echo "build-cuda: built $tag"
