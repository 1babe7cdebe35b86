"""GRPO's loss on whole groups: group-relative advantages, the PPO-clipped importance ratio
against the behaviour logprobs the rollout recorded, averaged per token."""

from __future__ import annotations

from typing import List, Sequence, Tuple

import torch

from moerl.examples.torch_moe.policy import SortPolicy


def advantages(rewards: Sequence[float], eps: float = 1e-6) -> List[float]:
    r = torch.tensor(rewards, dtype=torch.float64)
    return ((r - r.mean()) / (r.std(unbiased=False) + eps)).tolist()


EPOCHS = 4  # optimiser passes over each iteration's batch (the ratio's clip keeps them close)


def step(policy: SortPolicy, opt: torch.optim.Optimizer,
         rows: Sequence[Tuple[Sequence[int], Sequence[int], Sequence[float], float]],
         clip: float = 0.2, epochs: int = EPOCHS) -> dict:
    """`epochs` optimiser steps on rows (prompt, tokens, behaviour logprobs, advantage)."""
    prompts = [r[0] for r in rows]
    comps = [r[1] for r in rows]
    t_max = max(len(c) for c in comps)
    old = torch.zeros(len(rows), t_max)
    for i, r in enumerate(rows):
        old[i, :len(r[2])] = torch.tensor(r[2])
    adv = torch.tensor([r[3] for r in rows], dtype=torch.float32).unsqueeze(1)
    for _ in range(epochs):
        logp, mask = policy.token_logprobs(prompts, comps)
        ratio = torch.exp(logp - old) * mask
        loss_tok = -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
        loss = (loss_tok * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
    return {"loss": float(loss), "grad_norm": float(norm)}


def optimizer(policy: SortPolicy) -> torch.optim.Optimizer:
    return torch.optim.Adam(policy.parameters(), lr=3e-3)
