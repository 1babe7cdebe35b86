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

In a rollout group (``rollout.group_size`` N > 1) every member node starts one such process:
``worker.rank``, ``worker.world_size`` and ``worker.process_group`` (a gloo group of the N
processes) as for a trainer group; every rank's ``leases()`` yields rank 0's leases, and only
rank 0 submits (``NotRankZero`` elsewhere).
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
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

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
        if kind == "score":
            out = _score_one(score, msg)
            if "error" in out:
                ch.send("score_error", id=msg["id"], **out)
            else:
                ch.send("score_result", id=msg["id"], **out)
        elif kind == "score_batch":
            # Several responses (usually a group) in one round trip; `score` is still called
            # once per response, and an exception fails only that response.
            ch.send("score_batch_result", id=msg["id"],
                    results=[_score_one(score, item) for item in msg["items"]])
        else:
            raise ProtocolError(f"a reward worker got a {kind!r} message")


def _score_one(score: Callable[[Sample], float], item: Dict[str, Any]) -> Dict[str, Any]:
    """``{"reward": r}``, or ``{"error", "traceback"}`` when the user's function raised."""
    sample = Sample(unit=item["unit"], seq=item["seq"], prompt=item["prompt"],
                    tokens=item["tokens"])
    try:
        return {"reward": _as_reward(score(sample))}
    except Exception as e:  # the user's function failed this sample, not the worker
        return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}


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
        self._worker._rank_zero_only("submit")
        if self.closed is not None:
            raise LeaseClosed(self.closed, "submit after the lease was closed")
        self._worker._ch.send("sample", unit=unit, attempt=attempt, group_id=group_id,
                              index=index, tokens=_plain(tokens), logprobs=_plain(logprobs))
        reply = self._worker._wait({"sample_ack", "error"}, self)
        if reply["type"] == "error":
            raise SampleRefused(reply.get("reason", "?"), reply.get("detail", ""))

    def submit_group(self, group_id: int, tokens: List[Any], logprobs: List[Any]) -> None:
        """Submits responses 0..len(tokens)-1 of group ``group_id`` in one message (one round
        trip to the node for the whole group instead of one per response): ``tokens[i]`` and
        ``logprobs[i]`` as for :meth:`submit`. Admitted whole or refused whole (SampleRefused
        names the first bad response; nothing of the message is admitted)."""
        if len(tokens) != len(logprobs):
            raise ValueError(f"submit_group: {len(tokens)} token lists and {len(logprobs)} "
                             f"logprob lists; expected one of each per response")
        self.submit_many([(group_id, i, t, lp) for i, (t, lp) in enumerate(zip(tokens, logprobs))])

    def submit_many(self, samples: List[Any]) -> None:
        """Submits several responses in one message: each a ``(group_id, index, tokens,
        logprobs)`` tuple, as for :meth:`submit`, of any groups of the lease. Returns when the
        node delivered them all; admitted whole or refused whole (SampleRefused)."""
        self._worker._rank_zero_only("submit_many")
        if self.closed is not None:
            raise LeaseClosed(self.closed, "submit after the lease was closed")
        items = [dict(group_id=g, index=i, tokens=_plain(t), logprobs=_plain(lp))
                 for g, i, t, lp in samples]
        self._worker._ch.send("samples", unit=self.unit, attempt=self.attempt, samples=items)
        reply = self._worker._wait({"samples_ack", "error"}, self)
        if reply["type"] == "error":
            raise SampleRefused(reply.get("reason", "?"), reply.get("detail", ""))

    def done(self) -> str:
        """Ends the lease after its last sample; returns the node's status for it."""
        return self._end("lease_done", "")

    def give_back(self, reason: str = "") -> str:
        """Returns the lease unfinished (e.g. on a notice): the unit is pending again at once."""
        return self._end("give_back", reason)

    def _end(self, kind: str, reason: str) -> str:
        if self._worker.rank > 0:
            # Rank 0 ends the group's lease; here it only stops being the current one.
            if self.closed is None:
                self.closed = "rank 0's"
            return self.closed
        if self.closed is None:
            self._worker._ch.send(kind, unit=self.unit, attempt=self.attempt, reason=reason)
            self._worker._wait({"lease_closed"}, self)
        return self.closed or "?"


def _plain(x: Any) -> Any:
    """Lists of Python numbers from lists or tensors (``tolist()``)."""
    return x.tolist() if hasattr(x, "tolist") else x


class WeightsUnavailable(RuntimeError):
    """The node could not give this worker the policy version it asked for."""


class NotRankZero(RuntimeError):
    """A rollout group's rank > 0 tried to submit: rank 0 submits the group's samples (every
    rank generates its share, gathers it to rank 0, and rank 0 submits)."""


class CollectiveMismatch(RuntimeError):
    """The ranks of a group (a trainer group, a rollout group) did not make the same call:
    every rank must make the SDK's collective calls (``batches()``/``leases()`` each step of
    them, ``publish()``, ``checkpoint()``) in the same order."""


class _Collectives:
    """Checks that every rank of a group is at the same SDK collective call (op and count)
    before its payload moves, so ranks that disagree raise CollectiveMismatch naming what each
    called instead of pairing unrelated collectives."""

    def __init__(self, what: str, rule: str) -> None:
        self._what = what  # "trainer group", "rollout group"
        self._rule = rule  # which calls must line up
        self._calls = 0

    def check(self, op: str, world_size: int, process_group: Any) -> None:
        import torch.distributed as dist
        self._calls += 1
        seen: List[Any] = [None] * world_size
        dist.all_gather_object(seen, (op, self._calls), group=process_group)
        if any(tuple(x) != (op, self._calls) for x in seen):
            calls = ", ".join(f"rank {r} called {x[0]}() (its collective call #{x[1]})"
                              for r, x in enumerate(seen))
            raise CollectiveMismatch(f"{self._what}: {calls}; {self._rule}")


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
        self._weights: Optional[Tuple[int, Dict[str, Any], Any]] = None  # (version, tensors, mmap)
        group = welcome.get("group")
        self.rank: int = int(group["rank"]) if group else 0  #: this process's rank in the group
        self.world_size: int = int(group["world_size"]) if group else 1  #: ranks in the group
        #: the gloo process group of the rollout group's ranks (None for a worker of its own)
        self.process_group: Any = None
        self._collectives = _Collectives(
            "rollout group", "every rank must iterate leases() in step (one lease each time)")
        if self.world_size > 1:
            self.process_group = _join_group(group, "rollout group", "worker.process_group")

    def _rank_zero_only(self, call: str) -> None:
        if self.rank > 0:
            raise NotRankZero(
                f"{call}() on rollout group rank {self.rank}: only rank 0 submits the group's "
                f"samples; gather this rank's rows to rank 0 (worker.process_group) and submit "
                f"there")

    def leases(self) -> Iterator[Lease]:
        """Each lease the node hands this worker, until the node stops it. Asking for the next
        one ends the previous with ``done()`` if the loop did not. In a rollout group rank 0
        asks its node and broadcasts each lease (with its notice, and the end) to every rank,
        so every rank's loop sees the same leases; rank 0 submits and ends them."""
        while True:
            if self._current is not None and self._current.closed is None:
                self._current.done()
            msg: Optional[Dict[str, Any]] = None
            if self.rank == 0:
                msg = self._wait({"lease"}, None)
            if self.world_size > 1:
                import torch.distributed as dist
                self._collectives.check("leases", self.world_size, self.process_group)
                notice = (self.notice.deadline_unix_ms, self.notice.reason) if self.notice else None
                box = [(msg, notice)]
                dist.broadcast_object_list(box, src=0, group=self.process_group)
                msg, notice = box[0]
                if self.rank > 0 and notice is not None and self.notice is None:
                    self.notice = Notice(*notice)
                    if self.on_notice is not None:
                        self.on_notice(self.notice)
            if msg is None:
                return
            self._current = Lease(self, msg)
            yield self._current

    def weights(self, version: int) -> Dict[str, Any]:
        """Policy `version` (the one the lease in hand names) as name -> torch tensor, as the
        trainer published it (``Trainer.publish``; safetensors layout, ``moerl.tensors``). The
        node writes the version, verified against its content hash by its weight feed, once
        into shared memory; this maps it copy-on-write (no copy of the bytes) and checks the
        mapping's sha256 before use: a mismatch asks the node to write it again, once, then
        raises ``WeightsUnavailable``. Version 0 (nothing published yet) raises too: generate
        with your own initial weights. The newest mapping is kept for the next call."""
        if self._weights is not None and self._weights[0] == version:
            return self._weights[1]
        import hashlib
        from moerl import tensors as _t
        for refetch in (False, True):
            self._ch.send("weights", version=version, refetch=refetch)
            msg = self._wait({"weights_ready", "weights_error", "error"}, self._current)
            if msg is None or msg.get("type") != "weights_ready":
                what = (msg or {}).get("error") or (msg or {}).get("detail") or "channel closed"
                raise WeightsUnavailable(f"policy version {version}: {what}")
            m, named, _ = _t.map_file(msg["path"])
            if len(m) == msg["bytes"] and hashlib.sha256(m).hexdigest() == msg["sha256"]:
                self._weights = (version, named, m)
                return named
            print(f"moerl.worker: policy version {version} at {msg['path']} does not match its "
                  f"sha256; asking the node to write it again", file=sys.stderr, flush=True)
        raise WeightsUnavailable(f"policy version {version}: the node's copy does not match its "
                                 f"sha256 twice")

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


@dataclass
class TrainSample:
    """One response of a group as its shard handed it to the trainer."""
    index: int                 # its index in the group
    tokens: List[int]          # the generated token ids
    logprobs: List[float]      # the behaviour logprob of each token (the rollout's policy)
    reward: float
    policy_version: int        # the version it was generated with


@dataclass
class TrainGroup:
    """A whole prompt group, handed exactly once (unless the trainer dies holding it)."""
    group_id: int
    unit: int
    prompt: List[int]
    samples: List[TrainSample]

    @property
    def rewards(self) -> List[float]:
        return [s.reward for s in self.samples]

    def advantages(self, eps: float = 1e-6) -> List[float]:
        """GRPO's group-relative advantages: (reward - group mean) / (group std + eps)."""
        r = self.rewards
        mean = sum(r) / len(r)
        std = math.sqrt(sum((x - mean) ** 2 for x in r) / len(r))
        return [(x - mean) / (std + eps) for x in r]


@dataclass
class Batch:
    groups: List[TrainGroup]
    flush: bool  # no batch came for a while: train on what you hold (groups may be empty)


class PublishFailed(RuntimeError):
    """The node could not make a version or checkpoint of what this trainer sent."""


class Trainer:
    """The trainer node's side of this process: batches of whole groups in, policy versions and
    checkpoints out. Groups handed since the last ``publish`` are held by this process; a
    publish covers every group handed before it (the node then confirms them trained). If the
    process dies, the groups it held are served again to its successor.

    In a trainer group (``trainer.group_size`` N > 1, python/WORKERS.md "Trainer groups") each
    member node starts one such process: ``rank`` and ``world_size`` say its place and
    ``process_group`` is a ready gloo group of the N processes (torch.distributed's default
    group, made here), for ``moerl.ep.Buffer(trainer.process_group, ...)`` and the dense
    gradients' all-reduce. ``batches()``, ``publish()`` and ``checkpoint()`` are then
    collective: every rank gets rank 0's batches, ``publish`` gathers every rank's tensors to
    rank 0, which publishes their union, and ``checkpoint`` writes each rank's own shard."""

    def __init__(self) -> None:
        self._ch = _Channel.from_env()
        self._ch.send("hello", role="trainer", pid=os.getpid())
        welcome = self._ch.recv()
        if welcome is None or welcome.get("type") != "welcome":
            raise ProtocolError(f"the node refused this worker: {welcome}")
        self.version: int = welcome.get("version", 0)  #: the newest version published
        #: groups the coordinator opens per policy iteration (publish once per iteration)
        self.groups_per_iteration: int = welcome.get("groups_per_iteration", 1)
        #: job.checkpoint_interval as the node applies it (see checkpoint_due)
        self.checkpoint_interval: int = max(1, int(welcome.get("checkpoint_interval", 1)))
        self._prefix: str = welcome["file_prefix"]
        self._resume = welcome.get("checkpoint")
        #: the newest version whose checkpoint is committed in the store (as of the last reply)
        self.durable_version: int = (self._resume or {}).get("version", 0)
        self._seq = 0
        self._collectives = _Collectives(
            "trainer group",
            "every rank must call batches(), publish() and checkpoint() in the same order")
        group = welcome.get("group")
        self.rank: int = int(group["rank"]) if group else 0  #: this process's rank in the group
        self.world_size: int = int(group["world_size"]) if group else 1  #: ranks in the group
        #: the gloo process group of the trainer group's ranks (None in a one-process trainer)
        self.process_group: Any = None
        if self.world_size > 1:
            self.process_group = _join_group(group, "trainer group", "trainer.process_group")

    def _collective(self, op: str) -> None:
        self._collectives.check(op, self.world_size, self.process_group)

    def resume(self) -> Optional[Tuple[Dict[str, Any], Dict[str, Any]]]:
        """(tensors, meta) of the newest checkpoint this job's trainer wrote, or None; its
        ``meta["policy_version"]`` is the version it was taken at. Once per process."""
        r, self._resume = self._resume, None
        if not r:
            return None
        from moerl import tensors as _t
        try:
            named, _ = _t.load_file(r["path"])
        finally:
            try:
                os.unlink(r["path"])
            except OSError:
                pass
        return named, r.get("meta", {})

    def batches(self, groups: Any = 0) -> Iterator[Batch]:
        """Each batch the node hands this trainer, until the node stops it. `groups`: how many
        groups to ask for next (an int, or a callable returning one; 0: any). In a group, rank
        0 asks its node (only its `groups` counts) and every rank gets the same batches."""
        while True:
            msg: Optional[Dict[str, Any]] = None
            if self.rank == 0:
                want = groups() if callable(groups) else groups
                self._ch.send("next", groups=max(0, int(want)))
                msg = self._wait("batch")
            if self.world_size > 1:
                import torch.distributed as dist
                self._collective("batches")
                box = [msg]
                dist.broadcast_object_list(box, src=0, group=self.process_group)
                msg = box[0]
            if msg is None:
                return
            yield Batch([TrainGroup(g["group_id"], g["unit"], g["prompt"],
                                    [TrainSample(x["index"], x["tokens"], x["logprobs"],
                                                 x["reward"], x["policy_version"])
                                     for x in g["samples"]]) for g in msg["groups"]],
                        bool(msg.get("flush", False)))

    def publish(self, tensors: Any, metrics: Optional[Dict[str, float]] = None) -> int:
        """Makes `tensors` (a state_dict, name -> tensor, or an nn.Module) the next policy
        version; returns its number once a checkpoint cache (or the store) holds it. The
        tensors travel as a file in shared memory, never through the JSON channel."""
        if self.world_size > 1:
            return self._publish_group(tensors, metrics or {})
        msg = self._request("publish", tensors, metrics=metrics or {})
        self.version = msg["version"]
        return self.version

    def _publish_group(self, tensors: Any, metrics: Dict[str, Any]) -> int:
        """Every rank's tensors gathered to rank 0, which publishes their union: a name held by
        several ranks (a replicated dense tensor) must be equal on all of them; a sharded
        tensor's parts need names of their own (e.g. one per expert). Rank 0's reply (the
        version, or why it failed) goes to every rank."""
        import torch
        import torch.distributed as dist
        self._collective("publish")
        mine = _state_dict(tensors)
        parts: Optional[List[Any]] = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(mine, parts, dst=0, group=self.process_group)
        outcome: List[Any] = [None]
        if self.rank == 0:
            try:
                merged: Dict[str, Any] = {}
                owner: Dict[str, int] = {}
                for r, part in enumerate(parts or []):
                    for k, v in part.items():
                        if k not in merged:
                            merged[k], owner[k] = v, r
                        elif not (merged[k].shape == v.shape and merged[k].dtype == v.dtype
                                  and torch.equal(merged[k], v)):
                            raise ValueError(
                                f"publish: tensor {k!r} differs between rank {owner[k]} and rank "
                                f"{r}; a name several ranks publish is a replicated tensor and "
                                f"must be equal on each (all-reduce its gradients), a shard's "
                                f"tensors need names of their own")
                msg = self._request("publish", merged, metrics=metrics)
                outcome = [("ok", msg["version"])]
            except (ValueError, PublishFailed) as e:
                outcome = [("failed", str(e))]
        dist.broadcast_object_list(outcome, src=0, group=self.process_group)
        kind, value = outcome[0]
        if kind != "ok":
            raise PublishFailed(value if self.rank == 0 else f"on rank 0: {value}")
        self.version = int(value)
        return self.version

    def checkpoint_due(self) -> bool:
        """Whether the newest published version is one the job checkpoints: every
        ``job.checkpoint_interval``-th (by default every 8th), as moerl's own trainer does.
        Calling ``checkpoint()`` only then keeps the store's writes off the other versions; a
        checkpoint of any version is still written when asked for. The same on every rank."""
        return self.checkpoint_interval <= 1 or self.version % self.checkpoint_interval == 0

    def checkpoint(self, tensors: Any, meta: Optional[Dict[str, Any]] = None) -> int:
        """A checkpoint of `tensors` (weights and optimiser state, as you like) in moerl's
        store, numbered with the newest version published; ``resume()`` in a later process
        returns the newest committed. It is written in the background, as the native trainer's
        are: this returns once the node holds the bytes, and waits for the store only when
        ``job.max_durability_lag`` versions are published beyond the newest committed one
        (``durable_version``, updated by each reply, says which that is)."""
        if self.world_size > 1:
            # Each rank its own shard of the newest version; rank 0's node commits the version
            # once every rank's shard is durable.
            self._collective("checkpoint")
            msg = self._request("checkpoint", tensors, meta=meta or {}, version=self.version)
        else:
            msg = self._request("checkpoint", tensors, meta=meta or {})
        self.durable_version = msg.get("durable_version", self.durable_version)
        return msg["version"]

    def _request(self, kind: str, tensors: Any, **fields: Any) -> Dict[str, Any]:
        from moerl import tensors as _t
        self._seq += 1
        path = f"{self._prefix}{os.getpid()}-{self._seq}"
        try:
            size = _t.save_file(tensors, path)
            self._ch.send(kind, path=path, bytes=size, **fields)
        except BaseException:
            try:
                os.unlink(path)
            except OSError:
                pass
            raise
        msg = self._wait("published" if kind == "publish" else "checkpointed")
        if msg is None:
            raise ProtocolError("the node closed the channel")
        return msg

    def _wait(self, kind: str) -> Optional[Dict[str, Any]]:
        while True:
            msg = self._ch.recv()
            if msg is None:
                return None
            t = msg.get("type")
            if t == kind:
                return msg
            if t == "request_failed":
                raise PublishFailed(f"{msg.get('request')}: {msg.get('error')}")
            if t == "error":
                _log_refusal(msg)
                raise ProtocolError(f"the node refused this trainer's message "
                                    f"({msg.get('reason')}): {msg.get('detail')}")
            raise ProtocolError(f"a trainer got an unexpected {t!r} message")


def _state_dict(tensors: Any) -> Dict[str, Any]:
    """name -> CPU tensor of a state_dict or an nn.Module, detached (what gather_object sends)."""
    sd = tensors.state_dict() if hasattr(tensors, "state_dict") else tensors
    if not isinstance(sd, dict):
        raise TypeError(f"tensors is {type(tensors).__name__}; expected a state_dict "
                        f"(name -> torch.Tensor) or an nn.Module")
    return {str(k): v.detach().cpu() for k, v in sd.items()}


def _join_group(group: Dict[str, Any], what: str, attribute: str) -> Any:
    """torch.distributed's default gloo group of a group's ranks (``what``: "trainer group",
    "rollout group"), met at rank 0's store (the address and port its node announced to every
    member)."""
    import datetime
    import torch.distributed as dist
    if dist.is_initialized():
        raise ProtocolError(f"torch.distributed is already initialized in this process; a "
                            f"{what}'s worker gets its process group from moerl ({attribute})")
    addr = str(group["addr"])
    host = f"[{addr}]" if ":" in addr else addr
    # A rank waits in a collective while rank 0 waits for its node's next batch (lease): the
    # timeout bounds a wait for a peer that is alive but stuck (a dead one fails at once).
    timeout = 1800.0
    dist.init_process_group("gloo", init_method=f"tcp://{host}:{int(group['port'])}",
                            rank=int(group["rank"]), world_size=int(group["world_size"]),
                            timeout=datetime.timedelta(seconds=timeout))
    return dist.group.WORLD


def serve_trainer(main: Callable[[Trainer], None]) -> None:
    """Runs ``main(trainer)`` for the trainer node that started this process."""
    if not callable(main):
        raise TypeError(f"main is {main!r}; expected a callable (Trainer) -> None")
    main(Trainer())


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
    "trainer": serve_trainer,
}

if __name__ == "__main__":
    # Run through the importable module, so a user's `from moerl.worker import Sample` and this
    # loop share one set of classes (not a second copy living in __main__).
    from moerl.worker import main as _main

    sys.exit(_main(sys.argv[1:]))
