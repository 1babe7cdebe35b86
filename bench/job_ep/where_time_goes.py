#!/usr/bin/env python3
"""Where a default `moerl up` iteration's time goes, per node process (issue 27).

Runs `moerl up --no-interrupt`, waits for its steady phase, then for --record-s seconds
reads every node process's CPU time and context switches (/proc) and records the scheduler
(`perf sched record -a`). Writes one JSON with provenance: per node, CPU ms and context
switches per iteration, and the ms per iteration it ran while the other CPUs were idle (a
serial section: nothing else could run); per CPU, the idle fraction, and the fraction when
every CPU was idle (the whole job waiting on a timer or the disk). The iterations counted are
those the report says ended inside the window.

On a machine with fewer cores than runnable threads, only less CPU per iteration shortens
the iteration; where CPUs sit idle, what runs alone is the critical path. Needs perf (Debian's
linux-perf, scripts/install-deps.sh) and permission to trace the scheduler (root, or
kernel.perf_event_paranoid <= -1). Quote figures from a quiet machine only (the load average
is in the file).

  bench/job_ep/where_time_goes.py [--iterations 700] [--warmup-s 5] [--record-s 2]
                                  [--binary build/bin/moerl] [--out FILE] [--set KEY=VALUE ...]
"""
import argparse
import bisect
import collections
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLK_TCK = os.sysconf("SC_CLK_TCK")


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def descends_from(pid, ancestor):
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = parent_of(pid)
        except OSError:
            return False
    return False


def node_processes(up_pid):
    """{pid: node name} of the `moerl node` processes that `up_pid` started (their node.name
    override, or the role for the coordinator): not another job's on the same machine."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if not descends_from(int(pid), up_pid):
            continue
        args = [a.decode(errors="replace") for a in args]
        if len(args) < 4 or args[1] != "node" or "--role" not in args:
            continue
        name = args[args.index("--role") + 1]
        for a in args:
            if a.startswith("node.name="):
                name = a.split("=", 1)[1]
        out[int(pid)] = name
    return out


def proc_counters(pid):
    """(CPU seconds, voluntary + involuntary context switches) of every thread of `pid`."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
    switches = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            for line in open(f"/proc/{pid}/task/{task}/status"):
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    switches += int(line.split()[1])
        except OSError:
            pass  # a thread that ended meanwhile
    return cpu, switches


LINE = re.compile(r"\s*([\d.]+)\s+\[(\d+)\]\s+(.+?)\s{2,}(.*)$")
TASK = re.compile(r"\[(\d+)(?:/(\d+))?\]")


def parse_timehist(text):
    """Per CPU: idle intervals and run intervals [(start, end, pid)] from `perf sched timehist`."""
    idle, runs = collections.defaultdict(list), collections.defaultdict(list)
    for line in text.splitlines():
        m = LINE.match(line)
        if not m or m.group(4).startswith("awakened"):
            continue
        t, cpu, task, rest = float(m.group(1)), int(m.group(2)), m.group(3).strip(), m.group(4)
        cols = rest.split()
        try:
            run_s = float(cols[2]) / 1000  # wait time, sch delay, run time (ms)
        except (IndexError, ValueError):
            continue
        if task.startswith("<idle>"):
            idle[cpu].append((t - run_s, t))
        else:
            tm = TASK.search(task)
            pid = int(tm.group(2) or tm.group(1)) if tm else -1
            runs[cpu].append((t - run_s, t, pid))
    return idle, runs


def intersect_all(lists):
    out = lists[0]
    for other in lists[1:]:
        nxt, i, j = [], 0, 0
        while i < len(out) and j < len(other):
            s, e = max(out[i][0], other[j][0]), min(out[i][1], other[j][1])
            if s < e:
                nxt.append((s, e))
            if out[i][1] < other[j][1]:
                i += 1
            else:
                j += 1
        out = nxt
    return out


def alone_by_pid(idle, runs, cpus):
    """Seconds each pid ran on one CPU while every other CPU was idle."""
    alone = collections.Counter()
    for c in cpus:
        others_idle = intersect_all([idle[o] for o in cpus if o != c]) if len(cpus) > 1 else []
        starts = [r[0] for r in runs[c]]
        for s, e in others_idle:
            k = max(0, bisect.bisect_right(starts, s) - 1)
            while k < len(runs[c]) and runs[c][k][0] < e:
                rs, re_, pid = runs[c][k]
                alone[pid] += max(0.0, min(e, re_) - max(s, rs))
                k += 1
    return alone


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=700)
    ap.add_argument("--warmup-s", type=float, default=5.0)
    ap.add_argument("--record-s", type=float, default=2.0)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bin", "moerl"))
    ap.add_argument("--out", default=os.path.join(
        ROOT, "bench", "job_ep", "results",
        f"where_time_goes_{datetime.datetime.now().strftime('%Y-%m-%dT%H%M%S')}.json"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    if not shutil.which("perf"):
        sys.exit("where_time_goes: perf is not installed (scripts/install-deps.sh installs "
                 "linux-perf)")
    version = json.loads(subprocess.run([a.binary, "version", "--json"], capture_output=True,
                                        text=True, check=True).stdout)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="moerl-where-time-goes-") as scratch:
        report = os.path.join(scratch, "up.json")
        cmd = [a.binary, "up", "--no-interrupt", "--iterations", str(a.iterations), "--report",
               report, "--run-dir", os.path.join(scratch, "run")]
        for kv in a.set:
            cmd += ["--set", kv]
        up = subprocess.Popen(cmd, stdout=open(os.path.join(scratch, "up.log"), "w"),
                              stderr=subprocess.STDOUT, cwd=ROOT)
        time.sleep(a.warmup_s)
        nodes = node_processes(up.pid)
        if up.poll() is not None or not nodes:
            sys.exit(f"where_time_goes: `moerl up` ended or started no nodes within "
                     f"{a.warmup_s} s (raise --iterations or lower --warmup-s)")
        before = {pid: proc_counters(pid) for pid in nodes}
        t0 = time.time()
        sched = os.path.join(scratch, "sched.data")
        rec = subprocess.run(["perf", "sched", "record", "-a", "-o", sched, "--", "sleep",
                              str(a.record_s)], capture_output=True, text=True)
        t1 = time.time()
        after = {}
        for pid in nodes:
            try:
                after[pid] = proc_counters(pid)
            except OSError:
                pass  # it ended inside the window: left out
        if up.wait() != 0:
            sys.exit(f"where_time_goes: `moerl up` exited {up.returncode}")
        if rec.returncode != 0:
            sys.exit("where_time_goes: perf sched record failed (permission? "
                     "kernel.perf_event_paranoid): " + rec.stderr.strip()[-400:])
        hist = subprocess.run(["perf", "sched", "timehist", "-i", sched, "-w", "--state"],
                              capture_output=True, text=True).stdout
        rep = json.load(open(report))
    ends = [it["end_unix_ms"] / 1000 for it in rep["iterations"]]
    its = sum(1 for e in ends if t0 <= e <= t1)
    if its == 0:
        sys.exit("where_time_goes: no iteration ended inside the window (raise --iterations)")
    idle, runs = parse_timehist(hist)
    cpus = sorted(set(idle) | set(runs))
    span = max(r[1] for c in cpus for r in runs[c]) - min(r[0] for c in cpus for r in runs[c])
    alone = alone_by_pid(idle, runs, cpus)
    per_node = []
    for pid, name in sorted(nodes.items(), key=lambda kv: kv[1]):
        if pid not in after:
            continue
        cpu = after[pid][0] - before[pid][0]
        per_node.append({
            "node": name, "pid": pid,
            "cpu_ms_per_iteration": round(1000 * cpu / its, 2),
            "context_switches_per_iteration": round((after[pid][1] - before[pid][1]) / its, 1),
            # perf's window is the record's; scaled to the iterations of the /proc window.
            "ran_alone_ms_per_iteration": round(1000 * alone[pid] * (t1 - t0) / span / its, 2)})
    out = {
        "what": "a default `moerl up --no-interrupt`'s steady phase: per node CPU, context "
                "switches and time run alone (every other CPU idle), per iteration",
        "command": " ".join(sys.argv), "date_utc": datetime.datetime.utcnow().isoformat(),
        "provenance": version, "cpus": len(cpus), "overrides": a.set,
        "load_before": load_before, "window_s": round(t1 - t0, 3), "iterations_in_window": its,
        "ms_per_iteration": round(1000 * (t1 - t0) / its, 2),
        "cpu_ms_per_iteration_all_nodes": round(sum(n["cpu_ms_per_iteration"] for n in per_node), 2),
        "idle_fraction_per_cpu": {str(c): round(sum(e - s for s, e in idle[c]) / span, 3)
                                  for c in cpus},
        "all_cpus_idle_fraction": round(sum(e - s for s, e in intersect_all(
            [idle[c] for c in cpus])) / span, 3),
        "nodes": per_node}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"{its} iterations in {t1 - t0:.2f} s ({out['ms_per_iteration']} ms each), "
          f"{out['cpu_ms_per_iteration_all_nodes']} ms of CPU each; idle per CPU "
          f"{out['idle_fraction_per_cpu']}, all idle {out['all_cpus_idle_fraction']}")
    for n in per_node:
        print(f"  {n['node']:12s} CPU {n['cpu_ms_per_iteration']:6.2f} ms  switches "
              f"{n['context_switches_per_iteration']:6.1f}  alone {n['ran_alone_ms_per_iteration']:5.2f} ms")
    print(f"JSON in {a.out}")


if __name__ == "__main__":
    main()
