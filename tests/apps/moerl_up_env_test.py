#!/usr/bin/env python3
"""`moerl up --config configs/multi-turn.yaml` (issue 14): the multi-turn task's episodes run
on env nodes. One case per invocation:

  moerl_up_env_test.py MOERL CONFIG env_kill    SIGKILL env-0 (the one env node) mid-episode:
                                                 its episodes fail, their units are re-leased,
                                                 the node replaced
  moerl_up_env_test.py MOERL CONFIG env_crash   environment actors crash (fault injection) and
                                                 restart one-for-one; their episodes fail cleanly
  moerl_up_env_test.py MOERL CONFIG bad_input   malformed requests straight to an env node:
                                                 each refused by name, the node keeps serving

Every case ends with lost = 0 and duplicated = 0 and `t_env` on every iteration. Every wait
is a liveness bound (moerl_up_faults_test.up_run), not a timing check."""
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from moerl_up_faults_test import check_safety, replaced, up_run  # noqa: E402


def check_env_report(rep):
    assert rep["task"] == "guess", rep["task"]
    for it in rep["iterations"]:
        assert "t_env" in it and it["t_env"] > 0 and it["env_ms_per_step"] > 0, it
    env = rep["env"]
    assert env["steps"] > 0 and env["episodes"] > 0, env
    assert 1 <= env["turns_per_episode_mean"] <= 4, env
    assert 0 < env["step_latency_ms"]["p50"] <= env["step_latency_ms"]["p99"], env


def env_kill(moerl, config, tmp):
    # One env node: with env-1 beside it the job went on without env-0 and could end before
    # env-0's replacement (1 s delay, then a node start): it came between iterations 18 and 21
    # of 30 here, on a quicker machine later. Alone, no episode runs until env-0-r1 serves, and
    # the buffer holds at most buffer.max_staleness versions ahead, so the iterations left
    # after the kill wait for the replacement: it comes before the end by construction.
    run = up_run(moerl, tmp, "env-kill", "--config", config, "--no-interrupt",
                 "--iterations", "30", "--set", "env.nodes=1")
    i = run.wait_iteration(3)
    run.kill("env-0", signal.SIGKILL)
    run.wait_line(r">>> replaced env-0 by env-0-r1 ", i)
    rep = run.finish()
    check_safety(rep)
    check_env_report(rep)
    assert replaced(rep, "env-0", "killed by SIGKILL")["replacement"] == "env-0-r1"


def env_crash(moerl, config, tmp):
    run = up_run(moerl, tmp, "env-crash", "--config", config, "--no-interrupt",
                 "--iterations", "20", "--set", "env.crash_every_steps=150",
                 "--set", "actors.restart_intensity=1000")
    i = run.wait_iteration(6)
    failed = {}
    for n in run.nodes():
        if n["role"] == "rollout" and n["state"] == "running":
            for reason, count in n.get("stats", {}).get("env", {}).get("episodes_failed", {}).items():
                failed[reason] = failed.get(reason, 0) + count
    rep = run.finish()
    check_safety(rep)
    check_env_report(rep)
    # A crashed environment's episodes fail: "unknown session" on their next step, or a
    # timeout for a request already in the dying actor's mailbox.
    assert failed.get("env_restarted", 0) + failed.get("timeout", 0) > 0, failed


def bad_input(moerl, config, tmp):
    import zmq
    run = up_run(moerl, tmp, "bad-input", "--config", config, "--no-interrupt",
                 "--iterations", "20")
    run.wait_iteration(1)
    ep = next(n["endpoint"] for n in run.nodes() if n["role"] == "env" and n["state"] == "running")
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, 30000)
    s.connect(ep)

    def ask(payload):
        s.send(payload if isinstance(payload, bytes) else json.dumps(payload).encode())
        return json.loads(s.recv())

    refusals = [
        (b"not json", "malformed env request"),
        ({"op": "step"}, "malformed env request"),
        ({"id": 1, "op": "fly"}, "op 'fly' is not reset|step|close"),
        ({"id": 2, "op": "reset", "task": "guess"}, "malformed env reset"),
        ({"id": 3, "op": "reset", "task": "chess", "seed": 1}, "unknown task 'chess'"),
        ({"id": 4, "op": "step", "session": 12345, "action": [3]}, "unknown session 12345"),
        ({"id": 5, "op": "step", "session": 1, "action": "x"}, "\"action\" must be an array"),
    ]
    for req, why in refusals:
        r = ask(req)
        assert not r["ok"] and why in r["error"], (req, r)
    r = ask({"id": 6, "op": "reset", "task": "guess", "seed": 7})
    assert r["ok"] and r["observation"] == [1, 3 + 4, 14], r  # "^4=", hidden 7
    sess = r["session"]
    r = ask({"id": 7, "op": "step", "session": sess, "action": [3, 4]})
    assert not r["ok"] and "one token, got 2" in r["error"], r
    r = ask({"id": 8, "op": "step", "session": sess, "action": [99]})
    assert not r["ok"] and "outside the vocabulary" in r["error"], r
    # The episode is unchanged by the refusals, and the node still serves it.
    r = ask({"id": 9, "op": "step", "session": sess, "action": [3 + 2]})
    assert r["ok"] and not r["done"] and r["observation"] == [13], r  # 2: higher ('+')
    r = ask({"id": 10, "op": "step", "session": sess, "action": [3 + 7]})
    assert r["ok"] and r["done"] and r["reward"] == 1.0, r
    s.close()
    ctx.term()
    rep = run.finish()
    check_safety(rep)
    check_env_report(rep)


def main(moerl, config, case):
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        {"env_kill": env_kill, "env_crash": env_crash, "bad_input": bad_input}[case](
            moerl, os.path.abspath(config), tmp)
    print(f"moerl up {case} checks passed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
