"""User functions served through moerl.worker in external_scorer_test.cpp (reward.worker =
python:worker_functions:NAME; this folder is on PYTHONPATH there)."""
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
