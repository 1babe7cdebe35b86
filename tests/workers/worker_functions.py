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


def rollout_dies(worker) -> None:
    for _ in worker.leases():
        os._exit(7)
