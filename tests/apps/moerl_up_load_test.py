#!/usr/bin/env python3
"""Liveness at load (issue 31): `moerl up` (the default job: a 2-member trainer group, a
2-member rollout group, the mid-run Spot interruption of a rollout) beside a CPU hog that holds
the 2-core machine at a load of 30-60 (tests/apps/cpu_hog.py, nice 0 like CI's compile jobs).
The run must finish with nothing lost or duplicated and no node declared dead while it was
alive: the only replacement and re-formation allowed are the ones the Spot notice plans (the
drained rollout replaced, its group re-formed).

    moerl_up_load_test.py MOERL [--load 30] [--iterations 15] [--runs 1] [--set KEY=VALUE]...

The CI form (ctest apps_moerl_up_load_test) is the defaults, about a minute; the long form is
scripts/load-test.sh (docs/TESTING.md). Prints the load during the run (the kernel's 1-minute
average and the runnable tasks, sampled every second), the longest heartbeat silence the
coordinator counted per node, and the link drops and coordinator stalls its log shows.
Exit 0 only if every run passed."""
import argparse
import glob
import os
import re
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_hog import hog, read_loadavg  # noqa: E402
from moerl_up_faults_test import check_safety, up_run  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class load_sampler:
    """/proc/loadavg once a second while the run lasts."""

    def __init__(self):
        self.samples, self.stop = [], threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop.wait(1.0):
            self.samples.append(read_loadavg())

    def finish(self):
        self.stop.set()
        self.t.join()
        load1 = [s[0] for s in self.samples]
        runnable = sorted(s[1] for s in self.samples)
        return {"load1_min": min(load1), "load1_max": max(load1),
                "load1_mean": sum(load1) / len(load1),
                "runnable_median": runnable[len(runnable) // 2], "runnable_max": runnable[-1],
                "seconds": len(self.samples)}


def log_lines(run, node, pattern):
    """Lines of a node's log (this run's logs/<node>.log) that match `pattern`."""
    out = []
    for f in glob.glob(os.path.join(run.run_dir, "*", "logs", node + ".log")):
        out += [line.rstrip() for line in open(f, errors="replace") if re.search(pattern, line)]
    return out


def false_deaths(rep):
    """Every sign of a node declared dead, replaced or re-formed that the Spot notice did not
    plan: the list is empty in a run that passed."""
    drained = {i["node"] for i in rep["interruptions"]}
    bad = [f"{n['name']} declared dead: {n.get('down_reason')}" for n in rep["nodes"]
           if n["state"] == "dead"]
    bad += [f"{r['node']} replaced ({r['cause']})" for r in rep["replacements"]
            if r["node"] not in drained or r["cause"] != "exit code 0"]
    for g in rep["groups"]:
        for r in g["reformed"]:
            planned = g["role"] == "rollout" and any(
                r["cause"].startswith(d + " drained") for d in drained)
            if not planned:
                bad.append(f"group {g['name']} re-formed: {r['cause']}")
    return bad


def heartbeat_figures(rep):
    """node -> the longest heartbeat silence the coordinator counted against it, and the
    longest a heartbeat took from its send to the coordinator's handling (ms)."""
    return {n["name"]: (n["heartbeat"]["max_silence_ms"], n["heartbeat"]["max_delay_ms"])
            for n in rep["nodes"]}


def one_run(moerl, tmp, k, load, iterations, overrides):
    run = up_run(moerl, tmp, f"load-{k}", "--iterations", str(iterations),
                 *[x for kv in overrides for x in ("--set", kv)],
                 "--console", f"tcp://127.0.0.1:{free_port()}",
                 "--set", f"console.http_address=127.0.0.1:{free_port()}", policy=())
    # The hog starts once the cluster is up: what is under test is a running cluster's
    # liveness. (Started first, at 90 runnable tasks the coordinator process twice did not
    # log its first line within moerl up's 20 s start bound: exec and loading, not liveness.)
    run.wait_line(r"console at ")
    with hog(load, limit_s=180):  # bounded: the machine is shared
        sampler = load_sampler()
        started = time.monotonic()
        try:
            rep = run.finish(check=False)
        finally:
            figures = sampler.finish()
    figures["run_s"] = round(time.monotonic() - started, 1)
    unreachable = log_lines(run, "coordinator", r"unreachable: ")
    stalls = log_lines(run, "coordinator", r"did not run for")
    print(f"run {k}: {figures}", flush=True)
    if rep:
        hb = heartbeat_figures(rep)
        timeout = rep["nodes"][0]["heartbeat"]["timeout_ms"]
        print(f"run {k}: heartbeat (max silence ms, max delay ms) per node, timeout {timeout} ms: "
              f"{hb}", flush=True)
        print(f"run {k}: longest silence {max(v[0] for v in hb.values())} ms, longest delay "
              f"{max(v[1] for v in hb.values())} ms", flush=True)
    print(f"run {k}: {len(unreachable)} link drop(s), {len(stalls)} coordinator stall(s)",
          flush=True)
    for line in unreachable + stalls:
        print("   ", line, flush=True)
    problems = []
    if rep is None:
        problems.append(f"no report (moerl up exited {run.p.returncode})")
    else:
        try:
            check_safety(rep)
        except AssertionError as e:
            problems.append(f"safety: {e}")
        problems += false_deaths(rep)
    # The load is the test's premise: a run the hog could not load proves nothing.
    if figures["runnable_median"] < 0.8 * load:
        problems.append(f"the hog did not hold the load: {figures}")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("moerl")
    ap.add_argument("--load", type=float, default=30)
    ap.add_argument("--iterations", type=int, default=15)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to moerl up (e.g. node.control_nice=0 for the run before the fix)")
    a = ap.parse_args()
    moerl = os.path.abspath(a.moerl)
    failed = 0
    for k in range(1, a.runs + 1):
        keep = os.environ.get("MOERL_KEEP_TMP")  # keep the run's logs for a post-mortem
        tmp = tempfile.mkdtemp(prefix="moerl-up-load-") if keep else None
        with tempfile.TemporaryDirectory() as auto:
            problems = one_run(moerl, tmp or auto, k, a.load, a.iterations, a.set)
        if tmp:
            print("logs kept under", tmp, flush=True)
        for p in problems:
            print(f"FAIL run {k}: {p}", flush=True)
        failed += bool(problems)
    print(f"{a.runs - failed}/{a.runs} runs passed at load {a.load}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
