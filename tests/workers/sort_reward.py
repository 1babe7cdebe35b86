"""A user's reward function for the `sort` task, in Python, as `reward.worker` serves it
(python/WORKERS.md). It scores as the task's C++ verifier does: the fraction of the target
(the prompt's digits ascending, then EOS) matched position by position, nothing after the
first EOS counting.

For the tests (tests/workers/python_reward_test.py), each call appends "pid unit seq reward" to
$MOERL_TEST_REWARD_DIR/<pid>.calls, and $MOERL_TEST_REWARD_RAISE_AT=N makes the N-th call of a
worker raise, $MOERL_TEST_REWARD_HANG_AT=N makes it sleep for an hour: each once per run (the
first worker to get there), so a restarted worker serves on."""
import os
import time

from moerl.worker import Sample

TOK_EOS = 2
_calls = 0


def _target(prompt):
    # "^ s d1..dk =": digit tokens are ordered like their values.
    return sorted(prompt[2:-1]) + [TOK_EOS]


def _first_time(what):
    """True for the first worker of the run to ask (a marker file in $MOERL_TEST_REWARD_DIR)."""
    try:
        os.close(os.open(os.path.join(os.environ["MOERL_TEST_REWARD_DIR"], what),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def score(sample: Sample) -> float:
    global _calls
    _calls += 1
    if _calls == int(os.environ.get("MOERL_TEST_REWARD_RAISE_AT", "0")) and _first_time("raised"):
        raise ValueError(f"planted failure at call {_calls} of pid {os.getpid()}")
    if _calls == int(os.environ.get("MOERL_TEST_REWARD_HANG_AT", "0")) and _first_time("hung"):
        time.sleep(3600)
    target = _target(sample.prompt)
    right = 0
    for want, got in zip(target, sample.tokens):
        right += want == got
        if got == TOK_EOS:
            break
    reward = right / len(target)
    out = os.environ.get("MOERL_TEST_REWARD_DIR")
    if out:
        with open(os.path.join(out, f"{os.getpid()}.calls"), "a") as f:
            f.write(f"{os.getpid()} {sample.unit} {sample.seq} {reward}\n")
    return reward
