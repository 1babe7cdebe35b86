"""``moerl.worker``: a user's process as the worker of one role on a moerl node.

The node that serves the role starts this process and owns everything that makes the work
exactly-once (the lease, its fencing token, admission by the buffer shards, the ledger); the
process only computes. They talk over the local worker protocol (``workers/PROTOCOL.md``):
length-prefixed JSON frames on the socket the node passes as ``MOERL_WORKER_FD``. See
``python/WORKERS.md``.

Reward::

    def score(sample: moerl.worker.Sample) -> float: ...
    # reward.worker: python:my_pkg.my_module:score

An exception in ``score`` fails that one sample (its traceback goes to the node's log; the
sample's unit runs again under a new lease); the worker keeps serving.

Rollout::

    def main(worker: moerl.worker.RolloutWorker) -> None:
        for lease in worker.leases():          # one leased work unit at a time
            for group in lease.groups:         # group.group_id, group.prompt (token ids)
                for i in range(lease.group_size):
                    tokens, logprobs = my_generate(group.prompt, lease.sampling)
                    lease.submit(group.group_id, i, tokens, logprobs)
            lease.done()                        # (also implied by asking for the next lease)
            if worker.notice:                   # a Spot notice / drain: finish or give back
                break
    # rollout.worker: python:my_pkg.my_module:main

``lease.submit`` returns once the node delivered the sample towards its shard; a sample the
node refuses (a stale fencing token, a unit not leased, a duplicate, garbage) raises
``SampleRefused`` naming the reason, and nothing of it is admitted.
"""

import importlib
import json
import math
import os
import socket
import struct
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional

PROTOCOL_VERSION = 1
_MAX_FRAME_BYTES = 16 << 20  # the node's kMaxFrameBytes


class ProtocolError(RuntimeError):
    """The node refused what this process sent, or sent something this SDK does not know."""


class _Channel:
    """The worker's end of the node's socketpair. One thread uses it."""

    def __init__(self, fd: int) -> None:
        self._sock = socket.socket(fileno=fd)
        self._buf = b""

    @classmethod
    def from_env(cls) -> "_Channel":
        """The node's socket: MOERL_WORKER_FD when the node started this process, else
        MOERL_WORKER_SOCKET, the path a node configured with ``attach:PATH`` listens on."""
        fd = os.environ.get("MOERL_WORKER_FD")
        if fd is not None and fd.isdigit():
            return cls(int(fd))
        path = os.environ.get("MOERL_WORKER_SOCKET")
        if path:
            # The node may start after this process: try for MOERL_WORKER_CONNECT_TIMEOUT_S.
            deadline = time.monotonic() + float(os.environ.get("MOERL_WORKER_CONNECT_TIMEOUT_S",
                                                               "60"))
            while True:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.connect(path)
                    return cls(sock.detach())
                except OSError as e:
                    sock.close()
                    if time.monotonic() >= deadline:
                        raise ProtocolError(
                            f"MOERL_WORKER_SOCKET={path}: cannot connect to the node ({e}); is "
                            f"its worker key attach:{path}?") from None
                    time.sleep(0.2)
        raise ProtocolError(
            "MOERL_WORKER_FD is not set: this process must be started by a moerl node "
            "(reward.worker / rollout.worker), or attach to one with MOERL_WORKER_SOCKET=PATH "
            "(the node's worker key set to attach:PATH)")

    def send(self, type_: str, **fields: Any) -> None:
        body = json.dumps({"v": PROTOCOL_VERSION, "type": type_, **fields},
                          allow_nan=False).encode()
        self._sock.sendall(struct.pack("<I", len(body)) + body)

    def recv(self) -> Optional[Dict[str, Any]]:
        """The next message, or None once the node closed its end (it stopped this worker)."""
        while True:
            if len(self._buf) >= 4:
                (n,) = struct.unpack("<I", self._buf[:4])
                if n > _MAX_FRAME_BYTES:
                    raise ProtocolError(f"frame of {n} bytes from the node is over the limit")
                if len(self._buf) >= 4 + n:
                    body, self._buf = self._buf[4:4 + n], self._buf[4 + n:]
                    msg = json.loads(body)
                    if msg.get("v") != PROTOCOL_VERSION:
                        raise ProtocolError(f"node speaks protocol {msg.get('v')!r}; "
                                            f"this SDK speaks {PROTOCOL_VERSION}")
                    return msg
            chunk = self._sock.recv(1 << 16)
            if not chunk:
                return None
            self._buf += chunk


def _handshake(ch: _Channel, role: str) -> None:
    ch.send("hello", role=role, pid=os.getpid())
    msg = ch.recv()
    if msg is None:
        raise ProtocolError("the node closed the channel before welcoming this worker")
    if msg.get("type") != "welcome":
        raise ProtocolError(f"the node refused this worker: {msg}")


def _log_refusal(msg: Dict[str, Any]) -> None:
    print(f"moerl.worker: the node refused a message ({msg.get('reason')}): {msg.get('detail')}",
          file=sys.stderr, flush=True)


@dataclass
class Sample:
    """One generated response, as a reward function sees it."""

    unit: int  #: the work unit it was generated for
    seq: int  #: its index inside the unit's samples
    prompt: List[int]  #: prompt token ids
    tokens: List[int]  #: generated token ids


def _as_reward(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"score() returned {value!r} ({type(value).__name__}); expected a float")
    value = float(value)
    if not math.isfinite(value) or abs(value) > 3.4028234663852886e38:
        raise ValueError(f"score() returned {value!r}; expected a finite float32")
    return value


def serve_reward(score: Callable[[Sample], float]) -> None:
    """Serves ``score`` to the reward node that started this process, until it stops us."""
    if not callable(score):
        raise TypeError(f"score is {score!r}; expected a callable (Sample) -> float")
    ch = _Channel.from_env()
    _handshake(ch, "reward")
    while True:
        msg = ch.recv()
        if msg is None:
            return
        kind = msg.get("type")
        if kind == "error":
            _log_refusal(msg)
            continue
        if kind != "score":
            raise ProtocolError(f"a reward worker got a {kind!r} message")
        sample = Sample(unit=msg["unit"], seq=msg["seq"], prompt=msg["prompt"],
                        tokens=msg["tokens"])
        try:
            reward = _as_reward(score(sample))
        except Exception as e:  # the user's function failed this sample, not the worker
            ch.send("score_error", id=msg["id"], error=f"{type(e).__name__}: {e}",
                    traceback=traceback.format_exc())
            continue
        ch.send("score_result", id=msg["id"], reward=reward)


class SampleRefused(RuntimeError):
    """The node refused a submitted sample; ``reason`` is the protocol's name for why
    (``stale_fencing_token``, ``unknown_unit``, ``duplicate``, ``malformed``, ...)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class LeaseClosed(RuntimeError):
    """The node ended the lease (its deadline passed, the node drains or stops); ``status``
    is what it reported: ``finished``, ``returned`` or ``failed``."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(f"lease closed ({status}): {reason}")
        self.status = status
        self.reason = reason


@dataclass
class Notice:
    """A Spot notice or drain of the node: it stops by ``deadline_unix_ms`` (wall clock).
    A lease not done by then goes back to the queue, exactly as a native rollout's."""

    deadline_unix_ms: int
    reason: str

    def seconds_left(self) -> float:
        return self.deadline_unix_ms / 1000.0 - time.time()


@dataclass
class Group:
    """One prompt group of a lease: generate ``lease.group_size`` responses to ``prompt``."""

    group_id: int
    prompt: List[int]


class Lease:
    """One leased work unit. ``attempt`` is its fencing token: samples carry it, and the node
    refuses any whose token is not the lease's current one."""

    def __init__(self, worker: "RolloutWorker", msg: Dict[str, Any]) -> None:
        self._worker = worker
        self.unit: int = msg["unit"]
        self.attempt: int = msg["attempt"]
        self.policy_version: int = msg["policy_version"]
        self.group_size: int = msg["group_size"]
        self.deadline_unix_ms: int = msg["deadline_unix_ms"]
        self.sampling: Dict[str, Any] = msg.get("sampling", {})
        self.groups: List[Group] = [Group(g["group_id"], g["prompt"]) for g in msg["groups"]]
        self.closed: Optional[str] = None  # the status once the node closed it

    @property
    def fencing_token(self) -> int:
        return self.attempt

    def submit(self, group_id: int, index: int, tokens: List[int], logprobs: List[float]) -> None:
        """Submits response ``index`` (0 <= index < group_size) of group ``group_id``: its token
        ids and the behaviour log-probability of each under ``policy_version``. Returns when
        the node delivered it; raises SampleRefused (nothing admitted) or LeaseClosed."""
        self._submit(self.unit, self.attempt, group_id, index, tokens, logprobs)

    def _submit(self, unit: int, attempt: int, group_id: int, index: int, tokens: Any,
                logprobs: Any) -> None:
        # Fields as given: the node checks them all, so tests can send what a buggy worker
        # would (another unit, an old attempt, garbage) through the same path.
        if self.closed is not None:
            raise LeaseClosed(self.closed, "submit after the lease was closed")
        self._worker._ch.send("sample", unit=unit, attempt=attempt, group_id=group_id,
                              index=index, tokens=_plain(tokens), logprobs=_plain(logprobs))
        reply = self._worker._wait({"sample_ack", "error"}, self)
        if reply["type"] == "error":
            raise SampleRefused(reply.get("reason", "?"), reply.get("detail", ""))

    def done(self) -> str:
        """Ends the lease after its last sample; returns the node's status for it."""
        return self._end("lease_done", "")

    def give_back(self, reason: str = "") -> str:
        """Returns the lease unfinished (e.g. on a notice): the unit is pending again at once."""
        return self._end("give_back", reason)

    def _end(self, kind: str, reason: str) -> str:
        if self.closed is None:
            self._worker._ch.send(kind, unit=self.unit, attempt=self.attempt, reason=reason)
            self._worker._wait({"lease_closed"}, self)
        return self.closed or "?"


def _plain(x: Any) -> Any:
    """Lists of Python numbers from lists or tensors (``tolist()``)."""
    return x.tolist() if hasattr(x, "tolist") else x


class RolloutWorker:
    """The rollout node's side of this process: leases, submissions, notices."""

    def __init__(self, on_notice: Optional[Callable[[Notice], None]] = None) -> None:
        self._ch = _Channel.from_env()
        self._ch.send("hello", role="rollout", pid=os.getpid())
        welcome = self._ch.recv()
        if welcome is None or welcome.get("type") != "welcome":
            raise ProtocolError(f"the node refused this worker: {welcome}")
        self.vocab_size: int = welcome.get("vocab_size", 0)  #: token ids must be below (0: any)
        self.max_completion_tokens: int = welcome.get("max_completion_tokens", 0)
        self.notice: Optional[Notice] = None  #: set once the node got a Spot notice / drains
        self.on_notice = on_notice
        self._current: Optional[Lease] = None

    def leases(self) -> Iterator[Lease]:
        """Each lease the node hands this worker, until the node stops it. Asking for the next
        one ends the previous with ``done()`` if the loop did not."""
        while True:
            if self._current is not None and self._current.closed is None:
                self._current.done()
            msg = self._wait({"lease"}, None)
            if msg is None:
                return
            self._current = Lease(self, msg)
            yield self._current

    def _wait(self, kinds: set, lease: Optional[Lease]) -> Optional[Dict[str, Any]]:
        """The next message of one of `kinds`, handling notices and lease closings on the way."""
        while True:
            msg = self._ch.recv()
            if msg is None:
                if lease is None:
                    return None
                raise LeaseClosed("failed", "the node closed the channel")
            kind = msg.get("type")
            if kind == "notice":
                self.notice = Notice(msg["deadline_unix_ms"], msg.get("reason", ""))
                if self.on_notice is not None:
                    self.on_notice(self.notice)
                continue
            if kind == "lease_closed":
                current = self._current
                if current is not None and (current.unit, current.attempt) == (
                        msg["unit"], msg["attempt"]):
                    current.closed = msg.get("status", "?")
                    if "lease_closed" not in kinds and lease is current:
                        raise LeaseClosed(current.closed, msg.get("reason", ""))
                if "lease_closed" in kinds:
                    return msg
                continue
            if kind in kinds:
                return msg
            if kind == "error":
                _log_refusal(msg)
                continue
            raise ProtocolError(f"a rollout worker got an unexpected {kind!r} message")


def serve_rollout(main: Callable[[RolloutWorker], None]) -> None:
    """Runs ``main(worker)`` for the rollout node that started this process."""
    if not callable(main):
        raise TypeError(f"main is {main!r}; expected a callable (RolloutWorker) -> None")
    main(RolloutWorker())


def _observation(value: Any, what: str) -> Dict[str, Any]:
    """reset()/step() results as the wire's {tokens, reward, done}: a token list (reward 0, not
    done) or a (tokens, reward, done) tuple."""
    if isinstance(value, tuple) and len(value) == 3:
        tokens, reward, done = value
    else:
        tokens, reward, done = value, 0.0, False
    tokens = _plain(tokens)
    if not isinstance(tokens, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**32 for t in tokens):
        raise TypeError(f"{what} returned tokens {tokens!r}; expected a list of token ids")
    if not isinstance(done, bool):
        raise TypeError(f"{what} returned done={done!r}; expected a bool")
    return {"tokens": tokens, "reward": _as_reward(reward), "done": done}


def serve_env(factory: Callable[[str], Any]) -> None:
    """Serves environments to the env node that started this process: ``factory(task)`` makes
    one per episode (a session), with ``reset(seed)`` -> observation tokens (or a (tokens,
    reward, done) tuple) and ``step(action: List[int])`` -> (tokens, reward, done). An
    exception fails that reset or step (its traceback in the node's log), never the worker."""
    if not callable(factory):
        raise TypeError(f"factory is {factory!r}; expected a callable (task) -> environment")
    ch = _Channel.from_env()
    _handshake(ch, "env")
    sessions: Dict[int, Any] = {}
    while True:
        msg = ch.recv()
        if msg is None:
            return
        kind = msg.get("type")
        if kind == "error":
            _log_refusal(msg)
            continue
        if kind == "env_close":
            sessions.pop(msg.get("session"), None)
            continue
        if kind not in ("env_reset", "env_step"):
            raise ProtocolError(f"an env worker got a {kind!r} message")
        try:
            if kind == "env_reset":
                env = factory(msg["task"])
                obs = _observation(env.reset(msg["seed"]), "reset()")
                sessions[msg["session"]] = env
            else:
                env = sessions.get(msg["session"])
                if env is None:
                    raise KeyError(f"unknown session {msg['session']} (ended, or never reset)")
                obs = _observation(env.step(msg["action"]), "step()")
                if obs["done"]:
                    sessions.pop(msg["session"], None)
        except Exception as e:  # the user's environment failed this step, not the worker
            ch.send("env_error", id=msg["id"], error=f"{type(e).__name__}: {e}",
                    traceback=traceback.format_exc())
            continue
        ch.send("env_result", id=msg["id"], **obs)


def _load(target: str) -> Callable[..., Any]:
    module, _, name = target.rpartition(":")
    if not module or not name:
        raise ValueError(f"worker target {target!r}; expected PKG.MODULE:FUNCTION")
    fn = getattr(importlib.import_module(module), name, None)
    if fn is None:
        raise ValueError(f"module {module!r} has no attribute {name!r}")
    return fn


def main(argv: List[str]) -> int:
    """``python -m moerl.worker ROLE PKG.MODULE:FUNCTION`` (what ``python:`` workers run)."""
    if len(argv) != 2 or argv[0] not in _ROLES:
        print(f"usage: python -m moerl.worker {{{'|'.join(_ROLES)}}} PKG.MODULE:FUNCTION",
              file=sys.stderr)
        return 2
    role, target = argv
    _ROLES[role](_load(target))
    return 0


_ROLES: Dict[str, Callable[[Callable[..., Any]], None]] = {
    "reward": serve_reward,
    "rollout": serve_rollout,
    "env": serve_env,
}

if __name__ == "__main__":
    # Run through the importable module, so a user's `from moerl.worker import Sample` and this
    # loop share one set of classes (not a second copy living in __main__).
    from moerl.worker import main as _main

    sys.exit(_main(sys.argv[1:]))
