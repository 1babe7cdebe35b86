"""A Python rollout group's SDK side (python/WORKERS.md, "Rollout groups"), on 2 ranks of a gloo
group spawned here, each with the test playing its node's end of the socketpair: every rank's
leases() yields rank 0's leases (and rank 0's notice), rank 1's submit raises NotRankZero
naming its rank and the rule, and the example's sharded generation (experts through
moerl.ep.Buffer) submits, from rank 0, every response of the lease with behaviour logprobs equal
to the one-process policy's logprobs of the same tokens. The whole group under `moerl up`:
tests/workers/python_trainer_test.py (rgroup cases)."""
import socket
import threading

import torch
from node_end import recv, send  # tests/python/node_end.py
from spawned_ranks import run_spawned_ranks  # tests/python/spawned_ranks.py

WORLD = 2
GROUP_SIZE = 4
LEASE = dict(unit=7, attempt=3, policy_version=0, group_size=GROUP_SIZE, deadline_unix_ms=1,
             groups=[{"group_id": 70, "prompt": [1, 15, 4, 5, 3, 14]},
                     {"group_id": 71, "prompt": [1, 15, 9, 2, 6, 14]}],
             sampling={"temperature": 1.0})
NOTICE_MS = 1796400000000


def play_node(sock, rank, port, submitted):
    """Rank `rank`'s node: welcome with the group's place; rank 0's also a notice, one lease,
    an ack per submission and the lease's close; then it stops the worker (closes)."""
    assert recv(sock)["role"] == "rollout"
    send(sock, type="welcome", role="rollout", vocab_size=16, max_completion_tokens=8,
         group={"rank": rank, "world_size": WORLD, "addr": "127.0.0.1", "port": port,
                "incarnation": 1})
    if rank == 0:
        send(sock, type="notice", deadline_unix_ms=NOTICE_MS, reason="drain")
        send(sock, type="lease", **LEASE)
        while True:
            m = recv(sock)
            if m["type"] == "lease_done":
                send(sock, type="lease_closed", unit=7, attempt=3, status="finished", reason="")
                break
            assert m["type"] == "samples", m
            submitted.extend(m["samples"])
            send(sock, type="samples_ack", unit=7, attempt=3, count=len(m["samples"]))
    else:
        # Rank 1 sends nothing (its submit raises before a frame goes out): the first thing
        # its node hears is the channel closing when the worker exits.
        sock.settimeout(60)
        got = sock.recv(4)
        submitted.append(got)
    sock.close()


def rank_main(rank, port, out):
    torch.set_num_threads(1)
    import os
    from moerl import worker
    from moerl.examples.torch_moe import rollout
    from moerl.examples.torch_moe.policy import SortPolicy, expert_buffer

    mine, theirs = socket.socketpair()
    os.environ["MOERL_WORKER_FD"] = str(theirs.detach())
    submitted = []
    node = threading.Thread(target=play_node, args=(mine, rank, port, submitted))
    node.start()
    seen = {}
    w = worker.RolloutWorker()
    policy = SortPolicy(buffer=expert_buffer(w.world_size, w.process_group))
    rng = torch.Generator().manual_seed(11 + rank)
    for lease in w.leases():
        seen["lease"] = (lease.unit, lease.attempt, [g.group_id for g in lease.groups])
        seen["notice"] = (w.notice.deadline_unix_ms, w.notice.reason) if w.notice else None
        got = rollout.generate_sharded(w, policy, lease, 1.0, rng)
        if rank == 0:
            for g, (toks, lps) in zip(lease.groups, got):
                lease.submit_group(g.group_id, toks, lps)
        else:
            seen["rank1_got"] = got
            try:
                lease.submit(70, 0, [3], [-0.1])
                seen["refused"] = "no error"
            except worker.NotRankZero as e:
                seen["refused"] = str(e)
        seen["done"] = lease.done()
    w._ch._sock.close()  # this worker leaves (as its process would, exiting)
    node.join(60)
    out.put((rank, seen, submitted))


def test_every_rank_sees_rank_0s_leases_and_only_rank_0_submits_the_groups_rows():
    (_, seen0, submitted), (_, seen1, node1) = run_spawned_ranks(rank_main, WORLD)
    for seen in (seen0, seen1):
        assert seen["lease"] == (7, 3, [70, 71]), seen
        assert seen["notice"] == (NOTICE_MS, "drain"), seen  # rank 1's node sent none
    assert seen0["done"] == "finished" and seen1["done"] == "rank 0's"
    assert seen1["rank1_got"] == []
    assert seen1["refused"].startswith("submit() on rollout group rank 1: only rank 0 submits"), \
        seen1["refused"]
    assert node1 == [b""]  # rank 1 never wrote a frame to its node
    # Every response of both groups, once, from rank 0; their logprobs are the one-process
    # policy's for the same tokens (the experts ran sharded over the two ranks).
    assert sorted((s["group_id"], s["index"]) for s in submitted) == \
        [(g, i) for g in (70, 71) for i in range(GROUP_SIZE)]
    from moerl.examples.torch_moe.policy import SortPolicy
    one = SortPolicy()
    prompts = {g["group_id"]: g["prompt"] for g in LEASE["groups"]}
    for s in submitted:
        lp, mask = one.token_logprobs([prompts[s["group_id"]]], [s["tokens"]])
        want = lp[0][mask[0] > 0].tolist()
        assert len(want) == len(s["logprobs"])
        assert max(abs(a - b) for a, b in zip(want, s["logprobs"])) < 1e-5, (want, s["logprobs"])
