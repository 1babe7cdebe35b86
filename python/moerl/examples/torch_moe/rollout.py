"""The rollout worker (`rollout.worker: python:moerl.examples.torch_moe.rollout:main`): for each
lease, the policy version it names (``worker.weights(v)``: the trainer's published tensors,
mapped from the node's shared-memory copy), then `group_size` completions per prompt with their
behaviour logprobs. Version 0 is the seeded initial policy every process builds alike."""

from __future__ import annotations

import os
import time

import torch

from moerl.examples.torch_moe.policy import SortPolicy
from moerl.worker import RolloutWorker, WeightsUnavailable


def main(worker: RolloutWorker) -> None:
    torch.set_num_threads(1)
    policy = SortPolicy()
    version = 0
    rng = torch.Generator().manual_seed((os.getpid() << 20) ^ time.time_ns())
    for lease in worker.leases():
        if lease.policy_version != version:
            try:
                policy.load_published(worker.weights(lease.policy_version))
            except WeightsUnavailable as e:
                # No holder serves that version now (every cache lost): the unit goes back to
                # the queue at once, and the next lease names a version that is served.
                lease.give_back(str(e))
                continue
            version = lease.policy_version
        temperature = float(lease.sampling.get("temperature", 1.0))
        for g in lease.groups:
            toks, lps = policy.generate([g.prompt] * lease.group_size, temperature, rng)
            lease.submit_group(g.group_id, toks, lps)  # one round trip per group
        lease.done()
