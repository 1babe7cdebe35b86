#!/usr/bin/env python3
"""`moerl up` with the reward scored by a user's Python function (issue 26, python/WORKERS.md):
`reward.worker=python:sort_reward:score` (tests/workers/sort_reward.py, the sort task's
verifier written in Python). One case per invocation:

  python_reward_test.py MOERL scores    every trained sample was scored in Python; clean books
  python_reward_test.py MOERL raises    the function raises once mid-run: that sample fails with
                                        its traceback in the reward node's log, its unit runs
                                        again, the node is never replaced
  python_reward_test.py MOERL killed    SIGKILL of the Python worker mid-run: the reward node
                                        starts a new one and the run finishes
  python_reward_test.py MOERL hangs     the function never returns: past reward.worker_timeout_ms
                                        the node kills and restarts its worker
  python_reward_test.py MOERL node_killed  SIGKILL of the reward node: it is replaced, its worker
                                        dies with it, the replacement starts its own
  python_reward_test.py MOERL attached  reward.worker=attach:PATH: a worker the user started
                                        (MOERL_WORKER_SOCKET=PATH) scores every sample

Every case ends with lost = 0, duplicated = 0, the ledger balanced, the run done and no worker
process left. Every wait
is a liveness bound (moerl_up_faults_test.up_run), not a timing check."""
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "apps"))
from moerl_up_faults_test import check_balanced, check_safety, up_run  # noqa: E402
from worker_runs import check_no_leftover_workers, wait_for  # noqa: E402

WORKER = ["--set", "reward.worker=python:sort_reward:score"]
# A unit that lost a sample to a failed score waits for its lease to expire before it runs
# again; a short lease keeps that wait short (an expiry is as safe as any other end of a lease).
SHORT_LEASE = ["--set", "ledger.lease_timeout_ms=4000"]


def num_calls(tmp):
    return {pid: len(lines) for pid, lines in calls(tmp).items()}


def calls(tmp):
    """pid -> the lines its worker wrote, one per sample it scored."""
    out = {}
    for f in glob.glob(os.path.join(tmp, "calls", "*.calls")):
        out[int(os.path.basename(f).split(".")[0])] = open(f).read().splitlines()
    return out


def reward_log(run):
    return "".join(open(f, errors="replace").read()
                   for f in glob.glob(os.path.join(run.run_dir, "*", "logs", "reward-*.log")))


def check_books(rep, tmp):
    check_no_leftover_workers("MOERL_TEST_REWARD_DIR", os.path.join(tmp, "calls"))
    check_safety(rep)
    a = rep["accounting"]
    check_balanced(a)
    scored = sum(len(v) for v in calls(tmp).values())
    # Every trained sample went through the Python function (a re-run unit's samples twice).
    assert scored >= a["trained"] > 0, (scored, a)
    assert not [r for r in rep["replacements"] if r["node"].startswith("reward")], \
        rep["replacements"]
    print(f"trained {a['trained']}, scored in Python {scored}, workers {num_calls(tmp)}, "
          f"dropped {a['dropped']}", flush=True)


def start(moerl, tmp, name, env, *args):
    os.makedirs(os.path.join(tmp, "calls"), exist_ok=True)
    os.environ.update(env)
    os.environ["MOERL_TEST_REWARD_DIR"] = os.path.join(tmp, "calls")
    os.environ["PYTHONPATH"] = HERE + (":" + os.environ["PYTHONPATH"]
                                       if os.environ.get("PYTHONPATH") else "")
    return up_run(moerl, tmp, name, "--no-interrupt", *WORKER, *args)


def scores(moerl, tmp):
    run = start(moerl, tmp, "scores", {}, "--iterations", "12")
    rep = run.finish()
    check_books(rep, tmp)
    assert len(calls(tmp)) == 1, num_calls(tmp)  # one worker, never restarted


def raises(moerl, tmp):
    run = start(moerl, tmp, "raises", {"MOERL_TEST_REWARD_RAISE_AT": "200"}, "--iterations",
                "12", *SHORT_LEASE)
    run.wait_log("planted failure at call 200")
    rep = run.finish()
    check_books(rep, tmp)
    log = reward_log(run)
    assert "the reward worker's function raised" in log and "Traceback" in log, log[-2000:]
    assert 'in score\n    raise ValueError(f"planted failure' in log, log[-2000:]
    assert len(calls(tmp)) == 1, num_calls(tmp)  # an exception is not a dead worker
    assert rep["accounting"]["dropped"].get("lease_expired", 0) > 0, rep["accounting"]


def killed(moerl, tmp):
    run = start(moerl, tmp, "killed", {}, "--iterations", "14", *SHORT_LEASE)
    first = wait_for(lambda: [p for p, v in calls(tmp).items() if len(v) >= 100],
                     "the Python worker scoring", run)[0]
    print(f"SIGKILL -> Python reward worker (pid {first})", flush=True)
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: [p for p in calls(tmp) if p != first], "a second Python worker", run)
    rep = run.finish()
    check_books(rep, tmp)
    assert f"reward worker pid {first} stopped" in reward_log(run)


def node_killed(moerl, tmp):
    """SIGKILL of the reward node itself: `moerl up` replaces it, the replacement starts its
    own worker, and the dead node's worker does not outlive it (PR_SET_PDEATHSIG)."""
    # Long enough that work is left for the replacement's worker: a 14-iteration run once
    # ended at iteration 14, 4.8 s in, right after the replacement joined (5 Dec).
    run = start(moerl, tmp, "node-killed", {}, "--iterations", "60", *SHORT_LEASE)
    first = wait_for(lambda: [p for p, v in calls(tmp).items() if len(v) >= 100],
                     "the Python worker scoring", run)[0]
    run.kill("reward-0", signal.SIGKILL)
    wait_for(lambda: [p for p in calls(tmp) if p != first], "the replacement's Python worker", run)
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{first}") and time.monotonic() < deadline:
        time.sleep(0.1)
    rep = run.finish()
    a = rep["accounting"]
    check_no_leftover_workers("MOERL_TEST_REWARD_DIR", os.path.join(tmp, "calls"))
    check_safety(rep)
    check_balanced(a)
    assert sum(len(v) for v in calls(tmp).values()) >= a["trained"] > 0, (calls(tmp), a)
    assert [r for r in rep["replacements"] if r["node"] == "reward-0"], rep["replacements"]
    print(f"trained {a['trained']}, workers {num_calls(tmp)}, dropped {a['dropped']}", flush=True)


def attached(moerl, tmp):
    """reward.worker=attach:PATH: the user starts the worker (before the node, which it waits
    for); the reward node serves it over that socket and never signals it; the worker leaves by
    itself when the run ends."""
    path = os.path.join(tmp, "reward.sock")
    os.makedirs(os.path.join(tmp, "calls"), exist_ok=True)
    env = dict(os.environ, MOERL_WORKER_SOCKET=path,
               MOERL_TEST_REWARD_DIR=os.path.join(tmp, "calls"),
               PYTHONPATH=os.pathsep.join([HERE, os.path.join(os.path.dirname(moerl), "..",
                                                               "python")]))
    user = subprocess.Popen([sys.executable, "-m", "moerl.worker", "reward", "sort_reward:score"],
                            env=env)
    run = up_run(moerl, tmp, "attached", "--no-interrupt", "--set", f"reward.worker=attach:{path}",
                 "--iterations", "12")
    rep = run.finish()
    assert user.wait(timeout=30) == 0, "the attached worker did not leave by itself"
    check_books(rep, tmp)
    assert list(calls(tmp)) == [user.pid], num_calls(tmp)


def hangs(moerl, tmp):
    run = start(moerl, tmp, "hangs", {"MOERL_TEST_REWARD_HANG_AT": "150"}, "--iterations", "12",
                *SHORT_LEASE, "--set", "reward.worker_timeout_ms=1500")
    rep = run.finish()
    check_books(rep, tmp)
    assert len(calls(tmp)) == 2, num_calls(tmp)  # the hung one, killed, and its successor
    assert "no answer within reward.worker_timeout_ms=1500" in reward_log(run)


CASES = {"scores": scores, "raises": raises, "killed": killed, "hangs": hangs,
         "node_killed": node_killed, "attached": attached}

if __name__ == "__main__":
    moerl, case = os.path.abspath(sys.argv[1]), sys.argv[2]
    with tempfile.TemporaryDirectory(prefix=f"moerl-pyreward-{case}-") as tmp:
        CASES[case](moerl, tmp)
    print(f"PASS {case}")
