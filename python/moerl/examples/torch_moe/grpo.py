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


def _is_expert(name: str) -> bool:
    """An expert-parallel rank's own experts (moe.ep.w_in / w_out); everything else, the gate
    included, is replicated on every rank."""
    return name.startswith("moe.ep.w_")


def step_sharded(policy: SortPolicy, opt: torch.optim.Optimizer,
                 rows: Sequence[Tuple[Sequence[int], Sequence[int], Sequence[float], float]],
                 rank: int, world: int, group: object, clip: float = 0.2,
                 epochs: int = EPOCHS) -> dict:
    """`step` on one rank of a trainer group whose experts are sharded through moerl.ep.Buffer
    (every rank is given the same `rows`): rank r takes rows r, r + world, ... (data parallel on
    the dense part; its tokens reach every rank's experts through dispatch/combine), the loss
    is normalised by the whole batch's token count, the replicated parameters' gradients are
    summed over the ranks (one all-reduce, which also carries the experts' squared norm), and
    the gradient is clipped by the global norm. So each Adam step equals `step`'s on the same
    rows in one process, up to the order of float sums."""
    import torch.distributed as dist
    mine = list(rows[rank::world])
    t_max = max(len(r[1]) for r in rows)
    num_tokens = float(sum(len(r[1]) for r in rows))
    prompt_len = len(rows[0][0])
    prompts = [r[0] for r in mine]
    comps = [r[1] for r in mine]
    old = torch.zeros(len(mine), t_max)
    for i, r in enumerate(mine):
        old[i, :len(r[2])] = torch.tensor(r[2])
    adv = torch.tensor([r[3] for r in mine], dtype=torch.float32).reshape(len(mine), 1)
    named = list(policy.named_parameters())
    dense = [p for n, p in named if not _is_expert(n)]
    experts = [p for n, p in named if _is_expert(n)]
    for _ in range(epochs):
        logp, mask = policy.token_logprobs(prompts, comps, t_max=t_max, prompt_len=prompt_len)
        ratio = torch.exp(logp - old) * mask
        loss_tok = -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
        loss = (loss_tok * mask).sum() / num_tokens
        opt.zero_grad()
        loss.backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in dense]
        expert_sq = sum(float((p.grad.double() ** 2).sum()) for p in experts if p.grad is not None)
        flat = torch.cat([g.reshape(-1) for g in grads] +
                         [torch.tensor([expert_sq, float(loss)], dtype=torch.float32)])
        dist.all_reduce(flat, group=group)
        at = 0
        for p, g in zip(dense, grads):
            n = g.numel()
            p.grad = flat[at:at + n].view_as(p).clone()
            at += n
        dense_sq = float(sum((p.grad.double() ** 2).sum() for p in dense))
        norm = (dense_sq + float(flat[at])) ** 0.5
        # clip_grad_norm_(max_norm=1.0)'s rule, on the global norm
        coef = 1.0 / (norm + 1e-6)
        if coef < 1.0:
            for p in dense + experts:
                if p.grad is not None:
                    p.grad.mul_(coef)
        opt.step()
    return {"loss": float(flat[at + 1]), "grad_norm": norm}
