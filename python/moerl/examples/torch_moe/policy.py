"""The policy: a small MoE language model over the `sort` task's 16-token vocabulary.

Each step's input is what a sorter needs and no more: a bag of the prompt's token embeddings
(order does not matter to sorting), a bag of the tokens generated so far and the position's
embedding; a gated mixture of SiLU experts (top-k routing, `moerl.examples.moe_layer`) over
that, then the logits. With more than one rank the experts are sharded over an expert-parallel
group through `moerl.ep.Buffer` (`ExpertParallelMoE`); in one process they run locally."""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from moerl.examples.moe_layer import ExpertParallelMoE, moe_reference
from moerl.examples.torch_moe.task import MAX_NEW, TOK_DIGIT0, TOK_EOS, VOCAB, sort_reward

__all__ = ["MAX_NEW", "TOK_DIGIT0", "TOK_EOS", "VOCAB", "SortPolicy", "expert_buffer",
           "random_prompt", "sort_reward"]

# Tokens one rank's MoE call may carry (a trainer step's rows on a rank: about an iteration's
# groups x ledger.group_size / ranks, 64 in configs/torch-moe.yaml on 2 ranks; a rollout
# lease's rows on a rank: fewer); the Buffer is sized for them (python/README.md, "Capacity").
MAX_TOKENS_PER_RANK = 4096


def expert_buffer(world_size: int, process_group: object, hidden: int = 64) -> Optional[object]:
    """A moerl.ep.Buffer over a group's ranks (a trainer group's, a rollout group's: the
    worker's ``process_group``), None for one process: the policy's experts are sharded over
    it."""
    if world_size <= 1:
        return None
    from moerl import ep
    row_bytes = hidden * 4 + 64
    return ep.Buffer(process_group, num_nvl_bytes=3 * world_size * row_bytes * MAX_TOKENS_PER_RANK)


class MoE(nn.Module):
    """Top-k gated experts; `buffer` (a moerl.ep.Buffer over >1 rank) shards them."""

    def __init__(self, hidden: int, ffn: int, num_experts: int, topk: int,
                 buffer: Optional[object] = None) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(7)
        gate = torch.randn(num_experts, hidden, generator=g) * 0.02
        w_in = torch.randn(num_experts, hidden, ffn, generator=g) / math.sqrt(hidden)
        w_out = torch.randn(num_experts, ffn, hidden, generator=g) / math.sqrt(ffn)
        self.topk = topk
        if buffer is not None and getattr(buffer, "group_size", 1) > 1:
            rank, world = buffer.rank, buffer.group_size
            local = num_experts // world
            self.ep = ExpertParallelMoE(buffer, gate, w_in[rank * local:(rank + 1) * local],
                                        w_out[rank * local:(rank + 1) * local], topk)
        else:
            self.ep = None
            self.gate_weight = nn.Parameter(gate)
            self.w_in = nn.Parameter(w_in)
            self.w_out = nn.Parameter(w_out)

    def expert_ids(self) -> range:
        """The global ids of the experts this module holds (all of them in one process)."""
        if self.ep is None:
            return range(self.w_in.shape[0])
        n = self.ep.w_in.shape[0]
        return range(self.ep.buffer.rank * n, self.ep.buffer.rank * n + n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ep is not None:
            return self.ep(x)
        return moe_reference(x, self.gate_weight, self.w_in, self.w_out, self.topk)


class SortPolicy(nn.Module):
    def __init__(self, hidden: int = 64, ffn: int = 64, num_experts: int = 4, topk: int = 2,
                 buffer: Optional[object] = None) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.prompt_emb = nn.Embedding(VOCAB, hidden)
        self.done_emb = nn.Embedding(VOCAB, hidden)
        self.pos_emb = nn.Embedding(MAX_NEW + 1, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.moe = MoE(hidden, ffn, num_experts, topk, buffer)
        self.out = nn.Linear(hidden, VOCAB)

    def published_state(self) -> Dict[str, torch.Tensor]:
        """This rank's part of a published version under the one-process policy's names: the
        dense tensors whole (replicated on every rank) and each expert j it holds as
        ``moe.w_in.<j>`` / ``moe.w_out.<j>`` (global j), so that the ranks' parts are disjoint
        but for the replicated tensors (moerl.worker.Trainer.publish takes their union);
        ``load_published`` puts them back together."""
        out: Dict[str, torch.Tensor] = {}
        for k, v in self.state_dict().items():
            if k.startswith("moe."):
                continue
            out[k] = v
        moe = self.moe.ep if self.moe.ep is not None else self.moe
        out["moe.gate_weight"] = moe.gate_weight.detach()
        for local, j in enumerate(self.moe.expert_ids()):
            out[f"moe.w_in.{j}"] = moe.w_in.detach()[local]
            out[f"moe.w_out.{j}"] = moe.w_out.detach()[local]
        return out

    def load_published(self, named: Dict[str, torch.Tensor]) -> None:
        """Loads a published version: a one-process state_dict as is, or the per-expert form
        of ``published_state`` (a trainer group's), the experts stacked. An expert-parallel
        policy (a rollout group's rank) takes the dense tensors and its own experts only."""
        if "moe.w_in" not in named and "moe.w_in.0" in named:
            named = dict(named)
            for w in ("w_in", "w_out"):
                ids = sorted(int(k.rsplit(".", 1)[1]) for k in named if k.startswith(f"moe.{w}."))
                if ids != list(range(len(ids))):
                    raise ValueError(f"published experts moe.{w}.<j> are {ids}; "
                                     f"expected 0..{len(ids) - 1}")
                named[f"moe.{w}"] = torch.stack([named.pop(f"moe.{w}.{j}") for j in ids])
        if self.moe.ep is not None:
            named = dict(named)
            mine = list(self.moe.expert_ids())
            named["moe.ep.gate_weight"] = named.pop("moe.gate_weight")
            for w in ("w_in", "w_out"):
                named[f"moe.ep.{w}"] = named.pop(f"moe.{w}")[mine[0]:mine[-1] + 1]
        self.load_state_dict(named)

    def logits(self, prompts: torch.Tensor, done: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """prompts [B, P] ids; done [B, VOCAB] counts of the tokens generated so far; pos [B]."""
        x = self.prompt_emb(prompts).sum(1) + done @ self.done_emb.weight + self.pos_emb(pos)
        x = self.norm(x)
        return self.out(x + self.moe(x))

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], temperature: float = 1.0,
                 rng: Optional[torch.Generator] = None,
                 prompt_len: Optional[int] = None) -> Tuple[List[List[int]], List[List[float]]]:
        """One completion per prompt (stopping at EOS or MAX_NEW tokens) and the logprob of
        each sampled token under this policy (the behaviour logprobs). Expert-parallel ranks
        each pass their own rows (``prompt_len`` for a rank with none): every rank runs all
        MAX_NEW positions, since each position's MoE call is collective."""
        if prompt_len is None:
            prompt_len = len(prompts[0])
        p = torch.tensor([list(x) for x in prompts], dtype=torch.long).reshape(-1, prompt_len)
        b = p.shape[0]
        done = torch.zeros(b, VOCAB)
        alive = torch.ones(b, dtype=torch.bool)
        toks: List[List[int]] = [[] for _ in range(b)]
        lps: List[List[float]] = [[] for _ in range(b)]
        for t in range(MAX_NEW):
            logp = torch.log_softmax(self.logits(p, done, torch.full((b,), t)) / temperature, -1)
            nxt = (torch.multinomial(logp.exp(), 1, generator=rng).squeeze(1) if b
                   else torch.zeros(0, dtype=torch.long))  # an EP rank with no rows
            chosen = logp.gather(1, nxt.unsqueeze(1)).squeeze(1)
            for i in torch.nonzero(alive).flatten().tolist():
                toks[i].append(int(nxt[i]))
                lps[i].append(min(0.0, float(chosen[i])))
            done[torch.arange(b), nxt] += alive.float()
            alive &= nxt != TOK_EOS
            if not alive.any() and self.moe.ep is None:
                break
        return toks, lps

    def token_logprobs(self, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                       temperature: float = 1.0, t_max: Optional[int] = None,
                       prompt_len: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """(logprobs [B, T], mask [B, T]) of the given completions under this policy
        (differentiable), T the longest completion or `t_max`. Expert-parallel ranks pass the
        whole batch's t_max (and prompt_len, for a rank with no rows): every rank must make the
        same number of MoE calls."""
        b = len(completions)
        if t_max is None:
            t_max = max(len(c) for c in completions)
        if prompt_len is None:
            prompt_len = len(prompts[0])
        p = torch.tensor([list(x) for x in prompts], dtype=torch.long).reshape(b, prompt_len)
        tok = torch.zeros(b, t_max, dtype=torch.long)
        mask = torch.zeros(b, t_max)
        for i, c in enumerate(completions):
            tok[i, :len(c)] = torch.tensor(c, dtype=torch.long)
            mask[i, :len(c)] = 1
        done = torch.zeros(b, VOCAB)
        out = []
        for t in range(t_max):
            logp = torch.log_softmax(self.logits(p, done, torch.full((b,), t)) / temperature, -1)
            out.append(logp.gather(1, tok[:, t:t + 1]).squeeze(1))
            done = done + nn.functional.one_hot(tok[:, t], VOCAB).float() * mask[:, t:t + 1]
        return torch.stack(out, 1), mask


def random_prompt(rng: torch.Generator, digits: int = 3) -> List[int]:
    """"^ s d1..dk =" as the task makes it (policy/task_sort.cpp)."""
    d = torch.randint(0, 10, (digits,), generator=rng).tolist()
    return [1, 15] + [TOK_DIGIT0 + x for x in d] + [14]
