#!/usr/bin/env python3
"""The default `moerl up` against variants of its configuration, side by side (issue 27).

Knock-out experiments: what does a part of the job cost? Each round runs the default `moerl
up --no-interrupt` and then every variant (a name and its config overrides), the order
rotating each round so a load trend hits all of them, and writes one JSON with provenance:
per run the steady ms per iteration, CPU seconds of the whole process tree (user and system),
the iteration and time at which the 10-iteration mean reached 0.9 of max, lost and
duplicated, the load average before and after; per variant the medians.

  bench/job_ep/up_variants.py [--rounds 3] [--iterations 500] [--out FILE]
      --variant NAME=KEY=VALUE[,KEY=VALUE...] [--variant ...]

e.g. --variant no-checkpoints=job.checkpoint_every=0 --variant no-fsync=store.local_fsync=false
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from up_vs_learn import ROOT, run_up  # noqa: E402  (one way to run and read a `moerl up`)


def parse_variant(text):
    """NAME=KEY=VALUE[,KEY=VALUE...] -> (name, ["--set", "KEY=VALUE", ...])."""
    name, sep, overrides = text.partition("=")
    pairs = [kv for kv in overrides.split(",") if kv]
    if not name or name == "default" or not sep or not pairs or any("=" not in kv for kv in pairs):
        sys.exit(f"up_variants: --variant {text!r}: expected NAME=KEY=VALUE[,KEY=VALUE...] "
                 "with a name other than 'default'")
    return name, [x for kv in pairs for x in ("--set", kv)]


def median_of(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=500)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bin", "moerl"))
    ap.add_argument("--out", default=os.path.join(
        ROOT, "bench", "job_ep", "results",
        f"up_variants_{datetime.datetime.now().strftime('%Y-%m-%dT%H%M%S')}.json"))
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=KEY=VALUE,...")
    a = ap.parse_args()
    if a.rounds < 1 or a.iterations < 20 or not a.variant:
        sys.exit("up_variants: --rounds >= 1, --iterations >= 20 and at least one --variant")
    variants = [("default", [])] + [parse_variant(v) for v in a.variant]
    if len({n for n, _ in variants}) != len(variants):
        sys.exit("up_variants: two variants have the same name")
    version = json.loads(subprocess.run([a.binary, "version", "--json"], capture_output=True,
                                        text=True, check=True).stdout)
    runs = []
    with tempfile.TemporaryDirectory(prefix="moerl-up-variants-") as scratch:
        for k in range(a.rounds):
            for name, sets in variants[k % len(variants):] + variants[:k % len(variants)]:
                r = run_up(a.binary, a.iterations, sets, scratch)
                r.update({"variant": name, "round": k, "cpu_s": r["cpu_user_s"] + r["cpu_sys_s"]})
                runs.append(r)
                print(f"round {k} {name:16s}: {r['steady_ms_per_iteration']:.2f} ms/it, CPU "
                      f"{r['cpu_user_s']:.1f}+{r['cpu_sys_s']:.1f} s, 0.9 at iteration "
                      f"{r['iteration_at_0.9']}, lost {r['lost']} dup {r['duplicated']}, load "
                      f"{r['load_before']:.1f}", flush=True)
    summary = {name: {"overrides": sets[1::2],
                      "median_steady_ms_per_iteration":
                          median_of([r for r in runs if r["variant"] == name],
                                    "steady_ms_per_iteration"),
                      "median_cpu_s": median_of([r for r in runs if r["variant"] == name], "cpu_s")}
               for name, sets in variants}
    out = {"what": "the default `moerl up --no-interrupt` against variants of its configuration, "
                   "rotating order each round: steady ms per iteration and the process tree's CPU",
           "command": " ".join(sys.argv), "date_utc": datetime.datetime.utcnow().isoformat(),
           "provenance": version, "cpus": os.cpu_count(), "iterations": a.iterations,
           "variants": summary, "runs": runs}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    for name, s in summary.items():
        print(f"up_variants: {name:16s} median {s['median_steady_ms_per_iteration']:.2f} ms/it, "
              f"CPU {s['median_cpu_s']:.1f} s")
    print(f"up_variants: JSON in {a.out}")


if __name__ == "__main__":
    main()
