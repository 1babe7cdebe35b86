#!/usr/bin/env bash
# deploy/ played as pods on a real container engine (podman, as root; issue 17):
#
#   scripts/pods.sh up                 base image, node image, render, the cluster's
#                                      Secrets (a fresh CA), play every pod
#   scripts/pods.sh test [--report F]  up, then the shipped scenario sims/scenarios/
#                                      pod-drains.yaml (short form) through the console:
#                                      `moerl sim run --against COORDINATOR:7410
#                                      --deliver-via "scripts/pods.sh fault"`, a Spot drain
#                                      (podman stop --time GRACE) of a rollout group member,
#                                      then a rollout and a trainer group member lost (pod
#                                      kill), each replaced as its controller would; writes the
#                                      report, checks lost = duplicated = 0 and both groups
#                                      re-formed without the killed member, then down
#   scripts/pods.sh test --torch [--report F]
#                                      every role's work in the user's Python (issue 26): the
#                                      torch image (deploy/image/Dockerfile.torch) and
#                                      deploy/overlays/local-pods-torch, the PyTorch MoE example
#                                      of configs/torch-moe.yaml; a rollout pod killed once a
#                                      fifth of the run is done and replaced as its controller
#                                      would; checks the job learnt (best 10-iteration mean
#                                      reward >= 90% of reward_max, against random's), the
#                                      replacement's Python worker generated, lost = duplicated
#                                      = 0, no container restarted that no fault explains, then
#                                      down (~2 min warm here; the torch image cold: +2.5 min)
#   scripts/pods.sh up --torch         up with that image and overlay
#   scripts/pods.sh down               remove what up made: its pods, network and volumes
#   scripts/pods.sh fault ACTION NODE [ARG]
#                                      the sims' fault delivery for pods (sims/fault_delivery.h):
#                                      kill | terminate GRACE | stop | cont | replace NAME,
#                                      NODE being a node's name in the console
#
# The node image is deploy/image/Dockerfile (compiles moerl, as production does) on a Debian
# 12 base built here with debootstrap (no registry is reachable) and kept between runs.
# MOERL_IMAGE_FROM_BUILD=1 builds deploy/image/Dockerfile.from-build instead: the existing
# build/bin/moerl (MOERL_BUILD_DIR=DIR: DIR/bin/moerl, e.g. a CUDA-off build beside a CUDA
# one) and the Debian packages of the libraries it links (local rehearsal).
# The manifests are `kubectl kustomize deploy/overlays/local-pods`; deploy/podman/
# controllers.py turns them into the pods Kubernetes' controllers would create.
# MOERL_PODS_KEEP=1 leaves the pods running after `test` (then run `down`).
# --torch layers deploy/image/Dockerfile.torch (Debian's python3, python3-torch, python3-numpy
# and the moerl Python package) on the node image as localhost/moerl-torch:latest; the package
# is a build's python/moerl (MOERL_BUILD_DIR, default build/: `scripts/build.sh moerl_python`),
# its compiled binding beside the .py files. Without --torch nothing of it is built.
# Images stay (the cache): localhost/moerl:latest, localhost/moerl-debian:12 (also tagged
# docker.io/library/debian:12, which the Dockerfile's FROM names).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

mode="${1:-}"; shift || true
report=""
torch=0
if [ "$mode" = fault ]; then fault_args=("$@"); set --; fi
while (($#)); do
  case "$1" in
    --report) report="${2:?--report needs a file}"; shift 2 ;;
    --torch) torch=1; shift ;;
    *) echo "scripts/pods.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$mode" in up|test|down|fault) ;; *) echo "usage: scripts/pods.sh up [--torch]|test [--torch] [--report FILE]|down|fault ACTION NODE [ARG]" >&2; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "scripts/pods.sh: run as root (podman's bridge network needs it)" >&2; exit 2; }

OVERLAY=deploy/overlays/local-pods
WORK="${MOERL_PODS_DIR:-$ROOT/build/pods}"   # rendered manifests, pod files, logs, state
NETWORK=moerl-pods
IMAGE=localhost/moerl:latest
BASE=localhost/moerl-debian:12
SCENARIO=sims/scenarios/pod-drains.yaml
TORCH_IMAGE=localhost/moerl-torch:latest  # the image local-pods-torch names (moerl-torch)
((torch)) && OVERLAY=deploy/overlays/local-pods-torch
CONSOLE_PORT=7410  # console.address in the overlay's moerl.yaml, the Service's console port
export CONTAINERS_CONF="$ROOT/deploy/podman/containers.conf"

log() { printf 'pods: %s\n' "$*"; }
now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$2 - $1:.1f}')"; }
plan_pods() { python3 -c "import json; [print(p['pod']) for p in json.load(open('$WORK/plan.json'))['pods']]"; }
pod_field() {  # POD FIELD
  python3 -c "import json,sys; print(next(p for p in json.load(open('$WORK/plan.json'))['pods'] if p['pod']=='$1')['$2'])"
}
container_of() { echo "$1-moerl"; }
coordinator() { python3 -c "import json; print(next(p['pod'] for p in json.load(open('$WORK/plan.json'))['pods'] if p['role']=='coordinator'))"; }
console() { podman exec "$(container_of "$(coordinator)")" moerl console --config /etc/moerl/moerl.yaml "$@"; }

# ---- images -------------------------------------------------------------------------------
base_image() {
  if podman image exists "$BASE"; then
    log "base image $BASE cached"
  else
    local t0 root; t0=$(now); root=$(mktemp -d /var/tmp/moerl-debootstrap.XXXXXX)
    log "building the Debian 12 base image with debootstrap (minbase)"
    nice -n 19 debootstrap --variant=minbase --include=ca-certificates bookworm "$root" \
      http://deb.debian.org/debian > "$WORK/debootstrap.log" 2>&1 \
      || { log "debootstrap failed, see $WORK/debootstrap.log"; rm -rf "$root"; exit 1; }
    tar -C "$root" -c . | podman import -q \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'LABEL moerl.io/base=debootstrap-bookworm-minbase' \
      --change 'CMD ["/bin/bash"]' - "$BASE" > /dev/null
    rm -rf "$root"
    log "base image built in $(elapsed "$t0" "$(now)") s"
  fi
  podman tag "$BASE" docker.io/library/debian:12
}

node_image() {
  local t0; t0=$(now)
  if [ "${MOERL_IMAGE_FROM_BUILD:-0}" = 1 ]; then
    local bin="${MOERL_BUILD_DIR:-build}/bin/moerl"
    [ -x "$bin" ] || { log "MOERL_IMAGE_FROM_BUILD=1 needs $bin: run scripts/build.sh"; exit 2; }
    # The image gets the binary and the Debian packages of its libraries, nothing else;
    # runtime-packages.sh refuses a binary linking libraries outside the system's library
    # directories (a CUDA-found build: every pod exited "libcublas.so.13: cannot open").
    local ctx pkgs; ctx="$WORK/image-context"; rm -rf "$ctx"; mkdir -p "$ctx"
    pkgs=$(scripts/runtime-packages.sh "$bin") || {
      log "MOERL_IMAGE_FROM_BUILD=1: use a build configured with -DMOERL_ENABLE_CUDA=OFF, or the default image build"
      exit 2; }
    cp "$bin" "$ctx/"
    log "building $IMAGE from $bin (MOERL_IMAGE_FROM_BUILD=1)"
    nice -n 19 podman build -q --pull=never -f deploy/image/Dockerfile.from-build \
      --build-arg "RUNTIME_PACKAGES=$pkgs" -t "$IMAGE" "$ctx" > "$WORK/image-build.log" 2>&1 \
      || { tail -20 "$WORK/image-build.log"; exit 1; }
  else
    log "building $IMAGE from deploy/image/Dockerfile (compiles moerl; log in $WORK/image-build.log)"
    nice -n 19 podman build --pull=never --ignorefile deploy/image/dockerignore \
      -f deploy/image/Dockerfile -t "$IMAGE" . > "$WORK/image-build.log" 2>&1 \
      || { tail -20 "$WORK/image-build.log"; exit 1; }
  fi
  IMAGE_BUILD_S=$(elapsed "$t0" "$(now)")
  local version; version=$(podman run --rm "$IMAGE" version)
  log "node image built in $IMAGE_BUILD_S s: ${version%%$'\n'*}"
}

# The node image with the Python workers (--torch), on top of $IMAGE: Debian's python3 and
# python3-torch, and a build's moerl package (its .py files and the compiled _moerl binding,
# for Debian 12's python3 like the image's). The binding's libraries are installed from the
# Debian packages that own them, as for the binary.
torch_image() {
  local t0 pkg ctx so pkgs; t0=$(now)
  pkg="${MOERL_BUILD_DIR:-build}/python/moerl"
  so=$(ls "$pkg"/_moerl.*.so 2> /dev/null | head -1) || true
  [ -n "$so" ] || { log "--torch needs the moerl Python package in $pkg: run scripts/build.sh moerl_python"; exit 2; }
  pkgs=$(scripts/runtime-packages.sh "$so") || {
    log "--torch: $so links libraries outside the system's (a CUDA build?): use a build configured with -DMOERL_ENABLE_CUDA=OFF"
    exit 2; }
  ctx="$WORK/torch-context"; rm -rf "$ctx"; mkdir -p "$ctx"
  # The package as the build assembled it, without caches compiled on the host.
  cp -r "$pkg" "$ctx/moerl"; find "$ctx" -name __pycache__ -prune -exec rm -rf {} +
  log "building $TORCH_IMAGE from deploy/image/Dockerfile.torch on $IMAGE (log in $WORK/torch-image-build.log)"
  nice -n 19 podman build --pull=never -f deploy/image/Dockerfile.torch \
    --build-arg "NODE_IMAGE=$IMAGE" --build-arg "BINDING_PACKAGES=$pkgs" \
    -t "$TORCH_IMAGE" "$ctx" > "$WORK/torch-image-build.log" 2>&1 \
    || { tail -20 "$WORK/torch-image-build.log"; exit 1; }
  TORCH_IMAGE_BUILD_S=$(elapsed "$t0" "$(now)")
  local size; size=$(podman image inspect --format '{{.Size}}' "$TORCH_IMAGE")
  log "torch image built in $TORCH_IMAGE_BUILD_S s ($((size / 1048576)) MiB)"
  podman run --rm --entrypoint /usr/bin/python3 "$TORCH_IMAGE" -c \
    "import moerl, moerl.worker, moerl.examples.torch_moe.rollout, torch; print('moerl', moerl.__version__, 'torch', torch.__version__)" \
    | sed 's/^/pods: torch image imports: /'
}

# ---- manifests and pods -------------------------------------------------------------------
render() {
  command -v kubectl > /dev/null || { log "kubectl (for kubectl kustomize) is not installed"; exit 2; }
  kubectl kustomize "$OVERLAY" > "$WORK/rendered.yaml"
  rm -rf "$WORK/pods"
  python3 deploy/podman/controllers.py plan "$WORK/rendered.yaml" "$WORK" > /dev/null
  log "rendered $OVERLAY: $(plan_pods | wc -l) pods ($WORK/rendered.yaml)"
}

play_pod() {  # POD: plays its file, under its Services' names as network aliases
  local pod=$1 aliases net=$NETWORK
  aliases=$(python3 -c "import json; print(','.join(next(p for p in json.load(open('$WORK/plan.json'))['pods'] if p['pod']=='$pod')['aliases']))")
  [ -n "$aliases" ] && net="$NETWORK:alias=$aliases"
  podman kube play --network "$net" "$WORK/pods/$pod.yaml" \
    > "$WORK/play-$pod.log" 2>&1 || { cat "$WORK/play-$pod.log"; exit 1; }
}

up() {
  mkdir -p "$WORK"
  scripts/install-deps.sh --pods
  base_image
  node_image
  ((torch)) && torch_image
  render
  cluster_secrets
  config_volumes
  podman network exists "$NETWORK" || podman network create --label moerl.io/pods=1 "$NETWORK" > /dev/null
  podman kube play --network "$NETWORK" "$WORK/resources.yaml" > "$WORK/play-resources.log"
  local t0 pod; t0=$(now)
  for pod in $(plan_pods); do play_pod "$pod"; done
  PLAYED_AT=$t0
  log "played $(plan_pods | wc -l) pods in $(elapsed "$t0" "$(now)") s on network $NETWORK"
  wait_nodes
  scan_nodes
}

# ---- the cluster's Secrets ----------------------------------------------------------------
# A CA of this cluster's own, made per `up` (its key is deleted once it signed the one node
# certificate every pod presents), and random console tokens: the Secrets moerl-tls and
# moerl-console that the overlay mounts (deploy/components/cluster-secrets), never committed.
# podman 4.3 would write a Secret's values into its volume base64-encoded, so each Secret is
# a podman volume of its name holding the decoded files (deploy/podman/controllers.py).
# The host keeps the console token in $WORK/secrets for `moerl sim run --against`.
cluster_secrets() {
  local dir=$WORK/secrets
  rm -rf "$dir"; mkdir -m 700 -p "$dir/moerl-tls" "$dir/moerl-console" "$dir/moerl-plane"
  (
    cd "$dir/moerl-tls"
    openssl req -x509 -newkey rsa:3072 -nodes -days 2 -subj "/CN=moerl-pods-ca-$(date +%s)" \
      -keyout ca.key -out ca.crt 2> /dev/null
    openssl req -newkey rsa:3072 -nodes -subj /CN=moerl-node -keyout tls.key -out tls.csr 2> /dev/null
    openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out tls.crt 2> /dev/null
    rm -f ca.key ca.srl tls.csr
  ) || { log "openssl could not make the cluster's CA and certificate"; exit 1; }
  for f in token viewer operator; do openssl rand -hex 24 > "$dir/moerl-console/$f"; done
  openssl rand -hex 32 > "$dir/moerl-plane/secret"  # node.plane_secret_file: CURVE on the ZeroMQ planes
  local name mount
  for name in $(python3 -c "import json; print(' '.join(json.load(open('$WORK/plan.json'))['secrets']))"); do
    [ -d "$dir/$name" ] || { log "the pods mount a Secret $name that pods.sh does not make"; exit 1; }
    if podman volume exists "$name"; then podman volume rm -f "$name" > /dev/null; fi
    podman volume create --label moerl.io/pods=1 "$name" > /dev/null
    mount=$(podman volume inspect --format '{{.Mountpoint}}' "$name")
    install -m 0400 "$dir/$name"/* "$mount/"
  done
  log "made the cluster's CA, node certificate, console tokens and plane secret (Secrets moerl-tls, moerl-console, moerl-plane)"
}

# Each ConfigMap the pods mount as a podman volume of its name, filled once here before any
# pod plays (deploy/podman/controllers.py: kube play --configmap would rewrite it at every
# pod's play, truncating the file under nodes that are starting).
config_volumes() {
  python3 - "$WORK/plan.json" <<'EOF' | while IFS=$'\t' read -r name file; do
import json, sys
for name, files in json.load(open(sys.argv[1]))["configmaps"].items():
    for file in files:
        print(f"{name}\t{file}")
EOF
    if ! podman volume exists "$name"; then podman volume create --label moerl.io/pods=1 "$name" > /dev/null; fi
    python3 -c "import json,sys; sys.stdout.write(json.load(open('$WORK/plan.json'))['configmaps']['$name']['$file'])" \
      > "$(podman volume inspect --format '{{.Mountpoint}}' "$name")/$file"
  done
  log "filled the ConfigMap volumes $(python3 -c "import json; print(' '.join(json.load(open('$WORK/plan.json'))['configmaps']))")"
}

# The host's view of the console: the coordinator pod's address on the pod network, and a
# config naming the token file (moerl sim run --against ADDRESS --config FILE).
console_host() {
  local infra
  infra=$(podman pod inspect --format '{{.InfraContainerID}}' "$(coordinator)")
  echo "$(podman inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$infra"):$CONSOLE_PORT"
}
host_console_config() {
  printf 'console:\n  token_file: %s\nnode:\n  plane_secret_file: %s\n' "$WORK/secrets/moerl-console/token" \
    "$WORK/secrets/moerl-plane/secret" > "$WORK/host-console.yaml"
  echo "$WORK/host-console.yaml"
}

wait_nodes() {  # until every pod's node registered with the coordinator
  local want; want=$(($(plan_pods | wc -l) - 1))
  for _ in $(seq 1 120); do
    local alive
    alive=$(console status --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin).get('nodes_alive',0))" 2>/dev/null || echo 0)
    if [ "$alive" -ge "$want" ]; then log "$alive nodes registered with the coordinator"; return 0; fi
    sleep 1
  done
  log "only $alive of $want nodes registered after 120 s"; podman ps -a; return 1
}

down() {
  [ -f "$WORK/plan.json" ] || { log "nothing to remove (no $WORK/plan.json)"; return 0; }
  local pods pod present=()
  pods=$(plan_pods; cat "$WORK/replaced" 2>/dev/null || true)
  for pod in $pods; do
    podman pod exists "$pod" || continue  # replaced earlier (its log is saved)
    save_log "$pod"
    present+=("$pod")
  done
  # One call for all (one at a time took ~5 s a pod); podman's complaints about systemd
  # health-check timers (no systemd here) go to down.log.
  if ((${#present[@]})); then
    podman pod rm -f -t 0 "${present[@]}" > /dev/null 2>> "$WORK/down.log" || remove_pods "${present[@]}"
  fi
  # The claims' volumes, the Secrets, and the volumes podman made for configMap mounts
  # (named after their ConfigMap).
  python3 - "$WORK/resources.yaml" "$WORK/configmaps.yaml" <<'EOF' | while read -r kind name; do
import sys, yaml
for path in sys.argv[1:]:
    for d in yaml.safe_load_all(open(path)):
        if d: print(d["kind"], d["metadata"]["name"])
EOF
    case "$kind" in
      PersistentVolumeClaim|ConfigMap)
        if podman volume exists "$name"; then podman volume rm -f "$name" > /dev/null; fi ;;
      Secret) podman secret rm "$name" > /dev/null 2>&1 || true ;;
    esac
  done
  for name in $(python3 -c "import json; print(' '.join(json.load(open('$WORK/plan.json')).get('secrets', [])))"); do
    if podman volume exists "$name"; then podman volume rm -f "$name" > /dev/null; fi
  done
  rm -rf "$WORK/secrets"
  if podman network exists "$NETWORK"; then podman network rm -f "$NETWORK" > /dev/null; fi
  rm -f "$WORK/plan.json" "$WORK/replaced" "$WORK/nodes.tsv"
  log "removed the pods, volumes and network that up made"
}

# podman 4.3 may refuse `pod rm -f` of a pod whose node container it holds as "stopped"
# ("container state improper", seen after a pod kill under load): the pod is stopped first,
# then removed, one at a time. Never fails (down goes on to the volumes and the network).
remove_pods() {  # POD...
  local pod
  for pod in "$@"; do
    podman pod exists "$pod" || continue
    podman pod stop -t 0 "$pod" > /dev/null 2>> "$WORK/down.log" || true
    podman pod rm -f -t 0 "$pod" > /dev/null 2>> "$WORK/down.log" \
      || log "could not remove pod $pod (see $WORK/down.log)"
  done
}

# ---- faults the way Kubernetes delivers them (`pods.sh fault`, for moerl sim) --------------
save_log() {  # POD: its node's log, kept in $WORK/logs after the pod is gone
  mkdir -p "$WORK/logs"
  podman logs "$(container_of "$1")" > "$WORK/logs/$1.log" 2>&1 || true
}

keep_failed_run_logs() {  # every pod's log of a failed run, in its own folder ($WORK/logs is
  # per pod name, and StatefulSet pods have the same name every run)
  local keep pod; keep="$WORK/failed-$(date -u +%Y%m%dT%H%M%SZ)"; mkdir -p "$keep"
  for pod in $(plan_pods; cat "$WORK/replaced" 2>/dev/null || true); do
    if podman pod exists "$pod"; then podman logs "$(container_of "$pod")" > "$keep/$pod.log" 2>&1 || true
    elif [ -f "$WORK/logs/$pod.log" ]; then cp "$WORK/logs/$pod.log" "$keep/"; fi
  done
  cp "$WORK/sim-summary.txt" "$keep/" 2>/dev/null || true
  log "the failed run's pod logs: $keep"
}

node_of_pod() {  # POD: the node name in its health file (node.health_file), once it has one
  podman exec "$(container_of "$1")" cat /tmp/moerl-health.json 2> /dev/null \
    | python3 -c "import json,sys; print(json.load(sys.stdin)['node'])" 2> /dev/null
}

# Nodes name themselves (role-<id>) and a pod is named by its controller: $WORK/nodes.tsv
# maps one to the other, from each pod's health file.
scan_nodes() {
  local pod node
  : > "$WORK/nodes.tsv.new"
  for pod in $(plan_pods); do
    if node=$(node_of_pod "$pod") && [ -n "$node" ]; then
      printf '%s\t%s\n' "$node" "$pod" >> "$WORK/nodes.tsv.new"
    fi
  done
  mv "$WORK/nodes.tsv.new" "$WORK/nodes.tsv"
}
pod_of_node() {  # NODE
  local pod
  pod=$(awk -F'\t' -v n="$1" '$1 == n {print $2}' "$WORK/nodes.tsv" 2> /dev/null | tail -1)
  if [ -z "$pod" ]; then
    scan_nodes
    pod=$(awk -F'\t' -v n="$1" '$1 == n {print $2}' "$WORK/nodes.tsv" | tail -1)
  fi
  [ -n "$pod" ] || { log "no pod runs node $1"; exit 2; }
  echo "$pod"
}

record() {  # JSON object without its closing brace: one line per blow, for the report
  echo "$1,\"at_unix_s\":$(now)}" >> "$WORK/faults.jsonl"
}

# A Spot drain as the kubelet delivers it: SIGTERM to the pod's containers, SIGKILL after
# terminationGracePeriodSeconds, and the pod's sandbox (its network) torn down only after
# they exited. `podman pod stop -t GRACE` would stop the infra container with the others and
# take the network away mid-drain (seen: the drained node lost the coordinator and exited
# 3), so the container is stopped first, then the pod. The grace is the pod's own
# terminationGracePeriodSeconds, whatever the scenario asked: the kubelet's rule.
fault_terminate() {  # NODE [SCENARIO_GRACE]
  local node=$1 pod grace t0 t1 code
  pod=$(pod_of_node "$node"); grace=$(pod_field "$pod" grace_s); t0=$(now)
  podman stop -t "$grace" "$(container_of "$pod")" > /dev/null
  t1=$(now)
  podman pod stop -t 0 "$pod" > /dev/null 2>> "$WORK/podman-errors.log"
  code=$(podman inspect --format '{{.State.ExitCode}}' "$(container_of "$pod")")
  log "drained $pod ($node; podman stop -t $grace): exited $code after $(elapsed "$t0" "$t1") s"
  record "{\"fault\":\"spot_drain\",\"node\":\"$node\",\"pod\":\"$pod\",\"grace_s\":$grace,\"scenario_grace_s\":${2:-null},\"exit_code\":$code,\"drain_s\":$(elapsed "$t0" "$t1")"
}

fault_kill() {  # NODE: a node loss; returns once the container has exited
  local node=$1 pod state
  pod=$(pod_of_node "$node")
  # Under load podman can give up waiting for conmon's exit file after the signal went out
  # ("timed out waiting for file /run/libpod/exits/..."): what counts is that the node's
  # container exited, which `podman wait` and its state tell.
  podman pod kill -s KILL "$pod" > /dev/null 2>> "$WORK/podman-errors.log" \
    || log "podman pod kill -s KILL $pod reported an error (podman-errors.log); checking the container"
  podman wait "$(container_of "$pod")" > /dev/null 2>&1 || true
  state=$(podman inspect --format '{{.State.Status}}' "$(container_of "$pod")")
  [ "$state" = exited ] || { log "$pod's container is $state after podman pod kill -s KILL"; exit 1; }
  log "killed $pod ($node; podman pod kill -s KILL)"
  record "{\"fault\":\"node_loss\",\"node\":\"$node\",\"pod\":\"$pod\""
}

# The controller's replacement (same name for a StatefulSet pod, a new one for a
# Deployment's); prints the new pod's node name once the node wrote its health file.
# Replacements run one at a time (they rewrite plan.json).
fault_replace() {  # NODE
  local old new node="" t0
  old=$(pod_of_node "$1"); t0=$(now)
  exec 9> "$WORK/replace.lock"; flock 9
  new=$(python3 deploy/podman/controllers.py replace "$WORK" "$old")
  echo "$old" >> "$WORK/replaced"
  # A ReplicaSet creates the new pod as soon as the old one is gone from its count, without
  # waiting for its removal: play first, then save the old pod's log and remove it.
  if [ "$new" = "$old" ]; then  # a StatefulSet's pod: its name must be free first
    save_log "$old"
    if podman pod exists "$old"; then podman pod rm -f -t 0 "$old" > /dev/null 2>> "$WORK/podman-errors.log" || remove_pods "$old"; fi
    play_pod "$new"
  else
    play_pod "$new"
    save_log "$old"
    if podman pod exists "$old"; then podman pod rm -f -t 0 "$old" > /dev/null 2>> "$WORK/podman-errors.log" || remove_pods "$old"; fi
  fi
  flock -u 9
  for _ in $(seq 1 240); do
    node=$(node_of_pod "$new") && [ -n "$node" ] && break
    sleep 0.5
  done
  [ -n "$node" ] || { log "the replacement $new of $old wrote no health file in 120 s"; exit 1; }
  printf '%s\t%s\n' "$node" "$new" >> "$WORK/nodes.tsv"
  log "controller replaced $old by $new (node $node) in $(elapsed "$t0" "$(now)") s"
  record "{\"fault\":\"replacement\",\"of\":\"$old\",\"pod\":\"$new\",\"node\":\"$node\",\"to_health_file_s\":$(elapsed "$t0" "$(now)")"
  echo "$node"
}

fault() {  # ACTION NODE [ARG]
  local action=${1:-} node=${2:-}
  [ -n "$node" ] || { echo "usage: scripts/pods.sh fault kill|terminate|stop|cont|replace NODE [ARG]" >&2; exit 2; }
  [ -f "$WORK/plan.json" ] || { log "no pods are up ($WORK/plan.json)"; exit 2; }
  case "$action" in
    kill) fault_kill "$node" ;;
    terminate) fault_terminate "$node" "${3:-}" ;;
    stop) podman pod pause "$(pod_of_node "$node")" > /dev/null ;;
    cont) podman pod unpause "$(pod_of_node "$node")" > /dev/null ;;
    replace) fault_replace "$node" ;;
    *) echo "scripts/pods.sh fault: unknown action $action" >&2; exit 2 ;;
  esac
}

# ---- the test: a shipped scenario against the pods, through the console -------------------
status_field() { console status --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# The moerl that drives the scenario from the host: the image's own binary (Debian 12 like
# this host, its libraries installed by install-deps.sh), so the runner and the nodes agree.
host_moerl() {
  local c
  c=$(podman create "$IMAGE")
  podman cp "$c:/usr/local/bin/moerl" "$WORK/moerl" > /dev/null
  podman rm "$c" > /dev/null
  echo "$WORK/moerl"
}

# Waits until the cluster committed its first sample; FIRST_COMMIT_S: how long after the pods
# were played (the tests' reports carry it).
wait_first_commit() {
  FIRST_COMMIT_S=""
  while [ -z "$FIRST_COMMIT_S" ]; do
    [ "$(status_field "d['accounting']['committed']")" -gt 0 ] && FIRST_COMMIT_S=$(elapsed "$PLAYED_AT" "$(now)")
    sleep 0.5
  done
  log "first committed sample $FIRST_COMMIT_S s after the pods were played"
}

run_test() {
  local t0 report_file sim_rc=0 moerl address
  t0=$(now)
  # A scenario that stops before writing its report must not be judged by the last run's.
  rm -f "$WORK/faults.jsonl" "$WORK/sim-report.json"
  up
  wait_first_commit
  moerl=$(host_moerl); address=$(console_host)
  log "running $SCENARIO --short against the console at $address (faults: scripts/pods.sh fault)"
  MOERL_PODS_DIR="$WORK" "$moerl" sim run "$SCENARIO" --short --against "$address" \
    --deliver-via "$ROOT/scripts/pods.sh fault" --config "$(host_console_config)" \
    --report "$WORK/sim-report.json" > "$WORK/sim-summary.txt" 2>&1 || sim_rc=$?
  cat "$WORK/sim-summary.txt"
  report_file="${report:-$WORK/report.json}"
  console report --json > "$WORK/report-raw.json" || true
  local rc=0
  python3 - "$WORK/sim-report.json" "$WORK/report-raw.json" "$WORK/faults.jsonl" "$report_file" \
    "$IMAGE_BUILD_S" "$FIRST_COMMIT_S" "$(elapsed "$t0" "$(now)")" "$sim_rc" <<'EOF' || rc=$?
import json, sys
sim_path, raw_path, faults_path, out, build_s, first_s, wall_s, sim_rc = sys.argv[1:]
try:
    sim = json.load(open(sim_path))
except (OSError, ValueError):
    sim = {}
try:
    coordinator = json.load(open(raw_path))
except (OSError, ValueError):
    coordinator = None
try:
    delivered = [json.loads(l) for l in open(faults_path) if l.strip()]
except FileNotFoundError:
    delivered = []
drains = [f for f in delivered if f["fault"] == "spot_drain"]
rep = {"pods": {"engine": "podman kube play", "scenario": sim.get("scenario"),
                "image_build_s": float(build_s), "played_to_first_commit_s": float(first_s),
                "wall_s": float(wall_s), "delivered": delivered},
       "sim": sim, "coordinator_report": coordinator}
a = sim.get("accounting") or {}
print(f"pods: scenario verdict {sim.get('verdict')}; accounting {json.dumps(a)}")
for d in drains:
    print(f"pods: drain of {d['pod']}: {d['drain_s']} s inside a grace of {d['grace_s']} s, "
          f"exit code {d['exit_code']}")
# The groups as pods: a member of each group lost (podman pod kill), each group re-formed with
# its controller's new pod, the killed member no longer among its members.
kills = [f for f in delivered if f["fault"] == "node_loss"]
groups = (coordinator or {}).get("groups") or []
groups_ok = True
for role in ("trainer", "rollout"):
    killed = [k for k in kills if k["pod"].startswith(f"moerl-{role}-")]
    mine = [g for g in groups if g.get("role") == role]
    g = mine[0] if mine else {}
    ok_g = (len(mine) == 1 and killed and g.get("state") == "formed" and g.get("reformed")
            and not any(k["node"] in g.get("members", []) for k in killed))
    groups_ok = groups_ok and bool(ok_g)
    print(f"pods: {role} group {g.get('name')}: {'re-formed' if ok_g else 'NOT re-formed'} after "
          f"{len(killed)} member kill(s); state {g.get('state')}, incarnation {g.get('incarnation')}, "
          f"members {g.get('members')}, re-formations {[r.get('cause') for r in g.get('reformed', [])]}")
rep["pods"]["groups"] = groups
json.dump(rep, open(out, "w"), indent=2)
ok = (sim.get("verdict") == "pass" and int(sim_rc) == 0 and a.get("lost") == 0
      and a.get("duplicated") == 0 and drains and all(d["exit_code"] == 0 for d in drains)
      and groups_ok)
sys.exit(0 if ok else 1)
EOF
  log "report in $report_file (the scenario's own: $WORK/sim-report.json)"
  return $rc
}

# ---- the torch rehearsal (--torch): the job's Python workers as pods -----------------------
# No scenario file: pod-drains.yaml kills a member of each group and expects both to re-form,
# and local-pods-torch has no groups (external workers run one process per node). The fault is
# delivered by the same functions `pods.sh fault` runs for the sims.
# Until the coordinator's status makes CONDITION (Python over its JSON, d) true; fails once no
# new policy version came for 600 s (a run that stopped advancing has failed).
wait_run() {  # CONDITION WHAT
  local last=-1 v since; since=$(now)
  until [ "$(status_field "$1")" = True ]; do
    v=$(status_field "d['policy_version']")
    if [ "$v" != "$last" ]; then last=$v; since=$(now); fi
    if python3 -c "import sys; sys.exit(0 if $(now) - $since > 600 else 1)"; then
      log "no new policy version for 600 s (at ${v:-?}) waiting for $2"; return 1
    fi
    sleep 1
  done
}

run_torch_test() {
  local t0 iterations kill_at node pod new_out new_node report_file rc=0
  t0=$(now)
  rm -f "$WORK/faults.jsonl" "$WORK/report-raw.json"
  up
  wait_first_commit
  # The kill comes once the job is well under way (a fifth of the iterations), so the rest of
  # the run is long enough for the replacement to join, start its Python worker and lease.
  iterations=$(status_field "d['iterations']"); kill_at=$((iterations / 5))
  # up's scan mapped the pods to their nodes already: the kill follows the version at once.
  wait_run "d['policy_version'] >= $kill_at" "policy version $kill_at" || return 1
  node=$(awk -F'\t' '$2 ~ /^moerl-rollout-/ {print $1}' "$WORK/nodes.tsv" | head -1)
  [ -n "$node" ] || { scan_nodes; node=$(awk -F'\t' '$2 ~ /^moerl-rollout-/ {print $1}' "$WORK/nodes.tsv" | head -1); }
  [ -n "$node" ] || { log "no rollout pod's node in $WORK/nodes.tsv"; return 1; }
  pod=$(pod_of_node "$node")
  # The trainer's reward curve so far: the report at the end holds only its newest entries.
  console nodes --json > "$WORK/nodes-at-kill.json"
  log "policy version $(status_field "d['policy_version']") of $iterations: killing rollout pod $pod ($node)"
  fault_kill "$node"
  new_out=$(fault_replace "$node") || { printf '%s\n' "$new_out"; return 1; }
  printf '%s\n' "$new_out" | sed '$d'
  new_node=$(printf '%s\n' "$new_out" | tail -1)
  wait_run "d['done']" "the run's end" || return 1
  console report --json > "$WORK/report-raw.json"
  # Every container podman restarted (restartPolicy Always, as a kubelet does): only the
  # killed pod's loss was planned, so any restart here is a failure to explain (with the exit
  # code of the container's last exit, which its log may not say: a signal is 128 + its number).
  local p
  for p in $(plan_pods); do
    podman container exists "$(container_of "$p")" || continue
    printf '%s\t%s\n' "$p" "$(podman inspect --format '{{.RestartCount}}	{{.State.ExitCode}}' "$(container_of "$p")")"
  done > "$WORK/restarts.tsv"
  report_file="${report:-$WORK/report.json}"
  python3 - "$WORK/report-raw.json" "$WORK/faults.jsonl" "$report_file" "$node" "$new_node" \
    "${IMAGE_BUILD_S:-0}" "${TORCH_IMAGE_BUILD_S:-0}" "$FIRST_COMMIT_S" "$(elapsed "$t0" "$(now)")" <<'EOF' || rc=$?
import json, sys
raw, faults_path, out, killed, new, build_s, torch_s, first_s, wall_s = sys.argv[1:]
rep = json.load(open(raw))
work = raw.rsplit("/", 1)[0]
rows = [l.split("\t") for l in open(f"{work}/restarts.tsv").read().split("\n") if l]
restarts = {p: int(n) for p, n, _ in rows}
last_exit = {p: int(code) for p, _, code in rows}
delivered = [json.loads(l) for l in open(faults_path) if l.strip()]
nodes = {n["name"]: n for n in rep["nodes"]}
job = next((n["stats"]["job"] for n in rep["nodes"]
            if isinstance(n.get("stats", {}).get("job"), dict)
            and n["stats"]["job"].get("trainer") == "external"), None)
problems = []
if job is None:
    problems.append("no external (Python) trainer's stats in the report")
    job = {}
# The whole curve: the entries the trainer reported before the kill (nodes-at-kill.json) and
# the report's (its newest entries only), by iteration.
by_it = {}
try:
    early = next((n["stats"]["job"] for n in json.load(open(f"{work}/nodes-at-kill.json"))
                  if isinstance(n.get("stats", {}).get("job"), dict)
                  and n["stats"]["job"].get("trainer") == "external"), {})
except (OSError, ValueError, StopIteration):
    early = {}
for p in early.get("reward_curve", []) + job.get("reward_curve", []):
    by_it[p["iteration"]] = p["mean_reward"]
curve = [by_it[i] for i in sorted(by_it)]
best = max((sum(curve[i - 10:i]) / 10 for i in range(10, len(curve) + 1)), default=0.0)
first10 = sum(curve[:10]) / 10 if len(curve) >= 10 else None
first_it = min(by_it) if by_it else None
reward_max, reward_random = job.get("reward_max"), job.get("reward_random")
a = rep["accounting"]
def workers(n):  # the Python rollout workers' figures on node n (one per rollout worker actor)
    return [w for w in ((n or {}).get("stats", {}).get("external_worker") or {}).values()
            if isinstance(w, dict) and "leases_offered" in w]
new_w = workers(nodes.get(new))
print(f"pods: {rep['policy_version']} of {rep['iterations']} iterations; reward: best 10-iteration "
      f"mean {best:.3f}, first 10 (from iteration {first_it}) "
      f"{first10 if first10 is None else round(first10, 3)}, "
      f"reward_max {reward_max}, random {reward_random}")
print(f"pods: killed {killed} ({nodes.get(killed, {}).get('state')}); its replacement {new}: "
      f"{nodes.get(new, {}).get('state')}, Python rollout worker {new_w}")
print(f"pods: accounting {json.dumps(a)}")
if not rep.get("done"):
    problems.append("the run is not done")
if a.get("lost") != 0 or a.get("duplicated") != 0 or not a.get("invariant_ok"):
    problems.append(f"books: lost {a.get('lost')}, duplicated {a.get('duplicated')}, "
                    f"invariant_ok {a.get('invariant_ok')}")
if reward_max is None or best < 0.9 * reward_max:
    problems.append(f"did not learn: best 10-iteration mean {best:.3f} < 90% of {reward_max}")
if not new_w or sum(w.get("samples_accepted", 0) for w in new_w) == 0:
    problems.append(f"the replacement {new} generated nothing in Python: {new_w}")
unplanned = {p: f"{n} restart(s), last exit code {last_exit[p]}" for p, n in restarts.items() if n}
print(f"pods: container restarts {unplanned or 'none'}")
if unplanned:
    problems.append(f"containers restarted that no fault explains: {unplanned}")
if nodes.get(killed, {}).get("state") not in ("dead", "unreachable"):
    problems.append(f"the killed node {killed} is {nodes.get(killed, {}).get('state')}")
json.dump({"pods": {"engine": "podman kube play", "overlay": "local-pods-torch",
                    "image_build_s": float(build_s), "torch_image_build_s": float(torch_s),
                    "played_to_first_commit_s": float(first_s), "wall_s": float(wall_s),
                    "delivered": delivered, "best_mean10_reward": best,
                    "first10_mean_reward": first10, "curve_from_iteration": first_it,
                    "container_restarts": restarts,
                    "reward_max": reward_max, "reward_random": reward_random,
                    "problems": problems},
           "coordinator_report": rep}, open(out, "w"), indent=2)
for p in problems:
    print("pods: FAIL:", p)
sys.exit(1 if problems else 0)
EOF
  log "report in $report_file"
  return $rc
}

case "$mode" in
  up) up ;;
  down) down ;;
  fault) fault "${fault_args[@]}" ;;
  test)
    [ "${MOERL_PODS_KEEP:-0}" = 1 ] || trap down EXIT
    mkdir -p "$WORK"; down > /dev/null
    if ((torch)); then
      if run_torch_test; then log "test passed: the Python workers' job learnt, a rollout pod was killed and replaced, lost 0, duplicated 0"
      else keep_failed_run_logs; log "test FAILED"; exit 1; fi
    elif run_test; then log "test passed: the scenario passed (lost 0, duplicated 0, invariants hold), the drain exited 0, both groups re-formed after a member's kill"
    else keep_failed_run_logs; log "test FAILED"; exit 1; fi ;;
esac
