"""The trainer (`trainer.worker: python:moerl.examples.torch_moe.trainer:main`): collects one
policy iteration of whole groups (``trainer.groups_per_iteration``), takes one GRPO step,
publishes the weights as the next policy version and checkpoints weights + Adam moments, so a
restarted trainer process resumes where the last one stopped. In a trainer group
(``trainer.group_size`` > 1, configs/torch-moe-group.yaml) the policy's experts are sharded over
the ranks through moerl.ep.Buffer, each rank steps on its share of every iteration's rows
(grpo.step_sharded), and each checkpoints its own state."""

from __future__ import annotations

from typing import Dict, List

import torch

from moerl.examples.torch_moe import grpo
from moerl.examples.torch_moe.policy import SortPolicy, expert_buffer
from moerl.worker import Trainer, TrainGroup


def _state(policy: SortPolicy, opt: torch.optim.Optimizer) -> Dict[str, torch.Tensor]:
    """Weights ("model.*") and Adam's moments ("adam.<i>.*") as flat named tensors."""
    out = {f"model.{k}": v for k, v in policy.state_dict().items()}
    for i, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            out[f"adam.{i}.{k}"] = torch.as_tensor(v)
    return out


def _restore(policy: SortPolicy, opt: torch.optim.Optimizer, named: Dict[str, torch.Tensor]) -> None:
    policy.load_state_dict({k[6:]: v for k, v in named.items() if k.startswith("model.")})
    state: Dict[int, Dict[str, torch.Tensor]] = {}
    for k, v in named.items():
        if k.startswith("adam."):
            _, i, name = k.split(".", 2)
            state.setdefault(int(i), {})[name] = v.clone()
    sd = opt.state_dict()
    sd["state"] = state
    opt.load_state_dict(sd)



def main(trainer: Trainer) -> None:
    torch.set_num_threads(1)
    buffer = expert_buffer(trainer.world_size, trainer.process_group)
    policy = SortPolicy(buffer=buffer)
    opt = grpo.optimizer(policy)
    reported = buffer is None
    resumed = trainer.resume()
    if resumed is not None:
        _restore(policy, opt, resumed[0])
    held: List[TrainGroup] = []
    want = lambda: max(1, trainer.groups_per_iteration - len(held))  # noqa: E731
    for batch in trainer.batches(groups=want):
        held += batch.groups
        if not held or (len(held) < trainer.groups_per_iteration and not batch.flush):
            continue
        rows = [(g.prompt, s.tokens, s.logprobs, a)
                for g in held for s, a in zip(g.samples, g.advantages())]
        if buffer is None:
            stats = grpo.step(policy, opt, rows)
        else:
            stats = grpo.step_sharded(policy, opt, rows, trainer.rank, trainer.world_size,
                                      trainer.process_group)
        if not reported:  # the expert plane's transport, once, in the version's metrics
            reported = True
            stats["ep_transport"] = [{k: d.get(k) for k in ("channel", "provider", "peer_paths")}
                                     for d in buffer.transport_report()]
        trainer.publish(policy.state_dict() if buffer is None else policy.published_state(),
                        metrics=stats)
        # Each rank its own state (dense tensors, its experts, their Adam moments), on the
        # versions the job checkpoints (job.checkpoint_interval).
        if trainer.checkpoint_due():
            trainer.checkpoint(_state(policy, opt), meta={"groups": len(held)})
        held = []
