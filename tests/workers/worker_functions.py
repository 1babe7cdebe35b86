"""User functions served through moerl.worker in external_scorer_test.cpp (reward.worker =
python:worker_functions:NAME; this folder is on PYTHONPATH there)."""
import os
import time

from moerl.worker import Sample

TOK_EOS = 2


def sort_score(sample: Sample) -> float:
    target = sorted(sample.prompt[2:-1]) + [TOK_EOS]
    right = 0
    for want, got in zip(target, sample.tokens):
        right += want == got
        if got == TOK_EOS:
            break
    return right / len(target)


def raise_on_empty(sample: Sample) -> float:
    return 1.0 / len(sample.tokens)  # ZeroDivisionError for an empty response


def hang_on_empty(sample: Sample) -> float:
    if not sample.tokens:
        time.sleep(3600)
    return 1.0


def returns_text(sample: Sample) -> str:
    return "good"


def rollout_probe(worker) -> None:
    """Per lease: what a buggy worker sends (each refused by name), one real sample and its
    duplicate; then gives the lease back with the refusal names (and any notice) as reason."""
    from moerl.worker import SampleRefused

    for lease in worker.leases():
        g = lease.groups[0]
        reasons = []
        tries = [dict(attempt=lease.attempt + 1), dict(unit=lease.unit + 1000),
                 dict(index=lease.group_size), dict(group_id=g.group_id + 1000),
                 dict(tokens=[worker.vocab_size]), dict(tokens=[3] * 99, logprobs=[-1.0] * 99)]
        for override in tries:
            fields = dict(unit=lease.unit, attempt=lease.attempt, group_id=g.group_id, index=0,
                          tokens=[3, 2], logprobs=[-1.0, -0.5])
            fields.update(override)
            try:
                lease._submit(**fields)
                reasons.append("accepted")
            except SampleRefused as e:
                reasons.append(e.reason)
        lease.submit(g.group_id, 0, [3, 2], [-1.0, -0.5])
        try:
            lease.submit(g.group_id, 0, [3, 2], [-1.0, -0.5])
            reasons.append("accepted")
        except SampleRefused as e:
            reasons.append(e.reason)
        if worker.notice:
            reasons.append(f"notice {worker.notice.deadline_unix_ms} {worker.notice.reason}")
        lease.give_back(",".join(reasons))


def rollout_batch_probe(worker) -> None:
    """Per lease: one good batch (group 1, all indexes) and batches each with one bad response;
    gives the lease back with the outcome of each as reason."""
    from moerl.worker import SampleRefused

    for lease in worker.leases():
        g0, g1 = lease.groups[0].group_id, lease.groups[1].group_id
        n = lease.group_size
        good = [(g1, i, [i + 1], [-0.5]) for i in range(n)]
        tries = [
            lambda: lease.submit_many(good),
            # g0's response 0 is fine, but the repeat of it inside the message is not
            lambda: lease.submit_many([(g0, 0, [1], [-1.0]), (g0, 0, [2], [-1.0])]),
            # a fresh response beside one already admitted above
            lambda: lease.submit_many([(g0, 1, [1], [-1.0]), (g1, 0, [1], [-1.0])]),
            lambda: lease.submit_group(g0, [[1]] * (n + 1), [[-1.0]] * (n + 1)),  # index n
            lambda: worker._ch.send("samples", unit=lease.unit, attempt=lease.attempt + 1,
                                    samples=[dict(group_id=g0, index=2, tokens=[1],
                                                  logprobs=[-1.0])]) or _reply(worker, lease),
            lambda: lease.submit_many([]),  # an empty batch
        ]
        reasons = []
        for t in tries:
            try:
                t()
                reasons.append("accepted")
            except SampleRefused as e:
                reasons.append(e.reason)
        lease.give_back(",".join(reasons))


def _reply(worker, lease) -> None:
    from moerl.worker import SampleRefused

    reply = worker._wait({"samples_ack", "error"}, lease)
    if reply["type"] == "error":
        raise SampleRefused(reply.get("reason", "?"), reply.get("detail", ""))


def rollout_dies(worker) -> None:
    for _ in worker.leases():
        os._exit(7)
