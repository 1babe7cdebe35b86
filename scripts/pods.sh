#!/usr/bin/env bash
# deploy/ played as pods on a real container engine (podman, as root; issue 17):
#
#   scripts/pods.sh up                 base image, node image, render, play every pod
#   scripts/pods.sh test [--report F]  up, run the job to its end with a Spot drain
#                                      (stop -t GRACE) and a node loss (pod kill), each
#                                      followed by the controller's replacement, write the
#                                      report, check lost = duplicated = 0, then down
#   scripts/pods.sh down               remove what up made: its pods, network and volumes
#
# The node image is deploy/image/Dockerfile (compiles moerl, as production does) on a Debian
# 12 base built here with debootstrap (no registry is reachable) and kept between runs.
# MOERL_IMAGE_FROM_BUILD=1 builds deploy/image/Dockerfile.from-build instead: the existing
# build/bin/moerl and the Debian packages of the libraries it links (local rehearsal).
# The manifests are `kubectl kustomize deploy/overlays/local-pods`; deploy/podman/
# controllers.py turns them into the pods Kubernetes' controllers would create.
# MOERL_PODS_KEEP=1 leaves the pods running after `test` (then run `down`).
# Images stay (the cache): localhost/moerl:latest, localhost/moerl-debian:12 (also tagged
# docker.io/library/debian:12, which the Dockerfile's FROM names).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

mode="${1:-}"; shift || true
report=""
while (($#)); do
  case "$1" in
    --report) report="${2:?--report needs a file}"; shift 2 ;;
    *) echo "scripts/pods.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$mode" in up|test|down) ;; *) echo "usage: scripts/pods.sh up|test [--report FILE]|down" >&2; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "scripts/pods.sh: run as root (podman's bridge network needs it)" >&2; exit 2; }

OVERLAY=deploy/overlays/local-pods
WORK="${MOERL_PODS_DIR:-$ROOT/build/pods}"   # rendered manifests, pod files, logs, state
NETWORK=moerl-pods
IMAGE=localhost/moerl:latest
BASE=localhost/moerl-debian:12
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
    [ -x build/bin/moerl ] || { log "MOERL_IMAGE_FROM_BUILD=1 needs build/bin/moerl: run scripts/build.sh"; exit 2; }
    local ctx pkgs; ctx="$WORK/image-context"; rm -rf "$ctx"; mkdir -p "$ctx"
    cp build/bin/moerl "$ctx/"
    # The Debian packages that own the shared libraries the binary links (dpkg -S fails on
    # the few paths no package owns; the rest is still listed).
    pkgs=$(ldd build/bin/moerl | awk '$3 ~ /^\// {print $3}' | xargs -n1 realpath \
           | { xargs dpkg -S 2>/dev/null || true; } | cut -d: -f1 | sort -u | tr '\n' ' ')
    log "building $IMAGE from build/bin/moerl (MOERL_IMAGE_FROM_BUILD=1)"
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
  podman kube play --network "$net" --configmap "$WORK/configmaps.yaml" "$WORK/pods/$pod.yaml" \
    > "$WORK/play-$pod.log" 2>&1 || { cat "$WORK/play-$pod.log"; exit 1; }
}

up() {
  mkdir -p "$WORK"
  scripts/install-deps.sh --pods
  base_image
  node_image
  render
  podman network exists "$NETWORK" || podman network create --label moerl.io/pods=1 "$NETWORK" > /dev/null
  podman kube play --network "$NETWORK" "$WORK/resources.yaml" > "$WORK/play-resources.log"
  local t0 pod; t0=$(now)
  for pod in $(plan_pods); do play_pod "$pod"; done
  PLAYED_AT=$t0
  log "played $(plan_pods | wc -l) pods in $(elapsed "$t0" "$(now)") s on network $NETWORK"
  wait_nodes
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
  local pods; pods=$(plan_pods; cat "$WORK/replaced" 2>/dev/null || true)
  for pod in $pods; do
    podman pod exists "$pod" || continue  # replaced earlier (its log is saved)
    save_log "$pod"
    podman pod rm -f -t 0 "$pod" > /dev/null
  done
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
  if podman network exists "$NETWORK"; then podman network rm -f "$NETWORK" > /dev/null; fi
  rm -f "$WORK/plan.json" "$WORK/replaced"
  log "removed the pods, volumes and network that up made"
}

# ---- the job, with faults the way Kubernetes delivers them --------------------------------
status_field() { console status --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

save_log() {  # POD: its node's log, kept in $WORK/logs after the pod is gone
  mkdir -p "$WORK/logs"
  podman logs "$(container_of "$1")" > "$WORK/logs/$1.log" 2>&1 || true
}

replace_pod() {  # POD: the controller's replacement (same name for a StatefulSet pod)
  local old=$1 new
  save_log "$old"
  if podman pod exists "$old"; then podman pod rm -f -t 0 "$old" > /dev/null; fi
  new=$(python3 deploy/podman/controllers.py replace "$WORK" "$old")
  echo "$old" >> "$WORK/replaced"
  play_pod "$new"
  echo "$new"
}

first_rollout() { python3 -c "import json; print(next(p['pod'] for p in json.load(open('$WORK/plan.json'))['pods'] if p['role']=='rollout'))"; }

# A Spot drain as the kubelet delivers it: SIGTERM to the pod's containers, SIGKILL after
# terminationGracePeriodSeconds, and the pod's sandbox (its network) torn down only after
# they exited. `podman pod stop -t GRACE` would stop the infra container with the others and
# take the network away mid-drain (seen: the drained node lost the coordinator and exited
# 3), so the container is stopped first, then the pod.
drain_pod() {  # POD
  local pod=$1 grace t0 t1 code
  grace=$(pod_field "$pod" grace_s); t0=$(now)
  podman stop -t "$grace" "$(container_of "$pod")" > /dev/null
  t1=$(now)
  podman pod stop -t 0 "$pod" > /dev/null
  code=$(podman inspect --format '{{.State.ExitCode}}' "$(container_of "$pod")")
  log "drained $pod (podman stop -t $grace): exited $code after $(elapsed "$t0" "$t1") s"
  FAULTS+=("{\"fault\":\"spot_drain\",\"pod\":\"$pod\",\"grace_s\":$grace,\"exit_code\":$code,\"drain_s\":$(elapsed "$t0" "$t1"),\"at_iteration\":$(status_field "d['iteration']")}")
  [ "$code" = 0 ] || { log "the drained node did not exit 0"; DRAIN_OK=0; }
}

kill_pod() {  # POD: a node loss
  local pod=$1
  podman pod kill -s KILL "$pod" > /dev/null
  log "killed $pod (podman pod kill -s KILL)"
  FAULTS+=("{\"fault\":\"node_loss\",\"pod\":\"$pod\",\"at_iteration\":$(status_field "d['iteration']")}")
}

wait_iteration() {  # N: until the job reaches iteration N (or is done)
  while :; do
    local it; it=$(status_field "d['iteration'] if not d.get('done') else 10**9" || echo 0)
    [ "$it" -ge "$1" ] && return 0
    sleep 2
  done
}

run_test() {
  FAULTS=(); DRAIN_OK=1
  local t0 iterations first_commit="" new report_file
  t0=$(now)
  up
  iterations=$(status_field "d['iterations']")
  log "job: $iterations iterations; a Spot drain at 1/3, a node loss at 2/3"
  while [ -z "$first_commit" ]; do
    [ "$(status_field "d['accounting']['committed']")" -gt 0 ] && first_commit=$(elapsed "$PLAYED_AT" "$(now)")
    sleep 1
  done
  log "first committed sample $first_commit s after the pods were played"
  wait_iteration $((iterations / 3))
  local victim; victim=$(first_rollout)
  drain_pod "$victim"
  new=$(replace_pod "$victim"); log "controller replaced $victim by $new"
  wait_iteration $((2 * iterations / 3))
  victim=$(first_rollout)
  kill_pod "$victim"
  new=$(replace_pod "$victim"); log "controller replaced $victim by $new"
  while [ "$(status_field "d.get('done', False)")" != True ]; do sleep 2; done
  # The trainer steps on the last short iteration after its flush; its figures follow.
  sleep 5
  report_file="${report:-$WORK/report.json}"
  console report --json > "$WORK/report-raw.json"
  python3 - "$WORK/report-raw.json" "$report_file" "$IMAGE_BUILD_S" "$first_commit" \
    "$(elapsed "$t0" "$(now)")" "[$(IFS=,; echo "${FAULTS[*]}")]" <<'EOF'
import json, sys
raw, out, build_s, first_s, wall_s, faults = sys.argv[1:]
rep = json.load(open(raw))
rep["pods"] = {"engine": "podman kube play", "image_build_s": float(build_s),
               "played_to_first_commit_s": float(first_s), "wall_s": float(wall_s),
               "faults": json.loads(faults)}
json.dump(rep, open(out, "w"), indent=2)
a = rep["accounting"]
print(f"pods: accounting {json.dumps(a)}")
ok = rep.get("done") and a["lost"] == 0 and a["duplicated"] == 0 and a["invariant_ok"]
sys.exit(0 if ok else 1)
EOF
  local rc=$?
  log "report in $report_file"
  return $((rc || !DRAIN_OK))
}

case "$mode" in
  up) up ;;
  down) down ;;
  test)
    [ "${MOERL_PODS_KEEP:-0}" = 1 ] || trap down EXIT
    mkdir -p "$WORK"; down > /dev/null
    if run_test; then log "test passed: lost 0, duplicated 0, invariant holds, drain exited 0"
    else log "test FAILED"; exit 1; fi ;;
esac
