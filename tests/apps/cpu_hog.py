#!/usr/bin/env python3
"""A CPU hog that holds the machine's load average near a target (issue 31, liveness at load):
busy processes at normal priority (nice 0: CI's compile jobs, which starve nodes, run at nice
0 too), as many as the target needs beside whatever else runs.

    cpu_hog.py --load 30 --limit-s 120 [--parent PID]

The count of busy workers is set every 0.5 s from /proc/loadavg: the runnable tasks right now
(4th field) minus our own workers is the rest of the machine; the workers make up the
difference to an instantaneous target that starts at up to 1.5x the goal (at most 60) while the 1-minute
average is still below it (so that the figure the kernel reports reaches the goal in tens of
seconds, not minutes) and settles at the goal once it is there.

It never outlives its bound or its user: it exits (killing every worker) after --limit-s, on
SIGTERM/SIGINT, and when --parent is gone; each worker dies with the hog (PR_SET_PDEATHSIG)
and stops at the deadline on its own. The hog leads its own process group, so
`os.killpg(hog.pid, SIGKILL)` also ends every worker.

It must stay in its caller's session: with the kernel's autogroup scheduling
(/proc/sys/kernel/sched_autogroup_enabled, on in most distributions) every session is one
scheduling group that gets a fair share as a whole, so a hog started with setsid competes as
ONE task however many workers it has (seen: 80 runnable workers, `moerl up` as fast as idle).
CI's compile jobs and the tests share a session; so do the hog and the run beside it.

As a module: `with hog(load, limit_s): ...` runs it as that subprocess and kills its group on
the way out, whatever happened inside. CPU_HOG_TRACE=1 prints each adjustment to stderr."""
import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1


def die_with_parent():
    """This process gets SIGKILL when the one that forked it exits (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the deadline and the process group still bound the worker


def read_loadavg():
    """(1-minute load average, runnable tasks now)."""
    with open("/proc/loadavg") as f:
        fields = f.read().split()
    return float(fields[0]), int(fields[3].split("/")[0])


def spin(deadline):
    die_with_parent()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    while time.monotonic() < deadline:
        for _ in range(200000):
            pass
    os._exit(0)


def run(goal, limit_s, parent):
    deadline = time.monotonic() + limit_s
    workers = []
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    window = []  # runnable-now samples of the last ~2 s: one sample is noisy
    try:
        while not stop and time.monotonic() < deadline:
            if parent and not os.path.exists(f"/proc/{parent}"):
                break
            load1, runnable = read_loadavg()
            window = (window + [runnable - len(workers)])[-4:]
            others = max(0, sorted(window)[len(window) // 2])  # median: the rest of the machine
            # Up to 1.5x the goal (never past 60, the top of the range it is for) while the
            # kernel's 1-minute average lags below it.
            aim = min(max(goal, min(1.5 * goal, 60)), max(goal, goal + 3 * (goal - load1)))
            want = max(0, int(round(aim - others)))
            if os.environ.get("CPU_HOG_TRACE"):
                print(f"load1 {load1} runnable {runnable} workers {len(workers)} others {others} "
                      f"aim {aim:.0f} want {want}", file=sys.stderr, flush=True)
            while len(workers) < want:
                pid = os.fork()
                if pid == 0:
                    spin(deadline)
                workers.append(pid)
            while len(workers) > want:
                pid = workers.pop()
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            time.sleep(0.5)
    finally:
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in workers:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


class hog:
    """The hog as a subprocess for the duration of a `with` block."""

    def __init__(self, load, limit_s):
        self.cmd = [sys.executable, os.path.abspath(__file__), "--load", str(load),
                    "--limit-s", str(limit_s), "--parent", str(os.getpid())]

    def __enter__(self):
        # Its own process group (killpg below reaches every worker) in our session (see the
        # module's note on autogroups); it dies with us.
        self.p = subprocess.Popen(self.cmd, process_group=0, preexec_fn=die_with_parent)
        return self

    def stop(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()

    def __exit__(self, *exc):
        self.stop()
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--load", type=float, required=True, help="target load average")
    ap.add_argument("--limit-s", type=float, required=True, help="hard time limit, seconds")
    ap.add_argument("--parent", type=int, default=0, help="exit when this pid is gone")
    a = ap.parse_args()
    if a.load <= 0 or a.limit_s <= 0:
        sys.exit("cpu_hog.py: --load and --limit-s must be positive")
    run(a.load, a.limit_s, a.parent)


if __name__ == "__main__":
    main()
