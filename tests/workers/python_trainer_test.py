#!/usr/bin/env python3
"""`moerl up --config configs/torch-moe.yaml`: every role's work in the user's Python (issue 26,
python/WORKERS.md, "Bring your own model"): the PyTorch MoE policy of
python/moerl/examples/torch_moe generating on two rollout workers with the versions its
Python trainer publishes, scored by the Python verifier. One case per invocation:

  python_trainer_test.py MOERL CONFIG learns        the run (150 iterations at most, with the
                                                    mid-run Spot notice) reaches 90% of
                                                    reward_max (mean of 10 iterations), every
                                                    version published by the Python trainer
  python_trainer_test.py MOERL CONFIG killed        SIGKILL of the Python trainer mid-run: its
                                                    node starts another, which resumes from its
                                                    checkpoint; the run finishes
  python_trainer_test.py MOERL CONFIG group_refused trainer.group_size 2 with trainer.worker: a
                                                    configuration error naming both keys

Every run ends with lost = 0, duplicated = 0, the ledger balanced and no worker process left.
Every wait is a liveness bound (moerl_up_faults_test.up_run), not a timing check."""
import glob
import os
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "apps"))
from moerl_up_faults_test import check_balanced, check_safety, up_run  # noqa: E402
from worker_runs import check_no_leftover_workers, leftover_workers, wait_for  # noqa: E402

MARK = "MOERL_TEST_TRAINER_DIR"


def start(moerl, config, tmp, name, *args):
    os.environ[MARK] = tmp
    return up_run(moerl, tmp, name, "--config", config, *args, policy=())


def trainer_stats(rep):
    """The trainer node's job figures in the report (the external step's)."""
    for n in rep["nodes"]:
        js = n.get("stats", {}).get("job")
        if isinstance(js, dict) and js.get("trainer") == "external":
            return js
    raise AssertionError(f"no external trainer's stats in {[n.get('name') for n in rep['nodes']]}")


def check_books(rep, tmp):
    check_no_leftover_workers(MARK, tmp)
    check_safety(rep)
    check_balanced(rep["accounting"])
    js = trainer_stats(rep)
    ext = js["external_worker"]
    # Every version the run announced was published by the Python trainer.
    assert rep["policy_version"] == js["policy_version"] > 0, (rep["policy_version"], js)
    assert ext["publishes"] >= 1 and not ext["refused_requests"], ext
    return js


def mean10(js):
    curve = [p["mean_reward"] for p in js["reward_curve"]]
    return max(sum(curve[i - 10:i]) / 10 for i in range(10, len(curve) + 1)) if len(curve) >= 10 \
        else 0.0


def learns(moerl, config, tmp):
    run = start(moerl, config, tmp, "learns")
    rep = run.finish()
    js = check_books(rep, tmp)
    best = mean10(js)
    print(f"iterations {js['policy_version']}, best 10-iteration mean reward {best:.3f} "
          f"(reward_max {js['reward_max']}, random {js['reward_random']:.3f}), "
          f"interruptions {len(rep['interruptions'])}", flush=True)
    assert best >= 0.9 * js["reward_max"], best
    assert rep["interruptions"], "the mid-run Spot notice did not happen"
    # No rollout worker died: the replacement node's worker, still importing torch when its
    # first lease came, once asked for a version no holder served any more and died of it.
    for n in rep["nodes"]:
        for k, w in (n.get("stats", {}).get("external_worker") or {}).items():
            if isinstance(w, dict) and "leases_offered" in w:
                assert w["worker_deaths"] == 0, (n["name"], k, w)
    # The peer figure (python/WORKERS.md): the version whose 10-version mean first reached 90%,
    # its time since the first version was published, and samples/s over the run.
    curve, its = js["reward_curve"], js["iterations"]
    for i in range(10, len(curve) + 1):
        if sum(p["mean_reward"] for p in curve[i - 10:i]) / 10 >= 0.9 * js["reward_max"]:
            t = (its[i - 1]["end_unix_ms"] - its[0]["end_unix_ms"]) / 1000
            print(f"90% at version {curve[i - 1]['iteration']}, {t:.1f} s after version 1; run "
                  f"wall {rep['wall_s']:.1f} s, {sum(p['samples'] for p in curve)} samples, "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
            break


def python_trainers(tmp):
    out = []
    for pid in leftover_workers(MARK, tmp):
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"MOERL_WORKER_ROLE=trainer" in env:
            out.append(pid)
    return out


def killed(moerl, config, tmp):
    run = start(moerl, config, tmp, "killed", "--no-interrupt", "--iterations", "14")
    run.wait_iteration(4)
    victim = wait_for(lambda: python_trainers(tmp), "the Python trainer process", run)[0]
    print(f"SIGKILL -> Python trainer (pid {victim})", flush=True)
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: [p for p in python_trainers(tmp) if p != victim],
             "a new Python trainer process", run)
    rep = run.finish()
    js = check_books(rep, tmp)
    ext = js["external_worker"]
    assert ext["worker_deaths"] >= 1 and ext["worker_starts"] >= 2, ext
    assert not [r for r in rep["replacements"] if r["node"].startswith("trainer")], \
        rep["replacements"]
    logs = "".join(open(f, errors="replace").read() for f in
                   glob.glob(os.path.join(run.run_dir, "*", "logs", "trainer-*.log")))
    assert f"trainer worker pid {victim} stopped" in logs, logs[-3000:]
    print(f"versions {js['policy_version']}, trainer starts {ext['worker_starts']}, "
          f"trained {rep['accounting']['trained']}", flush=True)


def group_refused(moerl, config, tmp):
    r = subprocess.run([moerl, "up", "--config", config, "--set", "trainer.group_size=2",
                        "--run-dir", tmp], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "trainer.worker" in r.stderr and "trainer.group_size must be 1" in r.stderr, r.stderr


CASES = {"learns": learns, "killed": killed, "group_refused": group_refused}

if __name__ == "__main__":
    moerl, config, case = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
    with tempfile.TemporaryDirectory(prefix=f"moerl-pytrainer-{case}-") as tmp:
        CASES[case](moerl, config, tmp)
    print(f"PASS {case}")
