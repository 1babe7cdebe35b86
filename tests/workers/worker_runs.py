"""What the `moerl up` cases with external workers share (python_{reward,rollout,env}_test.py):
the check that no worker outlives its node, and a bounded wait that ends the run on failure."""
import os
import sys
import time

from moerl_up_faults_test import BOUND_S


def leftover_workers(env_var, directory):
    """Worker processes of this run still alive: their environment sets `env_var` to the run's
    own `directory`, which no other run's workers share."""
    mine = f"{env_var}={directory}".encode()
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            if mine in open(f"/proc/{pid}/environ", "rb").read().split(b"\0"):
                out.append(int(pid))
        except OSError:
            continue
    return out


def check_no_leftover_workers(env_var, directory):
    """A worker never outlives its node: all are gone soon after `moerl up` ends."""
    deadline = time.monotonic() + 10
    while leftover_workers(env_var, directory) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leftover_workers(env_var, directory), leftover_workers(env_var, directory)


def wait_for(pred, what, run):
    """pred()'s first truthy value within the liveness bound while the run goes on; else the run
    ends and the test fails (at once when the run ended first: nothing more can come)."""
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        ended = run.p.poll() is not None  # before pred: what the run left counts
        v = pred()
        if v:
            return v
        if ended:
            break  # nothing more can come
        time.sleep(0.1)
    run.finish(check=False)
    sys.exit(f"FAIL: never saw {what}")
