#!/usr/bin/env bash
# CLI contract checks of the moerl binary: provenance JSON keys, config error exit codes,
# and that the README's configuration reference matches the schema.
set -euo pipefail
moerl="$1"; readme="$2"
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

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

"$moerl" config keys --markdown > "$tmp/keys.md"
while IFS= read -r line; do
  grep -qF -- "$line" "$readme" || fail "README configuration reference is stale; missing: $line (regenerate with: moerl config keys --markdown)"
done < "$tmp/keys.md"

set +e
"$moerl" no-such-command > /dev/null 2>&1; rc=$?
set -e
[ "$rc" -ne 0 ] || fail "unknown subcommand exited 0"
echo "cli checks passed"
