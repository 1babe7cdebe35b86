"""The rollout worker (`rollout.worker: python:moerl.examples.torch_moe.rollout:main`): for each
lease, the policy version it names (``worker.weights(v)``: the trainer's published tensors,
mapped from the node's shared-memory copy), then `group_size` completions per prompt with their
behaviour logprobs. Version 0 is the seeded initial policy every process builds alike.

In a rollout group (``rollout.group_size`` > 1, configs/torch-moe-rgroup.yaml) every rank runs
this: the policy's experts are sharded over the ranks through moerl.ep.Buffer on the worker's
process group, every rank sees the same leases, generates its share of each lease's rows
(rows r, r + N, ...; every decode position's MoE call is a dispatch and a combine between the
ranks) and rank 0 gathers them and submits."""

from __future__ import annotations

import os
import time
from typing import Any, List, Tuple

import torch

from moerl.examples.torch_moe.policy import SortPolicy, expert_buffer
from moerl.worker import Lease, RolloutWorker, WeightsUnavailable


def _everywhere(worker: RolloutWorker, ok: bool) -> bool:
    """Whether `ok` holds on every rank of the group (just `ok` for one process)."""
    if worker.world_size <= 1:
        return ok
    import torch.distributed as dist
    t = torch.tensor([1 if ok else 0])
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=worker.process_group)
    return bool(t.item())


def generate_sharded(worker: RolloutWorker, policy: SortPolicy, lease: Lease, temperature: float,
                     rng: torch.Generator) -> List[Tuple[List[List[int]], List[List[float]]]]:
    """Every group's (tokens, logprobs) per response, generated across the group's ranks: rank r
    generates rows r, r + N, ... of the lease (every group's responses, group-major) and rank 0
    gathers them back in order. Rank 0 gets the lease's groups, the other ranks []."""
    import torch.distributed as dist
    g_size, n, r = lease.group_size, worker.world_size, worker.rank
    rows = [g.prompt for g in lease.groups for _ in range(g_size)]
    mine = rows[r::n]
    toks, lps = policy.generate(mine, temperature, rng, prompt_len=len(rows[0]))
    parts: Any = [None] * n if r == 0 else None
    dist.gather_object((toks, lps), parts, dst=0, group=worker.process_group)
    if r != 0:
        return []
    out = []
    for gi in range(len(lease.groups)):
        row_ids = range(gi * g_size, (gi + 1) * g_size)
        out.append(([parts[i % n][0][i // n] for i in row_ids],
                    [parts[i % n][1][i // n] for i in row_ids]))
    return out


def main(worker: RolloutWorker) -> None:
    torch.set_num_threads(1)
    policy = SortPolicy(buffer=expert_buffer(worker.world_size, worker.process_group))
    version = 0
    rng = torch.Generator().manual_seed((os.getpid() << 20) ^ time.time_ns())
    for lease in worker.leases():
        if lease.policy_version != version:
            try:
                named, why = worker.weights(lease.policy_version), ""
            except WeightsUnavailable as e:
                named, why = None, str(e)
            # A group's ranks load the version together, or none does.
            if not _everywhere(worker, named is not None):
                # No holder serves that version now (every cache lost): the unit goes back to
                # the queue at once, and the next lease names a version that is served.
                lease.give_back(why or "another rank of the rollout group could not load it")
                continue
            policy.load_published(named)
            version = lease.policy_version
        temperature = float(lease.sampling.get("temperature", 1.0))
        if worker.world_size > 1:
            for g, (toks, lps) in zip(lease.groups,
                                      generate_sharded(worker, policy, lease, temperature, rng)):
                lease.submit_group(g.group_id, toks, lps)  # rank 0 only: the others got []
        else:
            for g in lease.groups:
                toks, lps = policy.generate([g.prompt] * lease.group_size, temperature, rng)
                lease.submit_group(g.group_id, toks, lps)  # one round trip per group
        lease.done()
