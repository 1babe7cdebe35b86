#!/usr/bin/env python3
"""The default distributed job against the single process, side by side (issue 27).

Runs `moerl learn` (one process) and the default `moerl up --no-interrupt` (9 node
processes: 2-member trainer and rollout groups) on the same task, alternately, for --pairs
pairs (the order flips every pair, so a load trend hits both), and writes one JSON with
provenance: per run the time from launch to the first 10-iteration mean reward >= 90% of the
task's maximum, that iteration, wall time, CPU seconds of the whole process tree (user and
system, from the children's rusage: `moerl up` waits for its nodes, so theirs count), and the
load average before and after; per pair the ratio up/learn of the time to 0.9, and the ratio
of their milliseconds an iteration (up's steady pace against learn's mean): the speed half of
the first ratio, apart from where each run's reward crossed 0.9. Quote the ratios only from a
quiet machine (the load averages are in the file to check).

  bench/job_ep/up_vs_learn.py [--pairs 3] [--iterations 800] [--out FILE] [--set KEY=VALUE ...]
"""
import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def children_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime, ru.ru_stime


def first_reach(rewards, reward_max):
    """Index of the first iteration whose trailing 10-iteration mean is >= 90% of max (as
    `moerl learn` computes it), or None."""
    for i in range(9, len(rewards)):
        if sum(rewards[i - 9:i + 1]) / 10 >= 0.9 * reward_max:
            return i
    return None


def timed(cmd, log_path):
    load_before = os.getloadavg()[0]
    u0, s0 = children_cpu_s()
    launch = time.time()
    with open(log_path, "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    elapsed = time.time() - launch
    u1, s1 = children_cpu_s()
    if rc != 0:
        sys.exit(f"up_vs_learn: {' '.join(cmd)} exited {rc}; its output is in {log_path}")
    return {"launch_unix_s": launch, "elapsed_s": elapsed, "cpu_user_s": u1 - u0,
            "cpu_sys_s": s1 - s0, "load_before": load_before, "load_after": os.getloadavg()[0]}


def run_learn(binary, iterations, sets, scratch):
    report = os.path.join(scratch, "learn.json")
    cmd = [binary, "learn", "--print-every", "0", "--report", report,
           "--set", f"grpo.iterations={iterations}"] + sets
    r = timed(cmd, os.path.join(scratch, "learn.log"))
    rep = json.load(open(report))
    # learn's clock starts after the task and policy are built: add what came before it.
    startup = r["elapsed_s"] - rep["wall_s"]
    reach = rep["seconds_to_90pct_10it_mean"]
    r.update({"kind": "learn", "wall_s": rep["wall_s"],
              # learn's iterations take the same time from the first (no start-up ramp).
              "ms_per_iteration": 1000.0 * rep["wall_s"] / max(len(rep["iterations"]), 1),
              "iteration_at_0.9": rep["first_iteration_at_90pct_10it_mean"] if reach >= 0 else None,
              "launch_to_0.9_s": startup + reach if reach >= 0 else None,
              "final_reward_10it": statistics.mean(
                  x["mean_reward"] for x in rep["reward_curve"][-10:])})
    return r


def off_size_steps(curve):
    """Steps whose group count is not the run's most common one (a step that took a group past
    its iteration, or a short one the trainer's flush made)."""
    sizes = [c.get("groups", 0) for c in curve]
    if not sizes:
        return 0
    usual = statistics.mode(sizes)
    return sum(1 for n in sizes if n != usual)


def run_up(binary, iterations, sets, scratch):
    report = os.path.join(scratch, "up.json")
    cmd = [binary, "up", "--no-interrupt", "--iterations", str(iterations), "--report", report,
           "--run-dir", os.path.join(scratch, "up-run")] + sets
    r = timed(cmd, os.path.join(scratch, "up.log"))
    rep = json.load(open(report))
    curve = rep["reward_curve"]
    ends = {it["iteration"]: it["end_unix_ms"] for it in rep["iterations"]}
    # The steady pace: ms per iteration from the first fifth's end (start-up and the first,
    # longer generations left out) to the last.
    times = sorted(ends.values())
    skip = len(times) // 5
    steady = ((times[-1] - times[skip]) / (len(times) - 1 - skip)
              if len(times) - 1 - skip > 0 else None)
    i = first_reach([c["mean_reward"] for c in curve], rep["reward_max"])
    reached = curve[i]["iteration"] if i is not None else None
    r.update({"kind": "up", "wall_s": rep["wall_s"], "iteration_at_0.9": reached,
              "steady_ms_per_iteration": steady,
              "launch_to_0.9_s": (ends[reached] / 1000 - r["launch_unix_s"]
                                  if reached in ends else None),
              "final_reward_10it": statistics.mean(c["mean_reward"] for c in curve[-10:]),
              "lost": rep["accounting"].get("lost"),
              "duplicated": rep["accounting"].get("duplicated"),
              # What explains a run that reaches 0.9 late or not at all: how stale its samples
              # were, steps that took more or fewer groups than most, and what broke mid-run.
              "staleness_mean": (statistics.mean(c.get("staleness", 0) for c in curve)
                                 if curve else None),
              "steps": len(curve),
              "steps_off_size": off_size_steps(curve),
              "replacements": len(rep.get("replacements", [])),
              "group_reformations": sum(len(g.get("reformed", [])) for g in rep.get("groups", []))})
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=800)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bin", "moerl"))
    ap.add_argument("--out", default=os.path.join(
        ROOT, "bench", "job_ep", "results",
        f"up_vs_learn_{datetime.datetime.now().strftime('%Y-%m-%dT%H%M%S')}.json"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override given to both commands")
    a = ap.parse_args()
    if a.pairs < 1 or a.iterations < 20:
        sys.exit("up_vs_learn: --pairs >= 1 and --iterations >= 20")
    sets = [x for kv in a.set for x in ("--set", kv)]
    version = json.loads(subprocess.run([a.binary, "version", "--json"], capture_output=True,
                                        text=True, check=True).stdout)
    runs, ratios, pace_ratios = [], [], []
    with tempfile.TemporaryDirectory(prefix="moerl-up-vs-learn-") as scratch:
        for p in range(a.pairs):
            order = (run_learn, run_up) if p % 2 == 0 else (run_up, run_learn)
            pair = {}
            for fn in order:
                r = fn(a.binary, a.iterations, sets, scratch)
                r["pair"] = p
                runs.append(r)
                pair[r["kind"]] = r
                print(f"pair {p} {r['kind']:5s}: 0.9 at iteration {r['iteration_at_0.9']}, "
                      f"{r['launch_to_0.9_s'] if r['launch_to_0.9_s'] is None else round(r['launch_to_0.9_s'], 1)} s"
                      f" from launch; wall {r['wall_s']:.1f} s; CPU {r['cpu_user_s']:.1f}+"
                      f"{r['cpu_sys_s']:.1f} s; load {r['load_before']:.1f}", flush=True)
            if pair["up"]["steady_ms_per_iteration"] and pair["learn"]["ms_per_iteration"]:
                pace_ratios.append(pair["up"]["steady_ms_per_iteration"] /
                                   pair["learn"]["ms_per_iteration"])
            if pair["up"]["launch_to_0.9_s"] and pair["learn"]["launch_to_0.9_s"]:
                ratios.append(pair["up"]["launch_to_0.9_s"] / pair["learn"]["launch_to_0.9_s"])
    out = {"what": "default `moerl up --no-interrupt` against `moerl learn`, alternating pairs: "
                   "seconds from launch to the first 10-iteration mean reward >= 90% of max",
           "command": " ".join(sys.argv), "date_utc": datetime.datetime.utcnow().isoformat(),
           "provenance": version, "cpus": os.cpu_count(), "iterations": a.iterations,
           "overrides": a.set, "runs": runs,
           "ratio_up_to_learn": {"per_pair": ratios,
                                 "median": statistics.median(ratios) if ratios else None,
                                 "min": min(ratios) if ratios else None,
                                 "max": max(ratios) if ratios else None},
           "ms_per_iteration_ratio_up_to_learn": {
               "per_pair": pace_ratios,
               "median": statistics.median(pace_ratios) if pace_ratios else None}}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"up_vs_learn: ratios {[round(r, 2) for r in ratios]}; per iteration "
          f"{[round(r, 2) for r in pace_ratios]}; JSON in {a.out}")


if __name__ == "__main__":
    main()
