"""Users' rollout workers (rollout.worker = python:rollout_workers:NAME), for
python_rollout_test.py. They generate with a trivial policy: every token drawn uniformly
from the job's vocabulary until EOS or the job's length limit, so each behaviour logprob is
-log(vocab) exactly. What they test is the protocol, not the policy.

Each process appends one line per lease it finished to $MOERL_TEST_ROLLOUT_DIR/<pid>.leases
("unit attempt samples status"), and one line per notice to <pid>.notices. Before it closes a
lease it appends "unit attempt samples closing": a worker killed between sending done and
writing its status leaves that line last, and the node may have committed the unit."""
import json
import math
import os
import random
import struct

from moerl.worker import LeaseClosed, RolloutWorker, SampleRefused

TOK_EOS = 2


def _out(name: str) -> str:
    return os.path.join(os.environ["MOERL_TEST_ROLLOUT_DIR"], f"{os.getpid()}.{name}")


def _generate(rng: random.Random, worker: RolloutWorker):
    vocab = worker.vocab_size or 16
    limit = worker.max_completion_tokens or 8
    tokens = []
    while len(tokens) < limit:
        tokens.append(rng.randrange(vocab))
        if tokens[-1] == TOK_EOS:
            break
    return tokens, [-math.log(vocab)] * len(tokens)


def _note_notice(notice) -> None:
    with open(_out("notices"), "a") as f:
        f.write(f"{notice.deadline_unix_ms} {notice.reason}\n")


def _first_time(what: str) -> bool:
    try:
        os.close(os.open(os.path.join(os.environ["MOERL_TEST_ROLLOUT_DIR"], what),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def _refusals_first(lease, rng, worker) -> None:
    """What a buggy worker sends, each refused by name; the reasons go to refusals.txt."""
    g = lease.groups[0].group_id
    tokens, logprobs = _generate(rng, worker)
    tries = [
        ("stale token", dict(unit=lease.unit, attempt=lease.attempt + 1)),
        ("unit never leased", dict(unit=lease.unit + 10**9, attempt=lease.attempt)),
        ("index past the group", dict(index=lease.group_size)),
        ("token outside the vocabulary", dict(tokens=[worker.vocab_size + 5])),
        ("a logprob per token missing", dict(logprobs=logprobs[:-1] if len(logprobs) > 1 else [])),
        ("text for tokens", dict(tokens="garbage")),
        ("positive logprob", dict(logprobs=[0.5] * len(tokens))),
    ]
    lines = []
    for what, override in tries:
        fields = dict(unit=lease.unit, attempt=lease.attempt, group_id=g, index=0, tokens=tokens,
                      logprobs=logprobs)
        fields.update(override)
        try:
            lease._submit(**fields)
            lines.append(f"{what}: ACCEPTED")
        except SampleRefused as e:
            lines.append(f"{what}: {e.reason}")
    for what, body in [("not JSON", b"not json"),
                       ("protocol version 7", json.dumps({"v": 7, "type": "sample"}).encode())]:
        worker._ch._sock.sendall(struct.pack("<I", len(body)) + body)
        lines.append(f"{what}: {worker._wait({'error'}, lease).get('reason')}")
    lease.submit(g, 0, tokens, logprobs)  # the real one
    try:
        lease.submit(g, 0, tokens, logprobs)
        lines.append("duplicate: ACCEPTED")
    except SampleRefused as e:
        lines.append(f"duplicate: {e.reason}")
    with open(os.path.join(os.environ["MOERL_TEST_ROLLOUT_DIR"], "refusals.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def _serve(worker: RolloutWorker, misbehave: bool) -> None:
    rng = random.Random(os.getpid())
    worker.on_notice = _note_notice
    for lease in worker.leases():
        submitted = 0
        try:
            first = misbehave and _first_time("misbehaved")
            if first:
                _refusals_first(lease, rng, worker)
                submitted += 1  # its one real sample
            for gi, group in enumerate(lease.groups):
                for i in range(lease.group_size):
                    if first and gi == 0 and i == 0:
                        continue  # submitted above
                    lease.submit(group.group_id, i, *_generate(rng, worker))
                    submitted += 1
            with open(_out("leases"), "a") as f:
                f.write(f"{lease.unit} {lease.attempt} {submitted} closing\n")
            status = lease.done()
        except LeaseClosed as e:
            status = e.status
        with open(_out("leases"), "a") as f:
            f.write(f"{lease.unit} {lease.attempt} {submitted} {status}\n")


def uniform(worker: RolloutWorker) -> None:
    _serve(worker, misbehave=False)


def misbehaving(worker: RolloutWorker) -> None:
    _serve(worker, misbehave=True)
