#!/usr/bin/env python3
"""`moerl up` under failure (issue 11): the local cluster replaces the nodes killed under it the
way deploy/'s pod controllers would, restarts the coordinator from its journal, and the run
still finishes its iterations with nothing lost or duplicated; two runs on one machine keep
their own consoles. One case per invocation:

  moerl_up_faults_test.py MOERL in_turn    SIGKILL trainer, reward, then coordinator
  moerl_up_faults_test.py MOERL trainer_handed  SIGKILL the trainer while it holds handed groups
  moerl_up_faults_test.py MOERL buffer_stopped  SIGSTOP buffer-0 past the heartbeat timeout, SIGCONT
  moerl_up_faults_test.py MOERL buffer_stopped_late  the same with the CAF link timeout raised
  moerl_up_faults_test.py MOERL buffer_frozen   SIGSTOP buffer-0 for good: `moerl up` kills it
  moerl_up_faults_test.py MOERL buffer_killed   SIGKILL buffer-0: its successor gets its share
  moerl_up_faults_test.py MOERL case3      SIGKILL rollout-0, SIGTERM rollout-1, SIGKILL reward-0
  moerl_up_faults_test.py MOERL two_jobs   a second run while the first holds its console
  moerl_up_faults_test.py MOERL console_taken  the coordinator's console port taken while it is down
  moerl_up_faults_test.py MOERL same_second  three runs started at once on the default consoles
  moerl_up_faults_test.py MOERL trainer_group  SIGKILL a member of the 2-node trainer group (the default)
  moerl_up_faults_test.py MOERL group_coordinator  SIGKILL the coordinator of a 2-node group
  moerl_up_faults_test.py MOERL rollout_group  SIGKILL each member of a 2-node rollout group
  moerl_up_faults_test.py MOERL rollout_group_drain  a Spot notice to the follower of a rollout group
  moerl_up_faults_test.py MOERL disk_full  the store on a 2 MiB tmpfs: ends at once, cause named
  moerl_up_faults_test.py MOERL trainer_lost  SIGKILL the trainer, recreated only 30 s later
  moerl_up_faults_test.py MOERL weights_kill  SIGKILL a checkpoint cache of two (issue 13)

Every wait below is a liveness bound (the run must get there at all), not a timing check."""
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

# The cases that kill trainer-0 a few iterations in and check that it resumed from a
# checkpoint (check_resumed): a checkpoint every other version (job.max_durability_lag 4)
# rather than the default every 8th (lag 16), so one is committed before the kill.
EARLY_CHECKPOINTS = ["--set", "job.max_durability_lag=4"]
# A small GRPO job: a tiny policy, a few short iterations.
SMALL = ["--set", "policy.d_model=16", "--set", "policy.num_heads=2", "--set", "policy.ffn_dim=8",
         "--set", "grpo.prompts_per_iteration=8"]
BOUND_S = 240  # liveness bound of every wait


class up_run:
    """One `moerl up` in the background, its stdout collected line by line."""

    def __init__(self, moerl, cwd, name, *args, prefix=(), policy=SMALL):
        self.moerl, self.name = moerl, name
        self.report = os.path.join(cwd, name + ".json")
        self.run_dir = os.path.join(cwd, name + "-runs")
        self.cmd = [*prefix, moerl, "up", "--timeout", str(BOUND_S), "--report", self.report,
                    "--run-dir", self.run_dir, *policy, *args]
        self.p = subprocess.Popen(self.cmd, cwd=cwd, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.lines, self.err, self.err_chunks = [], "", []
        # Both pipes have their own reader: communicate() beside the stdout reader would race
        # it for the last lines (seen: the FAILED line went to communicate and was lost).
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.err_reader = threading.Thread(target=lambda: self.err_chunks.append(
            self.p.stderr.read()), daemon=True)
        self.err_reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self):
        return "\n".join(self.lines[-60:]) + "\n--- stderr ---\n" + self.err[-3000:]

    def wait_line(self, pattern, after=0):
        """The first line (index >= after) matching `pattern`; fails the test past the bound."""
        deadline = time.monotonic() + BOUND_S
        while time.monotonic() < deadline:
            for i in range(after, len(self.lines)):
                m = re.search(pattern, self.lines[i])
                if m:
                    return i, m
            if self.p.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.1)
        self.finish(check=False)
        sys.exit(f"FAIL [{self.name}]: no line matching {pattern!r}\n{self.output()}")

    def wait_iteration(self, at_least, after=0, end_ok=False):
        """The first progress line (index >= after) at iteration `at_least` or later. Unless
        `end_ok`, that line must not be the run's last iteration: a fault the test injects next
        would land after the job ended (progress prints every 500 ms, and a short run of the
        small policy can finish between two prints), so the run is too short for its test."""
        while True:
            i, m = self.wait_line(r"iteration (\d+)/(\d+)", after)
            done, total = int(m.group(1)), int(m.group(2))
            if done >= at_least:
                if not end_ok and done >= total:
                    self.finish(check=False)
                    sys.exit(f"FAIL [{self.name}]: the run reached its last iteration ({done}/"
                             f"{total}) before the test could act; give it more iterations\n"
                             f"{self.output()}")
                return i
            after = i + 1

    def wait_resumed(self, after):
        """Training resumed: two more iterations past the first progress line after `after`."""
        j, m = self.wait_line(r"iteration (\d+)/", after)
        return self.wait_iteration(int(m.group(1)) + 2, j, end_ok=True)

    def wait_log(self, text):
        """The node log (this run's logs/) that says `text`; fails the test past the bound, or
        at once when the run has ended and its logs do not say it (nothing more can come)."""
        deadline = time.monotonic() + BOUND_S
        while time.monotonic() < deadline:
            ended = self.p.poll() is not None  # before reading: what the run left counts
            for f in glob.glob(os.path.join(self.run_dir, "*", "logs", "*.log")):
                if text in open(f, errors="replace").read():
                    return f
            if ended:
                break
            time.sleep(0.1)
        self.finish(check=False)
        sys.exit(f"FAIL [{self.name}]: no node log says {text!r}\n{self.output()}")

    def console_address(self):
        """The run's console: the latest one `moerl up` printed (a recreated coordinator whose
        address was taken while it was down prints where its console moved)."""
        i, m = self.wait_line(r"console at (\S+) ")
        for j in range(len(self.lines) - 1, i, -1):
            later = re.search(r"console at (\S+) ", self.lines[j])
            if later:
                return later.group(1)
        return m.group(1)

    def nodes(self):
        r = subprocess.run([self.moerl, "console", "--connect", self.console_address(), "nodes",
                            "--json"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def accounting_until(self, pred, what):
        """The coordinator's accounting (its status, polled: the progress line no longer
        carries it) once `pred` holds for it; fails the test past the bound."""
        deadline = time.monotonic() + BOUND_S
        while time.monotonic() < deadline and self.p.poll() is None:
            r = subprocess.run([self.moerl, "console", "--connect", self.console_address(),
                                "status", "--json"], capture_output=True, text=True, timeout=30)
            if r.returncode == 0:
                a = json.loads(r.stdout)["accounting"]
                if pred(a):
                    return a
            time.sleep(0.1)
        self.finish(check=False)
        sys.exit(f"FAIL [{self.name}]: never saw {what}\n{self.output()}")

    def handed(self):
        """Samples handed to a trainer and not yet confirmed, once there are some."""
        return self.accounting_until(lambda a: a.get("handed", 0) > 0,
                                     "samples handed to the trainer")["handed"]

    def stop_while_holding(self, name):
        """SIGSTOPs trainer `name` at a moment it holds handed samples and returns how many it
        holds, stopped: it confirms nothing more, so a SIGKILL now kills it holding them. (A
        kill right after handed() raced the trainer's confirmation: at ~40 ms a step, it had
        sometimes confirmed all it held, and there was nothing to serve again.)"""
        deadline = time.monotonic() + BOUND_S
        while True:
            self.handed()
            self.kill(name, signal.SIGSTOP)
            time.sleep(0.5)  # what it sent before the stop reaches the shards and coordinator
            held = self.accounting_until(lambda a: True, "the accounting")["handed"]
            if held > 0:
                return held
            self.kill(name, signal.SIGCONT)
            assert time.monotonic() < deadline, f"{name} never stopped holding samples"

    def pid_of(self, name):
        """The running node's pid, as the coordinator lists it; the coordinator's from /proc."""
        if name == "coordinator":
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    argv = open(f"/proc/{pid}/cmdline").read().split("\0")
                    ppid = re.search(r"PPid:\s+(\d+)", open(f"/proc/{pid}/status").read())
                except OSError:
                    continue
                if int(ppid.group(1)) == self.p.pid and "coordinator" in argv and "node" in argv:
                    return int(pid)
            sys.exit(f"FAIL [{self.name}]: no coordinator process under moerl up")
        for n in self.nodes():
            if n["name"] == name and n["state"] == "running":
                return n["pid"]
        sys.exit(f"FAIL [{self.name}]: {name} is not running: {self.nodes()}")

    def kill(self, name, sig):
        pid = self.pid_of(name)
        print(f"[{self.name}] {signal.Signals(sig).name} -> {name} (pid {pid})", flush=True)
        os.kill(pid, sig)
        return pid

    def finish(self, check=True):
        try:
            self.p.wait(timeout=BOUND_S + 60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.reader.join()
        self.err_reader.join()
        self.err = "".join(self.err_chunks)
        print(self.output())
        if check and self.p.returncode != 0:
            sys.exit(f"FAIL [{self.name}]: moerl up exited {self.p.returncode}")
        return json.load(open(self.report)) if os.path.exists(self.report) else None


def check_safety(rep):
    a = rep["accounting"]
    assert a["lost"] == 0 and a["duplicated"] == 0, a
    assert a["invariant_ok"], a
    assert rep["done"], rep.get("failure")


def check_balanced(a):
    """committed - trained is always explained: handed to a trainer, or buffered in a shard."""
    assert a["committed"] == a["trained"] + a["handed"] + a["buffered"], a
    assert a["dispatched"] == a["committed"] + a["in_flight"] + sum(a["dropped"].values()), a


def check_timings_whole(rep):
    """The report's iteration timings span the whole run, from iteration 1, across the
    trainer's restart: a recreated trainer (a new node) and a re-formed group's member 0 start
    their lists again at the checkpoint they restored, and the coordinator joins the earlier
    incarnation's entries in front (actors/job.h joined_trainer_job). Ascending; a gap only
    where the restored state was announced past the durability lag."""
    timed = [p["iteration"] for p in rep["iterations"]]
    assert timed and timed[0] == 1, timed[:5]
    assert all(b > a for a, b in zip(timed, timed[1:])), timed
    print(f"iteration timings: {len(timed)} entries, {timed[0]}..{timed[-1]}", flush=True)


def check_resumed(rep, iterations):
    """The recreated trainer resumed from the run's newest checkpoint, not from fresh weights:
    one reward curve numbered from 1, ascending, without a restart at 1, and the policy version
    reaches one step per iteration's worth of trained samples (all `iterations` unless whole
    iterations' groups were dropped stale under load: seen once in 4, 512 of 7680 samples; a
    merged last step may leave one short). Checkpoints trail the announced versions by up to
    job.max_durability_lag (4, EARLY_CHECKPOINTS): a resume from checkpoint c announces its
    state as c + lag + 1 and steps on from there (job/README.md, "Checkpoints"), so the curve
    may skip up to lag + 1 numbers there, never go back."""
    versions = [p["iteration"] for p in rep["reward_curve"]]
    lag = 4
    assert versions and versions[0] == 1, versions
    gaps = [b - a for a, b in zip(versions, versions[1:])]
    assert all(1 <= g <= lag + 2 for g in gaps), versions
    assert rep["resumed_from_version"] > 0, rep.get("resumed_from_version")
    per_step = rep["reward_curve"][0]["samples"]
    steps = rep["accounting"]["trained"] // per_step
    assert rep["policy_version"] >= min(iterations, steps) - 1, (rep["policy_version"], steps)
    print(f"trainer resumed from version {rep['resumed_from_version']}; policy version "
          f"{rep['policy_version']} of {iterations} iterations", flush=True)


def replaced(rep, node, cause):
    """The report's replacement of `node` with `cause` (fails when it lists none)."""
    for r in rep["replacements"]:
        if r["node"] == node and r["cause"] == cause and "error" not in r:
            return r
    sys.exit(f"FAIL: no replacement of {node} ({cause}) in {rep['replacements']}")


def in_turn(moerl, tmp):
    """SIGKILL the trainer (trainer-0, rank 0 of moerl up's 2-member trainer group, a
    StatefulSet: recreated as trainer-0, and the group re-formed with trainer-1), the reward node
    (a Deployment: replaced by a new name) and the coordinator (restarted from its journal), each
    once the previous replacement runs and the job moved on."""
    # The reward node's loss does not stall the job (rollouts score locally meanwhile), so the
    # run must outlast its replacement and the coordinator's kill after it: at ~45 ms an
    # iteration (5 Dec) a 60-iteration run ended before the coordinator was killed.
    run = up_run(moerl, tmp, "in-turn", "--no-interrupt", "--iterations", "300",
                 *EARLY_CHECKPOINTS)
    i = run.wait_iteration(3)
    run.kill("trainer-0", signal.SIGKILL)
    i, _ = run.wait_line(r">>> recreated trainer-0 ", i)
    i = run.wait_iteration(6, i)
    run.kill("reward-0", signal.SIGKILL)
    i, _ = run.wait_line(r">>> replaced reward-0 by reward-0-r1 ", i)
    i = run.wait_iteration(9, i)
    run.kill("coordinator", signal.SIGKILL)
    i, _ = run.wait_line(r">>> recreated coordinator ", i)
    rep = run.finish()
    check_safety(rep)
    check_balanced(rep["accounting"])
    trainer = replaced(rep, "trainer-0", "killed by SIGKILL")
    assert trainer["replacement"] == "trainer-0", trainer
    replaced(rep, "reward-0", "killed by SIGKILL")
    replaced(rep, "coordinator", "killed by SIGKILL")
    assert rep["num_replacements"] == len(rep["replacements"]) >= 3, rep["replacements"]
    assert rep["restart_policy"]["trainer"].startswith("StatefulSet"), rep["restart_policy"]
    # No check_timings_whole here: the coordinator's restart after the trainer's loses the
    # dead trainer's timings (a coordinator holds node stats in memory; the recreated trainer
    # has only its own since its restore).
    check_resumed(rep, 300)


def check_dead_trainer_books(rep, iterations, handed):
    """The books of a run whose trainer-0 was SIGKILLed holding `handed` samples: safe,
    balanced, everything committed trained, and the dead trainer's groups served again (or
    dropped, named). Returns (groups served again, samples dropped stale)."""
    check_safety(rep)
    a = rep["accounting"]
    check_balanced(a)
    assert a["handed"] == 0 and a["trained"] == a["committed"], a
    replaced(rep, "trainer-0", "killed by SIGKILL")
    check_resumed(rep, iterations)
    check_timings_whole(rep)
    again = sum(n.get("stats", {}).get("reserved_groups", 0) for n in rep["nodes"]
                if n["role"] == "buffer")
    stale = a["dropped"].get("trainer_lost_stale", 0)
    assert again > 0 or stale > 0, (again, a, handed)
    return again, stale


def trainer_handed(moerl, tmp):
    """Issue 11 case 1: the trainer dies holding groups its shards handed it (trainer-0: the
    trainer group's rank 0, the consumer that pulls and holds the batches). They are not
    lost: the recreated trainer (a new incarnation of the same consumer) is served them again
    (or they are dropped as trainer_lost_stale), and the run trains everything it committed."""
    run = up_run(moerl, tmp, "trainer-handed", "--no-interrupt", "--iterations", "100",
                 *EARLY_CHECKPOINTS)
    i = run.wait_iteration(2)
    # The coordinator shows groups handed to the trainer and not yet confirmed.
    handed = run.stop_while_holding("trainer-0")
    run.kill("trainer-0", signal.SIGKILL)
    i, _ = run.wait_line(r">>> recreated trainer-0 ", i)
    rep = run.finish()
    again, stale = check_dead_trainer_books(rep, 100, handed)
    assert rep["accounting"]["buffered"] == 0, rep["accounting"]
    print(f"handed at the kill {handed} samples; served again {again} group(s), "
          f"dropped stale {stale} sample(s)", flush=True)


def trainer_lost(moerl, tmp):
    """A trainer that does not come back (yet): its recreation is held back 30 s
    (cluster.restart_delay_ms). Once the coordinator declares trainer-0 dead it declares its
    consumer lost to the shards, and the groups handed to it go back to buffered long before
    any successor asks (before the recreation); then the recreated trainer finishes the run."""
    run = up_run(moerl, tmp, "trainer-lost", "--no-interrupt", "--iterations", "200",
                 *EARLY_CHECKPOINTS,
                 "--set", "cluster.restart_delay_ms=30000",
                 "--set", "cluster.restart_backoff_max_ms=30000")
    i = run.wait_iteration(2)
    held = run.stop_while_holding("trainer-0")
    run.kill("trainer-0", signal.SIGKILL)
    i, _ = run.wait_line(r">>> trainer-0 exited \(killed by SIGKILL\)", i)
    # The coordinator's declaration (it may follow the exit line: the coordinator learns of
    # the death from its own link, not from moerl up). handed == 0 alone would not show the
    # declaration happened: the coordinator logs it.
    run.wait_log("trainer consumer trainer-0 lost")
    # Nothing confirms any more: what is handed now can only go back (or be dropped stale).
    a = run.accounting_until(lambda a: a.get("handed", 0) == 0,
                             "the dead trainer's handed samples released")
    released_at = len(run.lines)
    early = [line for line in run.lines[i:released_at] if ">>> recreated trainer-0 " in line]
    assert not early, "released only after the recreation:\n" + "\n".join(run.lines[i:])
    run.wait_line(r">>> recreated trainer-0 ", i)
    print(f"handed before the kill: {held} samples; released before the recreation "
          f"(buffered {a.get('buffered')})", flush=True)
    rep = run.finish()
    check_dead_trainer_books(rep, 60, held)


def stop_buffer_past_heartbeat(run, i):
    """SIGSTOP buffer-0 until the coordinator declared it dead, then SIGCONT; waits for the
    fenced shard to exit and returns the run's report, checked safe and balanced."""
    pid = run.pid_of("buffer-0")
    run.kill("buffer-0", signal.SIGSTOP)
    # Stopped until the coordinator declared it dead (a liveness bound, not a timing check).
    deadline = time.monotonic() + BOUND_S
    while not any(n["pid"] == pid and n["state"] == "dead" for n in run.nodes()):
        assert time.monotonic() < deadline, f"buffer-0 never declared dead: {run.nodes()}"
        time.sleep(0.5)
    print(f"[{run.name}] buffer-0 declared dead; SIGCONT -> pid {pid}", flush=True)
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass  # `moerl up` killed it first (dead but still running past its grace)
    # It exits on being fenced, or the coordinator's SIGKILL fence reaches it first, or
    # `moerl up` kills it as still running past its grace after it was declared dead. (The
    # run may end before its replacement is up, so the exit is what is waited for.)
    i, m = run.wait_line(r">>> buffer-0 exited \((exit code 5|killed by SIGKILL)\)", i)
    rep = run.finish()
    check_safety(rep)
    check_balanced(rep["accounting"])
    assert rep["accounting"]["dropped"].get("shard_lost", 0) > 0, rep["accounting"]
    print(f"buffer-0 ended: {m.group(1)}; dropped shard_lost "
          f"{rep['accounting']['dropped']['shard_lost']} sample(s), refused claims "
          f"{rep['accounting'].get('refused_claims', 0)} sample(s), duplicated 0", flush=True)
    return rep


def buffer_stopped(moerl, tmp):
    """A starved buffer shard (SIGSTOP past the coordinator's heartbeat timeout, then SIGCONT)
    is declared dead and its groups re-opened; alive again, it must not serve them as well.
    The coordinator refuses it as fenced, the shard exits and is recreated empty, and nothing
    is trained twice (duplicated == 0)."""
    # Long enough to outlast the fenced shard's exit: a call to the coordinator in flight when
    # the shard was stopped can hold its loop for node.request_timeout_ms (5 s) after it is
    # continued, and a 60-iteration run once ended 4.6 s after the fence, the shard still up.
    run = up_run(moerl, tmp, "buffer-stopped", "--no-interrupt", "--iterations", "200")
    i = run.wait_iteration(3)
    stop_buffer_past_heartbeat(run, i)


def buffer_stopped_late(moerl, tmp):
    """As buffer_stopped, with the CAF link timeout raised above the heartbeat bound (the link
    stays up while the shard is stopped) and the shard stopped while it has groups handed out:
    what it handed (or was about to deliver) reaches the trainer after the coordinator declared
    it dead and re-opened its groups. The trainer claims before it trains, so the late copy is
    refused (refused_claims) and only the regenerated one is trained: duplicated == 0, lost == 0
    (seen before the claim: 1 run in 3 ended with duplicated = 8)."""
    run = up_run(moerl, tmp, "buffer-stopped-late", "--no-interrupt", "--iterations", "200",
                 "--set", "node.connection_timeout_ms=20000")
    i = run.wait_iteration(3)
    run.handed()  # groups are out with the trainer now: stop the shard mid-hand-out
    stop_buffer_past_heartbeat(run, i)


def buffer_frozen(moerl, tmp):
    """A shard frozen for good (SIGSTOP, never continued) cannot fence itself: `moerl up`, as
    a failing liveness probe would, kills the process the coordinator lists as dead, and the
    StatefulSet node is recreated empty; nothing is trained twice."""
    # Long enough to outlast the freeze's detection (8 missed heartbeats), the kill 3 s later
    # and the recreation 1 s after that: with 60 iterations the run once ended between the kill
    # and the recreation, and with 200 (11.9 s at today's ~45 ms an iteration) before the
    # detection; 600 run ~30 s, ~20 s past the freeze.
    run = up_run(moerl, tmp, "buffer-frozen", "--no-interrupt", "--iterations", "600")
    i = run.wait_iteration(3)
    # Its pod's probes (`moerl probe`, as deploy/ runs them) read the health file it writes.
    health = os.path.join(run.wait_line(r"logs in (\S+)")[1].group(1), "buffer-0.health.json")

    def probe(kind, within_ms):
        return subprocess.run([moerl, "probe", "--file", health, kind, "--within-ms",
                               str(within_ms)], capture_output=True, text=True, timeout=30)

    r = probe("--ready", 10000)
    assert r.returncode == 0 and "buffer-0 ready" in r.stdout, (r.returncode, r.stderr)
    run.kill("buffer-0", signal.SIGSTOP)
    deadline = time.monotonic() + BOUND_S
    while (r := probe("--live", 1500)).returncode == 0:
        assert time.monotonic() < deadline, "the frozen node's liveness probe kept passing"
        time.sleep(0.2)
    assert "frozen or hung" in r.stderr, r.stderr
    i, _ = run.wait_line(r">>> buffer-0 still ran after the coordinator declared it dead ", i)
    i, _ = run.wait_line(r">>> buffer-0 exited \(killed by SIGKILL\)", i)
    run.wait_line(r">>> recreated buffer-0 ", i)
    rep = run.finish()
    check_safety(rep)
    check_balanced(rep["accounting"])
    replaced(rep, "buffer-0", "killed by SIGKILL")


def case3(moerl, tmp):
    """Issue 11 case 3: both rollout nodes and the reward node go at once."""
    # Enough iterations that the job still has work when the replacements are due: a run that
    # ends first stops supervising (seen with 16 iterations, killed late under load; 80 left
    # too little once iterations took ~15 ms).
    run = up_run(moerl, tmp, "case3", "--no-interrupt", "--iterations", "200",
                 "--set", "actors.sigterm_grace_ms=8000")
    i = run.wait_iteration(3)
    run.kill("rollout-0", signal.SIGKILL)
    run.kill("rollout-1", signal.SIGTERM)
    run.kill("reward-0", signal.SIGKILL)
    for node in ("rollout-0", "rollout-1", "reward-0"):
        run.wait_line(rf">>> replaced {node} by {node}-r1 ", i)
    rep = run.finish()
    check_safety(rep)
    assert replaced(rep, "rollout-0", "killed by SIGKILL")["replacement"] == "rollout-0-r1"
    replaced(rep, "rollout-1", "exit code 0")  # it drained on SIGTERM and left
    replaced(rep, "reward-0", "killed by SIGKILL")


def two_jobs(moerl, tmp):
    """Issue 11 case 7: a second run while the first holds its console talks only to its own
    job; an explicitly given console address that is taken is refused before anything starts."""
    # The first run must still hold its console through the refused start and the second
    # run: 30 iterations take ~1.5 s at ~45 ms each (5 Dec), too close to a process start.
    first = up_run(moerl, tmp, "first", "--no-interrupt", "--iterations", "300")
    first.wait_iteration(1)
    taken = first.console_address()
    r = subprocess.run([moerl, "up", "--console", taken, "--iterations", "1", "--run-dir",
                        os.path.join(tmp, "refused-runs")], cwd=tmp, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "is in use" in r.stderr, (r.returncode, r.stderr[-2000:])
    # The second run keeps its mid-run Spot notice: it must land on its own rollout node.
    second = up_run(moerl, tmp, "second", "--iterations", "9")
    own = second.console_address()
    assert own != taken, (own, taken)
    rep2 = second.finish()
    rep1 = first.finish()
    for rep in (rep1, rep2):
        check_safety(rep)
    assert rep1["interruptions"] == [], rep1["interruptions"]
    assert len(rep2["interruptions"]) == 1, rep2["interruptions"]
    assert rep1["run_id"] != rep2["run_id"]


def same_second(moerl, tmp):
    """Three `moerl up` started at the same moment on the default consoles: each checks that
    7411/7412 are free before its coordinator binds, so all three may choose them. Losers of
    that bind race restart their coordinator on new ports; all three runs finish, each on a
    console of its own."""
    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind(("127.0.0.1", 7411))
        print("same_second: 7411 is free: all three may race for it", flush=True)
    except OSError:
        print("same_second: 7411 is taken by another process: all three choose free ports "
              "(the bind race is not exercised in this run)", flush=True)
    finally:
        probe.close()
    runs = [up_run(moerl, tmp, f"same-second-{k}", "--no-interrupt", "--iterations", "3")
            for k in range(3)]
    reps = [r.finish() for r in runs]
    consoles = [r.console_address() for r in runs]
    assert len(set(consoles)) == 3, consoles
    for rep in reps:
        check_safety(rep)
    assert len({rep["run_id"] for rep in reps}) == 3, [rep["run_id"] for rep in reps]
    print("consoles:", consoles, flush=True)


def squat(address, deadline):
    """A socket listening on HOST:PORT `address` once the killed coordinator let it go (before
    the monotonic `deadline`), as another process taking the port would."""
    host, port = address.rsplit(":", 1)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    while True:
        try:
            s.bind((host, int(port)))
            break
        except OSError:
            assert time.monotonic() < deadline, f"{address} still held after the kill"
            time.sleep(0.05)
    s.listen()
    return s


def console_taken(moerl, tmp):
    """Issue 11 case 7, later in a run: the coordinator dies and, before its restart, another
    process takes its console port. The recreated coordinator could not listen: `moerl up`
    ends at once, non-zero, naming the taken address, with the report written."""
    # A console address the user gave: it may not move (console_moved is the chosen one's case).
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    given = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    probe.close()
    run = up_run(moerl, tmp, "console-taken", "--no-interrupt", "--iterations", "200",
                 "--console", given, "--set", "cluster.restart_delay_ms=4000")
    i = run.wait_iteration(2)
    address = run.console_address()
    run.kill("coordinator", signal.SIGKILL)
    squatter = squat(address[len("tcp://"):], time.monotonic() + 3)  # within the 4 s delay
    try:
        rep = run.finish(check=False)
    finally:
        squatter.close()
    assert run.p.returncode != 0, run.p.returncode
    out = "\n".join(run.lines)
    assert "moerl up: FAILED after" in out and "TIMED OUT" not in out, run.output()
    assert f"its console address {address} was taken by another process" in out, run.output()
    assert rep is not None and not rep.get("done", False), rep
    print(f"refused to recreate the coordinator: {address} taken", flush=True)


def console_moved(moerl, tmp):
    """The coordinator dies and, before its restart, other processes take both of its consoles'
    ports, which this run chose itself (the defaults, or free ports instead of taken
    defaults: as when a second `moerl up` starts meanwhile). The recreated coordinator's
    consoles move to free ports, `moerl up` prints where, and the run finishes on them."""
    run = up_run(moerl, tmp, "console-moved", "--no-interrupt", "--iterations", "200",
                 "--set", "cluster.restart_delay_ms=4000")
    i = run.wait_iteration(2)
    console = run.console_address()
    dashboard = run.wait_line(r"dashboard at https?://(\S+)/")[1].group(1)
    run.kill("coordinator", signal.SIGKILL)
    deadline = time.monotonic() + 3  # within the 4 s restart delay
    squatters = [squat(a, deadline) for a in (console[len("tcp://"):], dashboard)]
    try:
        j, m = run.wait_line(r">>> recreated coordinator .*now console at (\S+) and dashboard "
                             r"at (\S+) \(moved\)", i)
        assert m.group(1) != console and m.group(2) != dashboard, run.lines[j]
        assert run.console_address() == m.group(1), run.console_address()
        run.wait_resumed(j)  # the run goes on under the moved console
        rep = run.finish()
    finally:
        for s in squatters:
            s.close()
    check_safety(rep)
    check_balanced(rep["accounting"])
    moved = [r for r in rep["replacements"] if r.get("moved")]
    assert len(moved) == 1 and moved[0]["node"] == "coordinator", rep["replacements"]
    print(f"consoles moved: {console} -> {m.group(1)}, {dashboard} -> {m.group(2)}", flush=True)


def disk_full(moerl, tmp):
    """Issue 11 case 2: the store on a 2 MiB tmpfs (in a private mount namespace). The trainer's
    weight writes fail with ENOSPC until its supervisor gives up; it tells the coordinator why
    and exits, and the run ends at once: non-zero, the cause named, the report written with the
    accounting as it stands (nothing lost or duplicated, committed - trained explained).
    The default policy, so that its weights fill the 2 MiB within the first iterations."""
    store = os.path.join(tmp, "store")
    os.mkdir(store)
    mount = ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=2m tmpfs {store}"]
    probe = subprocess.run(mount, capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"SKIP: cannot mount a tmpfs in a private mount namespace here ({' '.join(mount)}:"
              f" {probe.stderr.strip()})", flush=True)
        sys.exit(77)
    # Durability lag 0: each version's checkpoint is committed before it is announced, so the
    # trainer meets ENOSPC in its own step. With a lag the background shard writes fail
    # unseen until the lag is reached, and the coordinator's ledger, on the same full
    # store, stops answering first (its syncs fail and are retried; the run then waits out
    # --timeout): a full store under the coordinator is not named as a cause yet.
    run = up_run(moerl, tmp, "disk-full", "--no-interrupt", "--iterations", "200",
                 "--set", f"store.url={store}", "--set", "job.max_durability_lag=0",
                 prefix=[*mount[:-1], mount[-1] + ' && exec "$@"', "sh"], policy=[])
    rep = run.finish(check=False)
    assert run.p.returncode != 0, run.p.returncode
    out = "\n".join(run.lines)
    assert "moerl up: FAILED after" in out and "TIMED OUT" not in out, run.output()
    cause = re.search(r"^moerl up: cause: (\S+) gave up: (.*)$", out, re.M)
    assert cause and "No space left on device" in cause.group(2), run.output()
    assert rep is not None, "no report written"
    assert rep["failed_node"] == cause.group(1), rep.get("failed_node")
    assert "No space left on device" in rep["failure_cause"], rep["failure_cause"]
    assert not rep["done"], rep
    a = rep["accounting"]
    assert a["lost"] == 0 and a["duplicated"] == 0 and a["invariant_ok"], a
    check_balanced(a)
    print(f"{cause.group(1)} gave up after {rep['wall_s']:.1f} s: {cause.group(2)[:200]}; "
          f"committed {a['committed']} = trained {a['trained']} + handed {a['handed']} + "
          f"buffered {a['buffered']}, lost 0, duplicated 0", flush=True)


def trainer_group(moerl, tmp):
    """Issue 12: `moerl up`'s trainer is a group of 2 node processes (trainer-0, trainer-1),
    one EP rank each. SIGKILL of member trainer-1 mid-run breaks the group; the coordinator
    stops trainer-0's part, the local job recreates trainer-1 under its name, the group re-forms
    from the last checkpointed version and the run finishes with nothing lost or duplicated;
    no rollout node is touched. The members share loopback here (network namespaces: not in
    this test; the fabric is shm between the two processes)."""
    print("trainer_group: members on loopback (no network namespaces in this test)", flush=True)
    # Long enough that the kill lands well before the end (the re-formed group also numbers
    # its restored state past the durability lag, so the iteration counter jumps): at today's
    # ~45 ms an iteration 150 ran 7 s, and in a loaded suite the kill came at iteration 135
    # and the run ended before training resumed; 600 run ~27 s.
    run = up_run(moerl, tmp, "group", "--no-interrupt", "--iterations", "600",
                 "--set", "trainer.group_size=2")
    i = run.wait_iteration(3)
    nodes = {n["name"]: n for n in run.nodes()}
    assert nodes["trainer-0"]["group"] == "trainer" and nodes["trainer-0"]["rank"] == 0, nodes
    assert nodes["trainer-1"]["group"] == "trainer" and nodes["trainer-1"]["rank"] == 1, nodes
    assert nodes["rollout-0"]["group"] != "trainer", nodes["rollout-0"]  # its own rollout group
    had_shm = any(f.startswith(f"{run.pid_of('trainer-1')}:") for f in os.listdir("/dev/shm"))
    killed_at = time.monotonic()  # the re-formations' "at" is the same clock (steady, s)
    killed = run.kill("trainer-1", signal.SIGKILL)
    i, _ = run.wait_line(r">>> recreated trainer-1 ", i)
    run.wait_resumed(i)
    # Its shm fabric regions (it could not close them) went with it: moerl up removed them.
    left = [f for f in os.listdir("/dev/shm") if f.startswith(f"{killed}:")]
    assert had_shm and not left, (had_shm, left)
    rep = run.finish()
    check_safety(rep)
    groups = {g["name"]: g for g in rep["groups"]}
    g = groups["trainer"]
    assert g["members"] == ["trainer-0", "trainer-1"], g
    # The kill's re-formation: the first one from the kill on. Its cause names trainer-1 when
    # the coordinator sees the loss first, or trainer-0's failed step when rank 0's collective
    # with the dead member fails first (the write to it fails). A machine under load can add
    # one more (a CAF link blip past the re-join grace declares a live member down, and it
    # re-joins), before the kill as well as after it.
    print("trainer group re-formed:", json.dumps(g["reformed"]), flush=True)
    mine = [r for r in g["reformed"] if r["at"] >= killed_at - 0.5]
    assert mine, g["reformed"]
    r = mine[0]
    assert r["downtime_s"] is not None, r
    assert r["restored_version"] is not None, r
    check_timings_whole(rep)
    # The report names the transport the group's expert plane actually used (rank 0, which
    # runs the job, reports it): the two processes share this host, so rank 0 reaches rank 1
    # "same_host" (issue 16).
    planes = {p["node"]: p for p in rep["expert_planes"] if p["group"] == "trainer"}
    assert "trainer-0" in planes, rep["expert_planes"]
    assert planes["trainer-0"]["peer_paths"] == ["same_process", "same_host"], planes
    # A trainer member's loss never restarts a rollout node.
    touched = [x["node"] for x in rep["replacements"]]
    assert not any(n.startswith("rollout") for n in touched), rep["replacements"]
    assert "trainer-1" in touched, rep["replacements"]


def weights_kill(moerl, tmp):
    """Two checkpoint caches; SIGKILL weights-0 mid-run. Its readers turn to weights-1 (or the
    store for a version no cache holds), the trainer pushes the next versions to weights-1,
    the replacement cache copies the versions announced after it came up, and the job loses
    nothing."""
    # A cache's loss does not stall the job: the run must outlast the replacement (1 s restart
    # delay plus start-up, ~25 iterations at ~45 ms each on a quiet machine, 5 Dec).
    run = up_run(moerl, tmp, "weights-kill", "--no-interrupt", "--iterations", "150",
                 "--set", "weights.nodes=2")
    i = run.wait_iteration(4)
    run.kill("weights-0", signal.SIGKILL)
    i, _ = run.wait_line(r">>> replaced weights-0 by weights-0-r1 ", i)
    i = run.wait_iteration(10, i)
    rep = run.finish()
    check_safety(rep)
    check_balanced(rep["accounting"])
    replaced(rep, "weights-0", "killed by SIGKILL")
    w = rep["weights"]
    assert w["bytes_from"]["cache"] > 0, w
    versions = w["versions"]
    assert versions and versions[-1]["version"] == rep["policy_version"], versions
    # The versions made after the kill went through a surviving cache to the rollouts. A
    # rollout fetches the newest version when it starts a unit, so one that a quicker next
    # version overtook may have had no reader at all (CI saw version 39 of 40 unread); every
    # late version that was read was read from a cache, and at least one was read.
    late = [v for v in versions if v["version"] >= versions[-1]["version"] - 3]
    assert all(v["via"] == "cache" for v in late), late
    read = [v for v in late if v["num_readers"] > 0]
    assert read, late
    assert all(v["bytes_from"]["cache"] > 0 for v in read), read


def buffer_killed(moerl, tmp):
    """SIGKILL buffer-0, one of the run's two shards, mid-run. Its groups are re-opened and
    generated again; its successor, a new process under the same name, usually joins within
    the coordinator's 2 s re-join grace for the dead one. The successor takes the shard's
    place: units are leased to it and the trainer is served from it (before 7 Dec the dead
    one's late `shard_lost` took the name from the successor, which then got no unit for the
    rest of the run), and the run finishes with nothing lost or duplicated."""
    run = up_run(moerl, tmp, "buffer-killed", "--no-interrupt", "--iterations", "200")
    i = run.wait_iteration(5)
    run.kill("buffer-0", signal.SIGKILL)
    i, _ = run.wait_line(r">>> recreated buffer-0 ", i)
    rep = run.finish()
    check_safety(rep)
    check_balanced(rep["accounting"])
    replaced(rep, "buffer-0", "killed by SIGKILL")
    shards = [n for n in rep["nodes"] if n["role"] == "buffer" and n["name"] == "buffer-0"]
    live = [n for n in shards if n["state"] == "running"]
    assert len(shards) == 2 and len(live) == 1, shards
    dead = [n for n in shards if n is not live[0]][0]
    assert dead["state"] == "dead", dead
    # The successor holds its share: the ledger leased units to it and the trainer took them.
    assert live[0]["stats"]["received"] > 0 and live[0]["stats"]["served_groups"] > 0, live[0]


def group_coordinator(moerl, tmp):
    """Issue 12: the coordinator of a run whose trainer is a 2-member group is SIGKILLed and
    restarted from its journal. Both members join the new coordinator again and the group forms
    anew, continuing the saved history (incarnation after the saved one, the restart listed as
    a re-formation); the run trains to its end with nothing lost or duplicated."""
    run = up_run(moerl, tmp, "group-coordinator", "--no-interrupt", "--iterations", "200",
                 "--set", "trainer.group_size=2")
    i = run.wait_iteration(3)
    run.kill("coordinator", signal.SIGKILL)
    i, _ = run.wait_line(r">>> recreated coordinator ", i)
    run.wait_resumed(i)  # under the new coordinator
    rep = run.finish()
    check_safety(rep)
    check_balanced(rep["accounting"])
    replaced(rep, "coordinator", "killed by SIGKILL")
    g = {g["name"]: g for g in rep["groups"]}["trainer"]
    assert g["members"] == ["trainer-0", "trainer-1"] and g["state"] in ("formed", "stopped"), g
    restarts = [r for r in g["reformed"] if "coordinator restarted" in r["cause"]]
    assert g["incarnation"] >= 2 and len(restarts) == 1, g
    assert restarts[0]["downtime_s"] is not None, g
    print("trainer group after the coordinator's restart:", json.dumps(g), flush=True)
    touched = [x["node"] for x in rep["replacements"]]
    assert not any(n.startswith("rollout") for n in touched), rep["replacements"]


def rollout_group(moerl, tmp):
    """Issue 12, the rollout half: rollout-0 and rollout-1 are one model instance, the rollout
    group rollout-g0 (one EP rank each, every decode step's dispatch/combine over shm between
    the two processes), beside a trainer group of 2. SIGKILL of the follower (rank 1, found
    through `console nodes --json`) fails the leader's expert-plane waits (its unit returns
    under a new attempt); the Deployment replaces it under a new name, the group re-forms with
    it; then SIGKILL of the leader (rank 0) expires its leases, and the group re-forms again.
    The run ends with nothing lost or duplicated, the ledger balanced, and the trainer group
    never re-formed by either loss. Members on loopback (no network namespaces here)."""
    print("rollout_group: members on loopback (no network namespaces in this test)", flush=True)
    # Long enough for two kills and two re-formations (the pipelined default runs 40
    # iterations in ~8 s).
    run = up_run(moerl, tmp, "rollout-group", "--no-interrupt", "--iterations", "150",
                 "--set", "rollout.group_size=2", "--set", "job.rollout_ep_ranks=1",
                 "--set", "trainer.group_size=2")
    i = run.wait_iteration(3)

    def member(rank):
        for n in run.nodes():
            if n["role"] == "rollout" and n["state"] == "running" and n.get("rank") == rank:
                assert n["group"] == "rollout-g0", n
                return n["name"]
        sys.exit(f"FAIL: no running rollout-g0 member of rank {rank}: {run.nodes()}")

    killed = []
    for rank in (1, 0):
        victim = member(rank)
        run.kill(victim, signal.SIGKILL)
        killed.append(victim)
        i, _ = run.wait_line(r">>> replaced " + re.escape(victim) + r" by ", i)
        i = run.wait_resumed(i)
        # The group formed again: two running members, ranks 0 and 1, the replacement one.
        deadline = time.monotonic() + BOUND_S
        while time.monotonic() < deadline:
            ranks = sorted(n["rank"] for n in run.nodes()
                           if n["role"] == "rollout" and n["state"] == "running"
                           and n.get("group") == "rollout-g0" and n.get("rank") is not None)
            if ranks == [0, 1]:
                break
            time.sleep(0.2)
        else:
            sys.exit(f"FAIL: rollout-g0 did not re-form after {victim}'s loss: {run.nodes()}")
    rep = run.finish()
    check_safety(rep)
    check_balanced(rep["accounting"])
    groups = {g["name"]: g for g in rep["groups"]}
    g = groups["rollout-g0"]
    print("rollout group re-formed:", json.dumps(g["reformed"]), flush=True)
    assert g["role"] == "rollout" and len(g["members"]) == 2, g
    causes = " | ".join(r["cause"] for r in g["reformed"])
    assert all(k in causes for k in killed), (killed, g["reformed"])
    # A rollout member's loss never touches the trainer group: no re-formation of it names a
    # rollout node. (Not "none at all": on a loaded machine a CAF link blip past the re-join
    # grace can declare a live trainer member down, and the group re-forms with that member
    # named as the cause, as trainer_group allows; that is no effect of the rollout kills.)
    t = groups["trainer"]
    assert all(r["cause"].startswith("trainer-") for r in t["reformed"]), t["reformed"]
    touched = [x["node"] for x in rep["replacements"]]
    assert not any(n.startswith("trainer") for n in touched), rep["replacements"]
    for v in killed:
        replaced(rep, v, "killed by SIGKILL")


def rollout_group_drain(moerl, tmp):
    """Issue 12: a Spot notice to the follower (rank 1) of the 2-node rollout group drains the
    whole group: the leader hears the member's deadline in its next round, finishes the units
    that fit, gives back the rest and dissolves the group; the follower's drain completes (exit
    0, a Deployment replacement under a new name), and the group re-forms with it. Nothing is
    lost or duplicated, the ledger balances, the leader is never replaced and the trainer is
    not touched."""
    # The leader goes on while its member drains, so the run must outlast the member's
    # replacement: a 40-iteration run ended 3.3 s in, before it (5 Dec, ~45 ms an iteration).
    run = up_run(moerl, tmp, "rollout-group-drain", "--no-interrupt", "--iterations", "300",
                 "--set", "rollout.group_size=2", "--set", "job.rollout_ep_ranks=1")
    i = run.wait_iteration(3)
    names = {n.get("rank"): n["name"] for n in run.nodes()
             if n["role"] == "rollout" and n.get("group") == "rollout-g0"}
    follower, leader = names[1], names[0]
    r = subprocess.run([moerl, "console", "--connect", run.console_address(), "inject", "spot",
                        follower, "--deadline", "10"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    print(f"[{run.name}] Spot notice -> {follower} (leader {leader})", flush=True)
    i, _ = run.wait_line(r">>> replaced " + re.escape(follower) + r" by ", i)
    run.wait_resumed(i)
    rep = run.finish()
    check_safety(rep)
    check_balanced(rep["accounting"])
    replaced(rep, follower, "exit code 0")
    touched = [x["node"] for x in rep["replacements"]]
    assert leader not in touched and not any(n.startswith("trainer") for n in touched), touched
    assert [x["node"] for x in rep["interruptions"]] == [follower], rep["interruptions"]
    g = {g["name"]: g for g in rep["groups"]}["rollout-g0"]
    print("rollout group re-formed:", json.dumps(g["reformed"]), flush=True)
    # The drain's re-formation, whichever it is: a CAF link blip under load before the notice
    # can put a member's own re-formation first (as trainer_group allows for its group).
    drains = [r for r in g["reformed"] if "drain" in r["cause"]]
    assert drains and drains[0]["downtime_s"] is not None, g["reformed"]


CASES = {"in_turn": in_turn, "trainer_handed": trainer_handed, "case3": case3,
         "two_jobs": two_jobs, "trainer_group": trainer_group,
         "group_coordinator": group_coordinator, "buffer_stopped": buffer_stopped,
         "buffer_stopped_late": buffer_stopped_late,
         "buffer_frozen": buffer_frozen, "console_taken": console_taken,
         "console_moved": console_moved, "same_second": same_second,
         "disk_full": disk_full, "trainer_lost": trainer_lost, "weights_kill": weights_kill,
         "buffer_killed": buffer_killed,
         "rollout_group": rollout_group, "rollout_group_drain": rollout_group_drain}


def print_log_tails(tmp, lines=25):
    """The end of every node log of the case's runs, so a failure in CI (where the run
    directory is gone by the time anyone looks) says what each node was doing."""
    for path in sorted(glob.glob(os.path.join(tmp, "**", "logs", "*.log"), recursive=True)):
        with open(path, errors="replace") as f:
            tail = f.readlines()[-lines:]
        print(f"--- {os.path.relpath(path, tmp)} (last {len(tail)} lines)", flush=True)
        sys.stdout.writelines(tail)
    sys.stdout.flush()


def main(moerl, case):
    keep = bool(os.environ.get("MOERL_KEEP_TMP"))  # keep the run's logs for a post-mortem
    tmp = tempfile.mkdtemp(prefix="moerl-up-faults-")
    if keep:
        print("logs kept under", tmp, flush=True)
    try:
        CASES[case](moerl, tmp)
    except BaseException:  # a failed check exits through SystemExit: keep what explains it
        print(f"FAILED: logs kept under {tmp}", flush=True)
        print_log_tails(tmp)
        raise
    if not keep:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"moerl up {case} checks passed")


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]), sys.argv[2])
