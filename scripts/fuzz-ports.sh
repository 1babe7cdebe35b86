#!/usr/bin/env bash
# The long form of the live-port fuzzer (tests/fuzz/FUZZ.md): 100,000 zzuf-mutated inputs (or
# $1) to every listening port of a `moerl up`, once as the loopback default (plain; CAF's port
# skipped) and once as a cluster off loopback (CAF over TLS, CURVE planes, every port). Figures
# (inputs per port, what the nodes refused, load average) go to $2 (default build/fuzz-ports/).
# Needs root for tcpdump on lo; at the ~30 inputs/s per port a loaded 2-core machine allows, a
# mode takes about an hour.
set -euo pipefail
cd "$(dirname "$0")/.."
inputs="${1:-100000}"
out="${2:-build/fuzz-ports}"
mkdir -p "$out"
for mode in secure plain; do
  flags=(--secure)
  [[ $mode == plain ]] && flags=(--skip CAF)
  /usr/bin/python3 tests/fuzz/live_ports_fuzz.py build/bin/moerl --inputs "$inputs" "${flags[@]}" \
    --keep "$out/$mode" --json "$out/$mode.json"
done
