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
"""

import importlib
import json
import math
import os
import socket
import struct
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

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
        fd = os.environ.get("MOERL_WORKER_FD")
        if fd is None or not fd.isdigit():
            raise ProtocolError(
                "MOERL_WORKER_FD is not set: this process must be started by a moerl node "
                "(reward.worker / rollout.worker)")
        return cls(int(fd))

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


_ROLES: Dict[str, Callable[[Callable[..., Any]], None]] = {"reward": serve_reward}

if __name__ == "__main__":
    # Run through the importable module, so a user's `from moerl.worker import Sample` and this
    # loop share one set of classes (not a second copy living in __main__).
    from moerl.worker import main as _main

    sys.exit(_main(sys.argv[1:]))
