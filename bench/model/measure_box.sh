#!/usr/bin/env bash
# The scale model's validation reference on this machine (bench/model/README.md, "Validation"):
# in one sitting, the step costs the box profile is calibrated from (`moerl bench job-ep`: the
# trainer step and one prompt group's generation; `moerl bench weights`: one policy version
# through the cache), then the run the model predicts (`moerl up --no-interrupt`), its report
# kept. `uptime` before and after each, since the machine is shared.
# Usage: bench/model/measure_box.sh OUT_DIR [ITERATIONS]   (from the repository root, moerl built)
set -euo pipefail
final=${1:?usage: measure_box.sh OUT_DIR [ITERATIONS]}
iterations=${2:-100}
moerl=${MOERL:-build/bin/moerl}
# Written aside and moved into place at the end: the model reads every reference/*/ there is,
# so a sitting appears only once it is whole.
out="$(dirname "$final")/.$(basename "$final").partial"  # a dot: reference/*/ skips it
rm -rf "$out"
mkdir -p "$out"
stamp() { echo "$1 $(date -u +%FT%TZ) $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.txt"; }
: > "$out/load.txt"
stamp job_ep_start
"$moerl" bench job-ep --ranks 2 --reps 20 > "$out/job_ep.json"
stamp weights_start
# The default policy's version is 544,688 bytes (report.json: weights.versions[].bytes).
"$moerl" bench weights --sizes 544688 --readers 1 --paths cache_tcp cache_shm --reps 20 --warmup 2 \
  --json > "$out/weights.json"
stamp up_start
port=$((20000 + RANDOM % 20000))
"$moerl" up --no-interrupt --iterations "$iterations" --console "tcp://127.0.0.1:$port" \
  --run-dir "$out/run" --report "$out/run/report.json" --timeout 600 > "$out/up.log" 2>&1
stamp up_end
# Keep what the model reads (the iterations' timings, provenance), not the logs and the store.
/usr/bin/python3 - "$out" "$iterations" <<'PY'
import json, shutil, sys
out = sys.argv[1]
r = json.load(open(f"{out}/run/report.json"))
its = len(r.get("iterations", []))
if its != r.get("policy_iterations") or its < int(sys.argv[2]):
    sys.exit(f"measure_box: the report holds {its} iteration timings of {sys.argv[2]}: not a reference")
keep = {k: r[k] for k in ("iterations", "provenance", "wall_s", "accounting", "policy_iterations", "task")
        if k in r}
keep["weights_version_bytes"] = [v.get("bytes") for v in r.get("weights", {}).get("versions", [])][:1]
json.dump(keep, open(f"{out}/up_report.json", "w"), indent=1)
shutil.rmtree(f"{out}/run")
PY
rm -f "$out/up.log"
mv "$out" "$final"
