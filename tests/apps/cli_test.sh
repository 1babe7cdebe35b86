#!/usr/bin/env bash
# CLI contract checks of the moerl binary: provenance JSON keys, config error exit codes
# (ranges included, for config check and moerl up alike), console refusals before connecting,
# and that docs/CONFIG.md's configuration reference matches the schema.
set -euo pipefail
moerl="$1"; config_doc="$2"
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# exits WANT COMMAND...: runs it with stdout/stderr in $tmp/out and $tmp/err; fails unless it
# exited WANT.
exits() {
  local want="$1"; shift
  set +e
  "$@" > "$tmp/out" 2> "$tmp/err"; local rc=$?
  set -e
  [ "$rc" -eq "$want" ] || fail "$* exited $rc, want $want: $(cat "$tmp/err")"
}

"$moerl" version --json > "$tmp/v.json"
/usr/bin/python3 - "$tmp/v.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ["commit", "compiler", "build_type", "caf", "libfabric", "zeromq", "capnp", "spdlog",
          "cuda", "nccl", "gpu", "blas"]:
    assert k in d, f"missing key {k}"
assert d["caf"] == "0.17.6", d["caf"]
provs = d["libfabric"]["providers"]
assert provs, "no libfabric providers listed"
for p in provs:
    for k in ["name", "rma", "cq_data_size", "msg_order"]:
        assert k in p, f"provider missing {k}"
names = [p["name"] for p in provs]
assert "shm" in names and any(n.startswith("tcp") for n in names), names
print("version --json ok:", ", ".join(names))
PY

printf 'log:\n  level: info\nfabric:\n  op_timeout_ms: 100\n  bogus_key: 1\n' > "$tmp/bad.yaml"
set +e
"$moerl" config check "$tmp/bad.yaml" > "$tmp/out" 2> "$tmp/err"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "config check on an unknown key exited $rc, want 2"
grep -q "bad.yaml:5" "$tmp/err" || fail "error does not name file:line: $(cat "$tmp/err")"
grep -q "fabric.bogus_key" "$tmp/err" || fail "error does not name the key: $(cat "$tmp/err")"

printf 'fabric:\n  op_timeout_ms: 250\n' > "$tmp/good.yaml"
"$moerl" config check "$tmp/good.yaml" | grep -q "op_timeout_ms: 250" || fail "valid config not echoed"

# Out-of-range values (issue 11, case 6): exit 2 naming file, line and key.
for kv in "ledger lease_timeout_ms -1" "actors units_per_iteration 0" "ledger group_size 0" \
          "actors groups_per_unit 9" "node heartbeat_interval_ms 0" "buffer capacity_samples 1"; do
  set -- $kv
  printf 'log:\n  level: info\n%s:\n  %s: %s\n' "$1" "$2" "$3" > "$tmp/range.yaml"
  exits 2 "$moerl" config check "$tmp/range.yaml"
  grep -qF "range.yaml:4: key '$1.$2': must be" "$tmp/err" || fail "range error lacks file:line and key: $(cat "$tmp/err")"
done
"$moerl" config keys > "$tmp/keys.txt"
grep -F "actors.groups_per_unit = 2 " "$tmp/keys.txt" | grep -qF "(in 1..4096; <= ledger.max_groups_per_unit)" \
  || fail "config keys does not show the range and rule: $(grep groups_per_unit "$tmp/keys.txt")"

# moerl up refuses the same values before starting any node (issue 11, case 5: it hung).
for kv in actors.units_per_iteration=0 ledger.lease_timeout_ms=-1 node.heartbeat_interval_ms=0; do
  exits 2 timeout 60 "$moerl" up --timeout 15 --run-dir "$tmp/runs" --set "$kv"
  grep -qF "moerl up: invalid configuration: --set: key '${kv%%=*}': must be" "$tmp/err" \
    || fail "moerl up --set $kv: unexpected message: $(cat "$tmp/err")"
  [ ! -e "$tmp/runs" ] || fail "moerl up --set $kv started a run: $(ls -R "$tmp/runs")"
done

# job.device=cuda is refused before any node starts, with the reason this build and host give
# (job/device.h): no CUDA in the build, no visible device, or (with one) what a group still
# lacks: the expert plane on device memory and NCCL in the trainer group (issue 29). Never
# accepted and run on the CPU.
want=$(/usr/bin/python3 - "$tmp/v.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
if d["cuda"] == "absent":
    print("this moerl was built without CUDA")
elif d["gpu"] == "none":
    print("no CUDA device visible")
else:
    print("a group of processes cannot run the policy on the device yet")
PY
)
exits 2 timeout 60 "$moerl" up --timeout 15 --run-dir "$tmp/runs" --set job.device=cuda
grep -qF "moerl up: invalid configuration: job.device=cuda: $want" "$tmp/err" \
  || fail "moerl up --set job.device=cuda: want '$want', got: $(cat "$tmp/err")"
[ ! -e "$tmp/runs" ] || fail "moerl up --set job.device=cuda started a run: $(ls -R "$tmp/runs")"
# moerl learn (one process, every expert local) runs the device policy where there is one;
# without CUDA in the build or a visible device it refuses with the same reason, before
# training anything. (With a device, bench/gpu_check.sh runs it.)
if [ "$want" != "a group of processes cannot run the policy on the device yet" ]; then
  exits 2 timeout 60 "$moerl" learn --set job.device=cuda --set grpo.iterations=1
  grep -qF "moerl learn: invalid_config: job.device=cuda: $want" "$tmp/err" \
    || fail "moerl learn --set job.device=cuda: want '$want', got: $(cat "$tmp/err")"
fi
exits 2 timeout 60 "$moerl" up --timeout 15 --run-dir "$tmp/runs" --set job.device=tpu
grep -qF "key 'job.device': 'tpu' is not one of cpu|cuda" "$tmp/err" \
  || fail "moerl up --set job.device=tpu: unexpected message: $(cat "$tmp/err")"

# A binary file is refused by offset and line without echoing its bytes; a huge one at once.
printf 'log:\n  level: info\n\x89PNG\r\n\x1a\n\x00\x00' > "$tmp/weights.bin"
exits 2 "$moerl" config check "$tmp/weights.bin"
grep -qF "weights.bin:3: not YAML text: byte 0x89 at offset 19" "$tmp/err" || fail "binary file error: $(cat "$tmp/err")"
LC_ALL=C grep -q '[^[:print:]]' "$tmp/err" && fail "binary file error echoes raw bytes"
/usr/bin/python3 -c 'import sys; open(sys.argv[1], "w").write("".join("k%07d: 1\n" % i for i in range(900000)))' "$tmp/huge.yaml"
exits 2 "$moerl" config check "$tmp/huge.yaml"
grep -qF "larger than" "$tmp/err" || fail "10 MB file error: $(cat "$tmp/err")"

# The console refuses impossible arguments before connecting: exit 1 (3 would mean it tried
# to reach the coordinator; nothing listens on port 1).
console_refuses() {  # expected message, then console words
  local want="$1"; shift
  exits 1 "$moerl" console --connect tcp://127.0.0.1:1 --set console.timeout_ms=2000 "$@"
  grep -qF -- "$want" "$tmp/err" || fail "console $*: unexpected message: $(cat "$tmp/err")"
}
for d in -5 0 nan inf 86401 soon; do
  console_refuses "--deadline must be seconds in (0, 86400], got '$d'" inject spot rollout-0 --deadline "$d"
done
console_refuses "unknown command 'frobnicate'" frobnicate
console_refuses "inject needs one of spot|rebalance|kill|sigterm, got 'meteor'" inject meteor rollout-0
console_refuses "inject spot needs a NODE" inject spot
console_refuses "drain takes one NODE, got 2" drain rollout-0 rollout-1
console_refuses "status takes no arguments" status now
console_refuses "--deadline applies to inject spot|rebalance and drain only" inject kill rollout-0 --deadline 5

"$moerl" config keys --markdown > "$tmp/keys.md"
while IFS= read -r line; do
  grep -qF -- "$line" "$config_doc" || fail "docs/CONFIG.md is stale; missing: $line (regenerate with: scripts/update-config-doc.sh)"
done < "$tmp/keys.md"

set +e
"$moerl" no-such-command > /dev/null 2>&1; rc=$?
set -e
[ "$rc" -ne 0 ] || fail "unknown subcommand exited 0"
echo "cli checks passed"
