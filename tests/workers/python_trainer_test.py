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
  python_trainer_test.py MOERL CONFIG group_learns  CONFIG a Python trainer group of 2
                                                    (configs/torch-moe-group.yaml): the same
                                                    target, experts sharded through moerl.ep
                                                    over shared memory, every version published
                                                    by rank 0, checkpoints of 2 shards
  python_trainer_test.py MOERL CONFIG group_killed  SIGKILL of trainer-1's Python worker (rank 1)
                                                    mid-run: the group re-forms (no node
                                                    replaced), both ranks resume from the newest
                                                    committed checkpoint, the run finishes
  python_trainer_test.py MOERL CONFIG group_killed_rank0  the same with trainer-0's worker
                                                    (rank 0, the one that asks for batches)
  python_trainer_test.py MOERL CONFIG rgroup_produces  CONFIG a Python rollout group of 2
                                                    (configs/torch-moe-rgroup.yaml): rollout-0
                                                    and rollout-1 one group, every sample
                                                    submitted by rank 0's worker, rank 1 served
                                                    its weights, none refused; versions move
  python_trainer_test.py MOERL CONFIG rgroup_killed  SIGKILL of rollout-1's Python worker (rank
                                                    1) mid-run: the rollout group re-forms (no
                                                    node replaced), both ranks start anew, the
                                                    lease rank 0 held is fenced, the run finishes

Every run ends with lost = 0, duplicated = 0, the ledger balanced and no worker process left.
Every wait is a liveness bound (moerl_up_faults_test.up_run), not a timing check."""
import glob
import json
import os
import re
import signal
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


def python_workers(tmp, role):
    out = []
    for pid in leftover_workers(MARK, tmp):
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"MOERL_WORKER_ROLE={role}".encode() in env:
            out.append(pid)
    return out


def python_trainers(tmp):
    return python_workers(tmp, "trainer")


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


def trainers_of(tmp, node_pid, role="trainer"):
    """The Python `role` worker processes node `node_pid` started (its children)."""
    out = []
    for pid in python_workers(tmp, role):
        try:
            ppid = int(re.search(r"PPid:\s+(\d+)", open(f"/proc/{pid}/status").read()).group(1))
        except (OSError, AttributeError):
            continue
        if ppid == node_pid:
            out.append(pid)
    return out


def node_logs(run, name):
    return "".join(open(f, errors="replace").read() for f in
                   glob.glob(os.path.join(run.run_dir, "*", "logs", f"{name}.log")))


def check_group(rep, run, tmp):
    """A Python trainer group's books: trainer-0 and trainer-1 one group, rank 0 published every
    version, checkpoints of two shards committed, the experts' plane on shared memory."""
    js = check_books(rep, tmp)
    g = {x["name"]: x for x in rep["groups"]}["trainer"]
    assert g["members"] == ["trainer-0", "trainer-1"], g
    points = [p for p in js["reward_curve"] if "ep_transport" in p]
    assert points, "no version's metrics carry the expert plane's transport report"
    for ch in points[0]["ep_transport"]:  # rank 0's view: itself, and rank 1 on this host
        assert ch["provider"] == "shm" and ch["peer_paths"] == ["same_process", "same_host"], ch
    assert "trainer rank 1 of 2" in node_logs(run, "trainer-1"), "trainer-1 never served rank 1"
    ck = js["checkpoints"]  # rank 0's node commits each version once both shards are written
    assert ck["num_shards"] == 2 and ck["durable_version"] > 0 and not ck["failed"], ck
    return js, g


def group_learns(moerl, config, tmp):
    run = start(moerl, config, tmp, "group_learns")
    rep = run.finish()
    js, _ = check_group(rep, run, tmp)
    best = mean10(js)
    print(f"group of 2: iterations {js['policy_version']}, best 10-iteration mean reward "
          f"{best:.3f} (reward_max {js['reward_max']}), interruptions {len(rep['interruptions'])}",
          flush=True)
    assert best >= 0.9 * js["reward_max"], best
    curve, its = js["reward_curve"], js["iterations"]
    for i in range(10, len(curve) + 1):
        if sum(p["mean_reward"] for p in curve[i - 10:i]) / 10 >= 0.9 * js["reward_max"]:
            t = (its[i - 1]["end_unix_ms"] - its[0]["end_unix_ms"]) / 1000
            print(f"90% at version {curve[i - 1]['iteration']}, {t:.1f} s after version 1; run "
                  f"wall {rep['wall_s']:.1f} s, load average {os.getloadavg()[0]:.1f}", flush=True)
            break


def group_killed(moerl, config, tmp, node="trainer-1"):
    rank = int(node.rsplit("-", 1)[1])
    run = start(moerl, config, tmp, f"group_killed_rank{rank}", "--no-interrupt", "--iterations",
                "24")
    run.wait_iteration(4)
    member = run.pid_of(node)
    victim = wait_for(lambda: trainers_of(tmp, member), f"{node}'s Python worker", run)[0]
    print(f"SIGKILL -> {node}'s Python worker, rank {rank} (pid {victim})", flush=True)
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: [p for p in trainers_of(tmp, member) if p != victim],
             f"a new Python worker on {node}", run)
    rep = run.finish()
    js, g = check_group(rep, run, tmp)
    mine = [r for r in g["reformed"] if node in r["cause"]]
    assert mine, g["reformed"]
    print("trainer group re-formed:", json.dumps(mine), flush=True)
    assert mine[0]["restored_version"] is not None, mine
    # The member nodes stay; only their workers were restarted.
    assert not [r for r in rep["replacements"] if r["node"].startswith("trainer")], \
        rep["replacements"]
    assert f"trainer worker pid {victim} stopped" in node_logs(run, node)
    print(f"versions {js['policy_version']}, resumed from {js['resumed_from_version']}, "
          f"trained {rep['accounting']['trained']}, lost {rep['accounting'].get('lost')}, "
          f"duplicated {rep['accounting'].get('duplicated')}", flush=True)


def rollout_worker_stats(rep, node):
    """The external rollout session's counters on `node` (its rollout actor 0)."""
    for n in rep["nodes"]:
        if n.get("name") == node:
            return (n.get("stats", {}).get("external_worker") or {}).get("0")
    raise AssertionError(f"no node {node} in {[n.get('name') for n in rep['nodes']]}")


def check_rgroup(rep, run, tmp):
    """A Python rollout group's books: rollout-0 and rollout-1 one group, rank 0's session
    took every sample and refused none, rank 1 was served."""
    js = check_books(rep, tmp)
    g = {x["name"]: x for x in rep["groups"]}["rollout-g0"]
    assert sorted(g["members"]) == ["rollout-0", "rollout-1"], g
    s0 = rollout_worker_stats(rep, "rollout-0")
    assert s0 and s0["samples_accepted"] > 0 and not s0["refused"], s0
    assert "rollout rank 1 of 2" in node_logs(run, "rollout-1"), "rollout-1 never served rank 1"
    return js, g, s0


def rgroup_produces(moerl, config, tmp):
    run = start(moerl, config, tmp, "rgroup_produces", "--no-interrupt", "--iterations", "16")
    rep = run.finish()
    js, g, s0 = check_rgroup(rep, run, tmp)
    assert js["policy_version"] >= 16, js["policy_version"]
    print(f"rollout group of 2: versions {js['policy_version']}, rank 0 accepted "
          f"{s0['samples_accepted']} samples in {s0['leases_offered']} leases, trained "
          f"{rep['accounting']['trained']}, wall {rep['wall_s']:.1f} s, load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)


def rgroup_killed(moerl, config, tmp):
    run = start(moerl, config, tmp, "rgroup_killed", "--no-interrupt", "--iterations", "16")
    run.wait_iteration(4)
    member = run.pid_of("rollout-1")
    victim = wait_for(lambda: trainers_of(tmp, member, "rollout"), "rollout-1's Python worker",
                      run)[0]
    print(f"SIGKILL -> rollout-1's Python worker, rank 1 (pid {victim})", flush=True)
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: [p for p in trainers_of(tmp, member, "rollout") if p != victim],
             "a new Python worker on rollout-1", run)
    rep = run.finish()
    js, g, s0 = check_rgroup(rep, run, tmp)
    mine = [r for r in g["reformed"] if "rollout-1" in r["cause"] or "rank 0's worker is gone"
            in r["cause"] or "rollout group member 1" in r["cause"]]
    # The kill's cause: rollout-1's worker gone, or rank 0's (its collective with the dead rank
    # failed first), whichever node told the coordinator first.
    assert mine, g["reformed"]
    print("rollout group re-formed:", json.dumps(g["reformed"]), flush=True)
    assert not [r for r in rep["replacements"] if r["node"].startswith("rollout")], \
        rep["replacements"]
    # Rank 0's worker was started anew too (a group's workers live and die together; each
    # incarnation's session counts from 1, so its node's log says it).
    starts0 = node_logs(run, "rollout-0").count("' started: pid ")
    assert starts0 >= 2, starts0
    print(f"versions {js['policy_version']}, trained {rep['accounting']['trained']}, lost "
          f"{rep['accounting'].get('lost')}, duplicated {rep['accounting'].get('duplicated')}, "
          f"rank 0 worker starts {starts0}, wall {rep['wall_s']:.1f} s", flush=True)


CASES = {"learns": learns, "killed": killed, "group_learns": group_learns,
         "group_killed": group_killed,
         "group_killed_rank0": lambda m, c, t: group_killed(m, c, t, node="trainer-0"),
         "rgroup_produces": rgroup_produces, "rgroup_killed": rgroup_killed}

if __name__ == "__main__":
    moerl, config, case = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
    with tempfile.TemporaryDirectory(prefix=f"moerl-pytrainer-{case}-") as tmp:
        CASES[case](moerl, config, tmp)
    print(f"PASS {case}")
