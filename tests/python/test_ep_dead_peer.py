"""A peer SIGKILLed mid-step: the survivors' next moerl.ep call raises an exception that says
what happened (TimeoutError naming the timeout and the dead peer), bounded by the Buffer's
op_timeout_ms rather than hanging, for a normal-mode combine and a low-latency dispatch;
later calls on the broken Buffer fail the same way, and the survivors rebuild a group and a
Buffer and carry on."""

import os
import signal
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import moerl.ep
from ep_harness import run_ranks

OP_TIMEOUT_MS = 2000
VICTIM = 1


def expect_peer_failure(what: str, fn, *args, **kwargs) -> float:
    start = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        fn(*args, **kwargs)
    elapsed = time.monotonic() - start
    message = str(info.value)
    # moerl's wording: "timeout: EP step 2: combine data incomplete after 2000 ms; missing
    # from rank 1 (0/1)": what timed out, and which peer.
    assert "timeout" in message and f"rank {VICTIM}" in message, f"{what}: {message!r}"
    # The deadline is the Buffer's op_timeout_ms; the margin is for a loaded machine, and
    # only tells "bounded by the timeout" from "hung until the harness killed it".
    assert elapsed < OP_TIMEOUT_MS / 1000 + 20, f"{what} took {elapsed:.1f} s: {message}"
    return elapsed


def worker(rank: int, world: int, rebuild_file: str) -> None:
    group = dist.group.WORLD
    normal = moerl.ep.Buffer(group, num_nvl_bytes=1 << 20, op_timeout_ms=OP_TIMEOUT_MS)
    ll = moerl.ep.Buffer(group, low_latency_mode=True, op_timeout_ms=OP_TIMEOUT_MS)
    x = torch.ones(4, 64) * (rank + 1)
    idx = torch.tensor([[0, world], [1, -1], [2 * world - 1, 2], [world + 1, 0]])
    w = torch.ones(4, 2)
    in_rank = normal.get_dispatch_layout(idx, 2 * world)[3]

    # A whole step works, and both channels exist (their bootstrap needed every rank).
    recv_x, _, _, _, handle, _ = normal.dispatch(x, is_token_in_rank=in_rank)
    normal.combine(recv_x, handle)
    recv, _, ll_handle, _, _ = ll.low_latency_dispatch(x, idx, 8, 2 * world, use_fp8=False)
    ll.low_latency_combine(recv, idx, w, ll_handle)

    # Mid-step: everybody dispatched, then the victim dies before combining.
    recv_x, _, _, _, handle, _ = normal.dispatch(x, is_token_in_rank=in_rank)
    recv, _, ll_handle, _, _ = ll.low_latency_dispatch(x, idx, 8, 2 * world, use_fp8=False)
    if rank == VICTIM:
        os.kill(os.getpid(), signal.SIGKILL)
    expect_peer_failure("normal combine", normal.combine, recv_x, handle)
    expect_peer_failure("low-latency combine", ll.low_latency_combine, recv, idx, w, ll_handle)
    # A broken Buffer stays broken (a new one is built with the survivors), but says so.
    expect_peer_failure("normal dispatch after the failure", normal.dispatch, x, is_token_in_rank=in_rank)
    del normal, ll

    # The process is still usable: a group and a Buffer of the survivors work.
    survivors = [r for r in range(world) if r != VICTIM]
    dist.destroy_process_group()
    dist.init_process_group("gloo", init_method=f"file://{rebuild_file}", rank=survivors.index(rank),
                            world_size=len(survivors), timeout=timedelta(seconds=60))
    again = moerl.ep.Buffer(dist.group.WORLD, num_nvl_bytes=1 << 20, op_timeout_ms=30000)
    n = len(survivors)
    in_rank = torch.ones(4, n, dtype=torch.bool)
    recv_x, _, _, _, handle, _ = again.dispatch(x, is_token_in_rank=in_rank)
    assert recv_x.shape == (4 * n, 64)
    combined, _, _ = again.combine(recv_x, handle)
    assert torch.equal(combined, x * n)


@pytest.mark.parametrize("world", [3])
def test_survivors_of_a_killed_peer_get_an_exception_not_a_hang(world: int, tmp_path) -> None:
    run_ranks(worker, world, str(tmp_path / "rebuild"), timeout_s=90, killed=[VICTIM])
