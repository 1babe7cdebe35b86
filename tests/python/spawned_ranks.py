"""Runs target(rank, port, *args, queue) on N spawned processes that make their own gloo group
at 127.0.0.1:port (a moerl.worker SDK joins it itself, so ep_harness.run_ranks, which makes the
group for its function, does not fit); each rank puts one (rank, ...) tuple (tests only)."""
import socket

import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_spawned_ranks(target, world, *args, timeout_s=120):
    """Every rank's tuple, in rank order; fails when a rank did not exit 0."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=target, args=(r, port, *args, q)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        got = sorted((q.get(timeout=timeout_s) for _ in procs), key=lambda x: x[0])
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return got
