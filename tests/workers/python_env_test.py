#!/usr/bin/env python3
"""`moerl up --config configs/multi-turn.yaml` with the guess task's environment written in
Python (issue 26, python/WORKERS.md): `env.worker=python:guess_env:make` (tests/workers/
guess_env.py, checked step for step against the C++ environment by
workers_external_environment_test). One case per invocation:

  python_env_test.py MOERL CONFIG episodes  every episode ran in the Python environments
  python_env_test.py MOERL CONFIG raises    one step raises mid-run: that episode fails with the
                                            traceback in the env node's log, the node is never
                                            replaced, the unit runs again

Every case ends with lost = 0, duplicated = 0, the ledger balanced, the run done and no worker
process left. Every wait is a liveness bound (moerl_up_faults_test.up_run), not a timing
check."""
import glob
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "apps"))
from moerl_up_faults_test import check_balanced, check_safety, up_run  # noqa: E402
from worker_runs import check_no_leftover_workers  # noqa: E402


def episodes(tmp):
    return {int(os.path.basename(f).split(".")[0]): len(open(f).read().splitlines())
            for f in glob.glob(os.path.join(tmp, "out", "*.episodes"))}


def check_books(rep, tmp):
    check_no_leftover_workers("MOERL_TEST_ENV_DIR", os.path.join(tmp, "out"))
    check_safety(rep)
    a = rep["accounting"]
    check_balanced(a)
    assert rep["task"] == "guess", rep["task"]
    # Every trained sample is an episode one of the Python environments ran.
    assert sum(episodes(tmp).values()) >= a["trained"] > 0, (episodes(tmp), a)
    assert not [r for r in rep["replacements"] if r["node"].startswith("env")], \
        rep["replacements"]
    print(f"trained {a['trained']}, episodes in Python {episodes(tmp)}, dropped {a['dropped']}",
          flush=True)


def start(moerl, config, tmp, name, env, *args):
    os.makedirs(os.path.join(tmp, "out"), exist_ok=True)
    os.environ.update(env)
    os.environ["MOERL_TEST_ENV_DIR"] = os.path.join(tmp, "out")
    os.environ["MOERL_TEST_GUESS_TURNS"] = "4"  # configs/multi-turn.yaml's task.difficulty
    os.environ["PYTHONPATH"] = HERE + (":" + os.environ["PYTHONPATH"]
                                       if os.environ.get("PYTHONPATH") else "")
    return up_run(moerl, tmp, name, "--config", config, "--no-interrupt",
                  "--set", "env.worker=python:guess_env:make", *args)


def run_episodes(moerl, config, tmp):
    rep = start(moerl, config, tmp, "episodes", {}, "--iterations", "8").finish()
    check_books(rep, tmp)


def raises(moerl, config, tmp):
    # Early in every worker's share (each steps a few hundred times in this run): at step 300
    # one loop run of ten ended before any worker got there.
    run = start(moerl, config, tmp, "raises", {"MOERL_TEST_ENV_RAISE_AT": "40"},
                "--iterations", "8", "--set", "ledger.lease_timeout_ms=4000")
    log = run.wait_log("planted environment failure at step 40")
    rep = run.finish()
    check_books(rep, tmp)
    text = open(log, errors="replace").read()
    assert "the env worker's environment raised" in text and "Traceback" in text, text[-2000:]


CASES = {"episodes": run_episodes, "raises": raises}

if __name__ == "__main__":
    moerl, config, case = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
    with tempfile.TemporaryDirectory(prefix=f"moerl-pyenv-{case}-") as tmp:
        CASES[case](moerl, config, tmp)
    print(f"PASS {case}")
