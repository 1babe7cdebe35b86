"""moerl.worker's trainer side and RolloutWorker.weights (python/WORKERS.md), the test playing
the node's end of the socketpair; and moerl.tensors, the safetensors layout both use."""
import hashlib
import json
import os
import struct
import tempfile
import threading

import pytest
import torch
from node_end import node_end, recv, send  # tests/python/node_end.py

from moerl import tensors, worker


def sample_tensors():
    return {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4),
            "b": torch.tensor([1, 2, 3], dtype=torch.int64),
            "h": torch.tensor([0.5, -2.0], dtype=torch.bfloat16),
            "m": torch.tensor([True, False]),
            "e": torch.zeros(0, 5)}


def test_tensors_round_trip_aligned_and_mapped_without_copy(tmp_path):
    named = sample_tensors()
    path = str(tmp_path / "v1")
    size = tensors.save_file(named, path, metadata={"step": 3})
    assert size == os.path.getsize(path)
    raw = open(path, "rb").read()
    assert raw == tensors.dumps(named, metadata={"step": 3})
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    header = json.loads(raw[8:8 + n])
    assert header["__metadata__"] == {"step": "3"}
    for name, h in header.items():
        if name != "__metadata__":
            size_of = named[name].element_size()
            assert h["data_offsets"][0] % size_of == 0, (name, h)
    m, back, meta = tensors.map_file(path)
    assert meta == {"step": "3"}
    for k, v in named.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k], v), k
    # A view of the mapping, not a copy: a write through the tensor shows in the map.
    back["w"][0, 0] = 42.0
    off = 8 + n + header["w"]["data_offsets"][0]
    assert struct.unpack("<f", m[off:off + 4])[0] == 42.0
    assert open(path, "rb").read() == raw  # copy-on-write: the file is unchanged


def test_tensors_refuse_a_torn_buffer():
    raw = tensors.dumps({"w": torch.ones(4)})
    with pytest.raises(ValueError, match="do not fit"):
        tensors.loads(raw[:-4])
    with pytest.raises(ValueError, match="too short"):
        tensors.loads(b"\x01")


def test_a_trainer_gets_whole_groups_publishes_files_and_resumes(monkeypatch, tmp_path):
    node = node_end(monkeypatch)
    prefix = str(tmp_path) + "/9:trainer:"
    resume_path = prefix + "resume-4"
    tensors.save_file({"x": torch.ones(2)}, resume_path)
    seen = {}

    def main(t: worker.Trainer):
        seen["version"], seen["per_iteration"] = t.version, t.groups_per_iteration
        seen["due"] = [t.checkpoint_due()]
        named, meta = t.resume()
        seen["resumed"] = (named["x"].tolist(), meta)
        assert t.resume() is None
        for batch in t.batches(groups=lambda: 5):
            seen.setdefault("batches", []).append(batch)
            seen["published"] = t.publish({"x": torch.full((2,), 7.0)}, metrics={"loss": 0.5})
            seen["due"].append(t.checkpoint_due())  # version 5: every other is due
            try:
                t.checkpoint({"x": torch.zeros(1)}, meta={"k": 1})
            except worker.PublishFailed as e:
                seen["checkpoint_error"] = str(e)

    th = threading.Thread(target=worker.serve_trainer, args=(main,))
    th.start()
    assert recv(node)["type"] == "hello"
    send(node, type="welcome", role="trainer", version=4, groups_per_iteration=16,
         checkpoint_interval=2,
         file_prefix=prefix, checkpoint={"path": resume_path, "bytes": 0, "version": 4,
                                         "meta": {"policy_version": 4}})
    assert recv(node) == {"v": 1, "type": "next", "groups": 5}
    assert not os.path.exists(resume_path)  # read and removed
    group = {"group_id": 3, "unit": 8, "prompt": [1, 15, 4, 3, 14],
             "samples": [{"index": i, "tokens": [3, 4, 2], "logprobs": [-1.0, -1.0, -1.0],
                          "reward": float(i), "policy_version": 4} for i in range(2)]}
    send(node, type="batch", flush=False, groups=[group])
    pub = recv(node)
    assert pub["type"] == "publish" and pub["path"].startswith(prefix) and pub["metrics"] == {
        "loss": 0.5}
    named, _ = tensors.load_file(pub["path"])
    assert named["x"].tolist() == [7.0, 7.0] and os.path.getsize(pub["path"]) == pub["bytes"]
    send(node, type="published", version=5, content_hash="ab", sha256="cd", via="cache")
    ck = recv(node)
    assert ck["type"] == "checkpoint" and ck["meta"] == {"k": 1}
    send(node, type="request_failed", request="checkpoint", error="the store is full")
    assert recv(node) == {"v": 1, "type": "next", "groups": 5}
    node.close()  # the node stops this worker: batches() ends, and main with it
    th.join(10)
    assert not th.is_alive()
    assert seen["version"] == 4 and seen["per_iteration"] == 16
    assert seen["due"] == [True, False]
    assert seen["resumed"] == ([1.0, 1.0], {"policy_version": 4})
    assert seen["published"] == 5
    b = seen["batches"][0]
    assert not b.flush and b.groups[0].group_id == 3 and b.groups[0].rewards == [0.0, 1.0]
    assert b.groups[0].advantages() == pytest.approx([-1.0, 1.0], abs=1e-5)
    assert seen["checkpoint_error"] == "checkpoint: the store is full"


def test_weights_are_mapped_checked_and_refetched_once(monkeypatch, tmp_path):
    node = node_end(monkeypatch)
    path = str(tmp_path / "v3")
    tensors.save_file({"w": torch.full((4,), 3.0)}, path)
    good = hashlib.sha256(open(path, "rb").read()).hexdigest()
    got = {}

    def main(w: worker.RolloutWorker):
        for lease in w.leases():
            got["w"] = w.weights(lease.policy_version)["w"].tolist()
            assert w.weights(lease.policy_version) is w.weights(3)  # kept
            try:
                w.weights(99)
            except worker.WeightsUnavailable as e:
                got["error"] = str(e)
            lease.give_back("test")
            return

    th = threading.Thread(target=worker.serve_rollout, args=(main,))
    th.start()
    assert recv(node)["type"] == "hello"
    send(node, type="welcome", role="rollout", vocab_size=16, max_completion_tokens=4)
    send(node, type="lease", unit=1, attempt=1, policy_version=3, group_size=2,
         deadline_unix_ms=0, groups=[{"group_id": 1, "prompt": [1]}], sampling={})
    assert recv(node) == {"v": 1, "type": "weights", "version": 3, "refetch": False}
    send(node, type="weights_ready", version=3, path=path, bytes=os.path.getsize(path),
         sha256="0" * 64)  # a corrupt copy: the worker asks again
    assert recv(node) == {"v": 1, "type": "weights", "version": 3, "refetch": True}
    send(node, type="weights_ready", version=3, path=path, bytes=os.path.getsize(path),
         sha256=good)
    assert recv(node) == {"v": 1, "type": "weights", "version": 99, "refetch": False}
    send(node, type="weights_error", version=99, error="not the lease's version")
    assert recv(node)["type"] == "give_back"
    send(node, type="lease_closed", unit=1, attempt=1, status="returned", reason="given back")
    th.join(10)
    node.close()
    th.join(10)
    assert got["w"] == [3.0] * 4 and "not the lease's version" in got["error"]
