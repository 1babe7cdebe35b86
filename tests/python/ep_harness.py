"""Runs a function on N processes joined by a gloo group, bounded in time (tests only)."""

import os
import tempfile
import time
import traceback
from datetime import timedelta
import signal
from typing import Any, Callable, Optional, Sequence

import torch.distributed as dist
import torch.multiprocessing as mp

# fork: the children share the parent's imported torch and moerl (spawn would re-import them,
# seconds per process on a small box); the parent starts no threads before forking.
_ctx = mp.get_context("fork")


def _child(fn: Callable[..., None], rank: int, world: int, init_file: str, errors: Any, args: tuple,
           before_init: Optional[Callable[[int], None]]) -> None:
    try:
        if before_init is not None:
            before_init(rank)
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=60))
        fn(rank, world, *args)
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:  # reported to the parent, which fails the test with it
        errors.put(f"rank {rank}:\n{traceback.format_exc()}")
        os._exit(1)


def _shm_files() -> dict:
    """/dev/shm's names and their inodes."""
    out = {}
    for f in os.listdir("/dev/shm"):
        try:
            out[f] = os.stat(os.path.join("/dev/shm", f)).st_ino
        except FileNotFoundError:
            pass
    return out


def _shm_regions_of(pid: int, before: dict) -> list:
    """libfabric's shm regions of `pid` (named <pid>:<n>:<n>) made since `before` (_shm_files()
    as the ranks started): pids are reused (pid_max 32768 here), and a file another process of
    the same pid left before is not this rank's."""
    now = _shm_files()
    return sorted(f for f, ino in now.items() if f.startswith(f"{pid}:") and before.get(f) != ino)


def run_ranks(fn: Callable[..., None], world: int, *args: Any, timeout_s: float = 90,
              killed: Sequence[int] = (), before_init: Optional[Callable[[int], None]] = None) -> None:
    """fn(rank, world, *args) on `world` processes; raises with every rank's traceback, or
    when the ranks are not done within timeout_s (then they are killed). The ranks in
    `killed` must end by SIGKILL (tests of a dead peer kill them from inside fn).
    before_init(rank), when given, runs in each child before it joins the group (e.g. to
    enter a network namespace)."""
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        errors = _ctx.SimpleQueue()
        shm_before = _shm_files()
        procs = [_ctx.Process(target=_child, args=(fn, r, world, init_file, errors, args, before_init)) for r in range(world)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for r in hung:
            procs[r].kill()
            procs[r].join()
        messages = []
        while not errors.empty():
            messages.append(errors.get())
        if hung:
            messages.append(f"ranks {hung} still running after {timeout_s} s (killed)")
        # /dev/shm as the ranks found it: a rank that ended cleanly freed its fabric regions
        # (moerl.ep frees them as the process exits); what a killed or failed rank left, this
        # parent removes, as moerl's own parents do (common/shm_leftovers.h).
        for r, p in enumerate(procs):
            left = _shm_regions_of(p.pid, shm_before)
            if p.exitcode != 0:
                for name in left:
                    os.remove(os.path.join("/dev/shm", name))
            elif left:
                messages.append(f"rank {r} exited cleanly but left /dev/shm regions {left}")
        want = {r: -signal.SIGKILL if r in killed else 0 for r in range(world)}
        bad = [r for r, p in enumerate(procs) if p.exitcode != want[r] and r not in hung]
        if bad and not messages:
            messages.append(f"ranks {bad} exited with codes {[procs[r].exitcode for r in bad]}, expected "
                            f"{[want[r] for r in bad]}")
        if messages:
            raise AssertionError("\n".join(messages))
