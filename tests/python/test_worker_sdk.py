"""moerl.worker (python/WORKERS.md) on its own, the test playing the node's end of the
socketpair: the handshake, a score, a raised exception travelling as score_error with its
traceback, bad return values, refusals from the node, and the errors a user meets first."""
import threading

import pytest
from node_end import node_end, recv, send  # tests/python/node_end.py

from moerl import worker


def test_a_reward_worker_scores_and_reports_exceptions_with_their_traceback(monkeypatch):
    node = node_end(monkeypatch)

    def score(s: worker.Sample) -> float:
        if not s.tokens:
            raise ValueError(f"empty response in unit {s.unit}")
        if s.tokens == [9]:
            return True  # not a float
        return len(s.tokens) / 10

    t = threading.Thread(target=worker.serve_reward, args=(score,))
    t.start()
    hello = recv(node)
    assert hello["type"] == "hello" and hello["role"] == "reward" and hello["v"] == 1
    send(node, type="welcome", role="reward")
    send(node, type="score", id=1, unit=4, seq=0, prompt=[1, 2], tokens=[3, 4, 5])
    assert recv(node) == {"v": 1, "type": "score_result", "id": 1, "reward": 0.3}
    send(node, type="score", id=2, unit=4, seq=1, prompt=[1, 2], tokens=[])
    err = recv(node)
    assert err["type"] == "score_error" and err["id"] == 2
    assert err["error"] == "ValueError: empty response in unit 4"
    assert "Traceback (most recent call last)" in err["traceback"]
    assert 'raise ValueError(f"empty response in unit {s.unit}")' in err["traceback"]
    send(node, type="score", id=3, unit=4, seq=2, prompt=[1], tokens=[9])
    err = recv(node)
    assert err["error"] == "TypeError: score() returned True (bool); expected a float", err
    # A refusal from the node is logged, not fatal: the worker serves the next request.
    send(node, type="error", reason="wrong_id", detail="reply to id 7")
    send(node, type="score", id=4, unit=5, seq=0, prompt=[1], tokens=[1])
    assert recv(node)["reward"] == 0.1
    node.close()  # the node stops its worker: serve_reward returns
    t.join(timeout=10)
    assert not t.is_alive()


def test_rewards_that_are_not_finite_float32_are_refused_by_the_sdk():
    assert worker._as_reward(1) == 1.0
    for bad, what in [(float("nan"), "finite"), (float("inf"), "finite"), (1e39, "finite"),
                      ("0.5", "expected a float"), (None, "expected a float")]:
        with pytest.raises((TypeError, ValueError), match=what):
            worker._as_reward(bad)


def test_a_rollout_worker_gets_leases_and_its_samples_refused_by_name(monkeypatch):
    node = node_end(monkeypatch)
    seen = {}

    def main(w: worker.RolloutWorker) -> None:
        for lease in w.leases():
            g = lease.groups[0]
            lease.submit(g.group_id, 0, [3, 2], [-1.0, -0.5])
            with pytest.raises(worker.SampleRefused) as e:
                lease.submit(g.group_id, 0, [3, 2], [-1.0, -0.5])
            seen["reason"] = e.value.reason
            seen["notice"] = w.notice
            seen["status"] = lease.done()

    t = threading.Thread(target=worker.serve_rollout, args=(main,))
    t.start()
    assert recv(node)["role"] == "rollout"
    send(node, type="welcome", role="rollout", vocab_size=16, max_completion_tokens=8)
    send(node, type="lease", unit=7, attempt=3, policy_version=2, group_size=2,
         deadline_unix_ms=1, groups=[{"group_id": 70, "prompt": [1, 15, 4, 14]}], sampling={})
    s = recv(node)
    assert (s["type"], s["unit"], s["attempt"], s["group_id"], s["index"]) == \
        ("sample", 7, 3, 70, 0)
    assert s["tokens"] == [3, 2] and s["logprobs"] == [-1.0, -0.5]
    send(node, type="notice", deadline_unix_ms=1796400000000, reason="drain")
    send(node, type="sample_ack", unit=7, attempt=3, group_id=70, index=0)
    assert recv(node)["type"] == "sample"
    send(node, type="error", reason="duplicate", detail="already submitted")
    done = recv(node)
    assert (done["type"], done["unit"], done["attempt"]) == ("lease_done", 7, 3)
    send(node, type="lease_closed", unit=7, attempt=3, status="failed", reason="1 of 2 samples")
    node.close()
    t.join(timeout=10)
    assert not t.is_alive()
    assert seen["reason"] == "duplicate" and seen["status"] == "failed"
    assert seen["notice"] == worker.Notice(1796400000000, "drain")


def test_a_worker_started_by_hand_says_what_is_missing(monkeypatch):
    monkeypatch.delenv("MOERL_WORKER_FD", raising=False)
    monkeypatch.delenv("MOERL_WORKER_SOCKET", raising=False)
    with pytest.raises(worker.ProtocolError, match="MOERL_WORKER_FD is not set"):
        worker.RolloutWorker()
    assert worker.main([]) == 2
    assert worker.main(["critic", "x:y"]) == 2
    with pytest.raises(ValueError, match="expected PKG.MODULE:FUNCTION"):
        worker._load("no_function")
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        worker._load("json:nope")


def test_attaching_to_a_socket_where_no_node_listens_names_the_path(monkeypatch, tmp_path):
    monkeypatch.delenv("MOERL_WORKER_FD", raising=False)
    monkeypatch.setenv("MOERL_WORKER_SOCKET", str(tmp_path / "none.sock"))
    monkeypatch.setenv("MOERL_WORKER_CONNECT_TIMEOUT_S", "0.5")
    with pytest.raises(worker.ProtocolError, match="none.sock: cannot connect to the node"):
        worker.RolloutWorker()
