"""The `guess` task's environment written in Python (env.worker = python:guess_env:make), as a
user would: find a hidden number in 0..9 from '+' (higher) and 's' (smaller) replies within
the prompt's turn budget; reward 1 when found. Token ids as policy/vocab.h: BOS 1, digits 3..12,
'+' 13, '=' 14, 's' 15 (external_environment_test.cpp checks it against the C++ one).

$MOERL_TEST_GUESS_TURNS is the turn budget (task.difficulty); with $MOERL_TEST_ENV_DIR set each
reset appends a line to <dir>/<pid>.episodes, and $MOERL_TEST_ENV_RAISE_AT=N makes the N-th step
of the first worker to get there raise (once per run, a marker file in that directory)."""
import os

BOS, DIGIT0, PLUS, EQUALS, SMALLER, VOCAB = 1, 3, 13, 14, 15, 16
_steps = 0


class GuessEnv:
    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.hidden = -1
        self.used = 0
        self.done = False

    def reset(self, seed: int):
        self.hidden, self.used, self.done = seed % 10, 0, False
        out = os.environ.get("MOERL_TEST_ENV_DIR")
        if out:  # one line per episode, for the test to count
            with open(os.path.join(out, f"{os.getpid()}.episodes"), "a") as f:
                f.write(f"{seed}\n")
        return [BOS, DIGIT0 + self.turns, EQUALS]

    def step(self, action):
        global _steps
        _steps += 1
        if _steps == int(os.environ.get("MOERL_TEST_ENV_RAISE_AT", "0")) and _first("raised"):
            raise RuntimeError(f"planted environment failure at step {_steps}")
        if self.done:
            raise ValueError("step after the episode ended")
        if len(action) != 1 or not 0 <= action[0] < VOCAB:
            raise ValueError(f"an action is one token of the vocabulary, got {action}")
        self.used += 1
        t = action[0]
        if not DIGIT0 <= t < DIGIT0 + 10:
            self.done = True
            return [], 0.0, True  # forfeit
        if t - DIGIT0 == self.hidden:
            self.done = True
            return [], 1.0, True
        if self.used >= self.turns:
            self.done = True
            return [], 0.0, True
        return [PLUS if t - DIGIT0 < self.hidden else SMALLER], 0.0, False


def _first(what: str) -> bool:
    try:
        os.close(os.open(os.path.join(os.environ["MOERL_TEST_ENV_DIR"], what),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except (KeyError, FileExistsError):
        return False


def make(task: str) -> GuessEnv:
    if task != "guess":
        raise ValueError(f"this worker runs the guess task, not {task!r}")
    return GuessEnv(int(os.environ.get("MOERL_TEST_GUESS_TURNS", "4")))
