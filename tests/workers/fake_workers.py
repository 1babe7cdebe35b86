"""Reward workers that misbehave on purpose, for external_scorer_test.cpp. Run as
`python3 fake_workers.py BEHAVIOUR` by a node-side scorer (exec: spec); each speaks the wire
protocol by hand where moerl.worker would refuse to send what is being tested."""
import json
import os
import sys
import time

from raw_wire import recv, send, send_raw  # tests/workers/raw_wire.py


def hello(role="reward", v=1):
    send(v=v, type="hello", role=role, pid=os.getpid())
    return recv()


behaviour = sys.argv[1]
if behaviour == "garbage":
    # Every reply is wrong in one way before the right one; the node must refuse each by
    # name (an "error" frame back) and still take the right one.
    assert hello()["type"] == "welcome"
    while True:
        req = recv()
        if req["type"] != "score":
            continue
        refusals = []
        for bad in [b"not json", b"[1, 2]", json.dumps({"v": 2, "type": "score_result"}).encode(),
                    json.dumps({"v": 1, "type": "lease"}).encode(),
                    json.dumps({"v": 1, "type": "score_result", "id": req["id"] + 7,
                                "reward": 1.0}).encode(),
                    json.dumps({"v": 1, "type": "score_result", "id": req["id"],
                                "reward": "high"}).encode(),
                    b'{"v": 1, "type": "score_result", "id": %d, "reward": NaN}' % req["id"]]:
            send_raw(bad)
            refusals.append(recv()["reason"])
        # The reward says which refusals came back, in order, so the test can check them.
        codes = {"malformed": 1, "bad_version": 2, "unknown_type": 3, "wrong_id": 4}
        reward = float("".join(str(codes[r]) for r in refusals))
        send(v=1, type="score_result", id=req["id"], reward=reward)
elif behaviour == "batch_garbage":
    # A score_batch answered first with too few results, then with a NaN reward, then right.
    assert hello()["type"] == "welcome"
    while True:
        req = recv()
        if req["type"] != "score_batch":
            continue
        refusals = []
        n = len(req["items"])
        for bad in [json.dumps({"v": 1, "type": "score_batch_result", "id": req["id"],
                                "results": [{"reward": 1.0}] * (n - 1)}).encode(),
                    b'{"v": 1, "type": "score_batch_result", "id": %d, "results": '
                    b'[{"reward": NaN}, {"reward": 1.0}]}' % req["id"]]:
            send_raw(bad)
            refusals.append(recv()["reason"])
        codes = {"malformed": 1, "bad_version": 2, "unknown_type": 3, "wrong_id": 4}
        first = float("".join(str(codes[r]) for r in refusals))
        send(v=1, type="score_batch_result", id=req["id"],
             results=[{"reward": first}] + [{"reward": 0.5}] * (n - 1))
elif behaviour == "wrong_role":
    hello(role="rollout")
    recv()
elif behaviour == "old_version":
    hello(v=0)
    recv()
elif behaviour == "exit_at_start":
    sys.exit(3)
elif behaviour == "silent":
    time.sleep(3600)
elif behaviour == "die_on_second":
    assert hello()["type"] == "welcome"
    n = 0
    while True:
        req = recv()
        n += 1
        if n == 2:
            os._exit(5)
        send(v=1, type="score_result", id=req["id"], reward=0.5)
elif behaviour == "rollout_rank1":
    # A rollout group's rank 1 (rollout_session_test.cpp): its welcome names its place; its
    # node serves it weights of a version no lease named, and refuses its submissions as
    # not_rank_zero. It asks for version 99 last only if all of that held.
    w = hello(role="rollout")
    group_ok = w.get("group", {}).get("rank") == 1 and w["group"].get("world_size") == 2
    send(v=1, type="weights", version=5, refetch=False)
    weights_ok = recv()["type"] == "weights_ready"
    reasons = []
    for msg in [dict(type="samples", unit=7, attempt=1,
                     samples=[dict(group_id=100, index=0, tokens=[3], logprobs=[-0.1])]),
                dict(type="lease_done", unit=7, attempt=1)]:
        send(v=1, **msg)
        reasons.append(recv().get("reason"))
    if group_ok and weights_ok and reasons == ["not_rank_zero", "not_rank_zero"]:
        send(v=1, type="weights", version=99, refetch=False)
        recv()
    # Exits a while after its last request, so the test's first serve_member (which stops once
    # version 99 was asked for) ends before the death, and its second one sees it.
    time.sleep(2)
    sys.exit(0)
