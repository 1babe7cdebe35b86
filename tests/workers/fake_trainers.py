"""Trainer workers for external_trainer_test.cpp, speaking the wire protocol by hand
(workers/PROTOCOL.md, "Trainer") where moerl.worker would refuse to send what is tested. Run as
`python3 fake_trainers.py BEHAVIOUR` by the node side (exec: spec)."""
import json
import os
import sys
import time

import raw_wire  # tests/workers/raw_wire.py
from raw_wire import recv


def send(**msg):
    raw_wire.send(v=1, **msg)


send(type="hello", role="trainer", pid=os.getpid())
welcome = recv()
prefix = welcome["file_prefix"]
behaviour = sys.argv[1]


def file_with(name, data):
    path = prefix + name
    with open(path, "wb") as f:
        f.write(data)
    return path


if behaviour == "misbehaves":
    # Each wrong request is answered (refused or failed) and the node still serves the rest.
    send(type="next", groups=3)
    batch = recv()
    answers = []
    send(type="publish", path="/etc/passwd", bytes=10)                        # outside the prefix
    answers.append(recv())
    send(type="publish", path=file_with("short", b"abc"), bytes=10)           # wrong size
    answers.append(recv())
    send(type="train", groups=[])                                             # unknown type
    answers.append(recv())
    send(type="publish", path=file_with("v1", b"weights!"), bytes=8, metrics={"loss": 1})
    answers.append(recv())
    send(type="checkpoint", path=file_with("ck", b"state"), bytes=5, meta={})
    answers.append(recv())
    with open(prefix + "answers.json", "w") as f:
        json.dump({"batch": batch, "answers": answers,
                   "short_left": os.path.exists(prefix + "short")}, f)
    send(type="next", groups=0)
    while recv():
        pass
elif behaviour == "dies_holding":
    send(type="next")
    recv()
    os._exit(3)  # holding the batch
elif behaviour == "silent":
    send(type="next")
    recv()
    time.sleep(3600)
elif behaviour == "member":
    # A trainer group's rank 1 asking its node for what only rank 0 may: refused by name; its
    # own checkpoint shard is served.
    answers = []
    send(type="next", groups=1)
    answers.append(recv())
    send(type="publish", path=file_with("v1", b"weights!"), bytes=8, metrics={})
    answers.append(recv())
    send(type="checkpoint", path=file_with("ck", b"shard-1"), bytes=7, meta={}, version=3)
    answers.append(recv())
    with open(prefix + "answers.tmp", "w") as f:
        json.dump({"welcome": welcome, "answers": answers}, f)
    os.rename(prefix + "answers.tmp", prefix + "answers.json")
    while recv():
        pass
elif behaviour == "member_waits":
    while recv():
        pass
