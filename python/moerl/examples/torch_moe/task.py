"""The `sort` task as the example sees it, without torch: its vocabulary and its verifier. The
reward worker imports only this, so it starts without importing torch (about a second of a
core, at the moment every other worker is importing it too)."""

from __future__ import annotations

from typing import Sequence

VOCAB = 16
TOK_EOS = 2
TOK_DIGIT0 = 3
MAX_NEW = 4  # sort at difficulty 3: three digits and EOS


def sort_reward(prompt: Sequence[int], tokens: Sequence[int]) -> float:
    """The `sort` task's verifier (policy/task_sort.cpp): the fraction of the target (the
    prompt's digits ascending, then EOS) matched position by position, up to the first EOS."""
    target = sorted(prompt[2:-1]) + [TOK_EOS]
    right = 0
    for want, got in zip(target, tokens):
        right += want == got
        if got == TOK_EOS:
            break
    return right / len(target)
