"""An expert-parallel MoE layer written against DeepEP's ``Buffer`` calls, through
``moerl.ep``'s differentiable dispatch/combine: what a PyTorch training stack's MoE block
does, small enough to read.

Every rank holds the (replicated) gate and its ``num_experts / world`` local experts, each a
SiLU MLP. Forward: gate -> softmax -> top-k -> dispatch the tokens with their weights ->
every local expert runs on the rows routed to it, scaled by the row's weight -> combine
(an unweighted sum over ranks). ``moe_reference`` computes the same thing in one process
with every expert, for tests and for reading.
"""

from __future__ import annotations

from typing import Tuple

import torch

from moerl import ep


def route(gate_weight: torch.Tensor, x: torch.Tensor, topk: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(topk_idx [T, K] int64, topk_weights [T, K] fp32): the softmax's top-k, unnormalised
    (so the gate's gradient reaches every chosen logit through the weights)."""
    probs = torch.softmax(x @ gate_weight.t(), dim=-1)
    weights, idx = probs.topk(topk, dim=-1)
    return idx, weights.contiguous()


def run_experts(x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor, w_in: torch.Tensor,
                w_out: torch.Tensor) -> torch.Tensor:
    """out[t] = sum over k with topk_idx[t, k] = j >= 0 of topk_weights[t, k] * expert_j(x[t]),
    expert_j(v) = silu(v @ w_in[j]) @ w_out[j]. Ids index w_in/w_out (local ids on a rank,
    global ones in the reference); -1 is skipped."""
    out = x.new_zeros(x.shape)
    for j in range(w_in.shape[0]):
        rows, ks = (topk_idx == j).nonzero(as_tuple=True)
        if rows.numel() == 0:
            continue
        h = torch.nn.functional.silu(x[rows] @ w_in[j]) @ w_out[j]
        out = out.index_add(0, rows, h * topk_weights[rows, ks].unsqueeze(1))
    return out


class ExpertParallelMoE(torch.nn.Module):
    """The MoE block on one rank of an expert-parallel group.

    gate_weight [E, H] is replicated (its gradient is this rank's tokens' part: sum it over
    ranks as data parallelism would); w_in [L, H, F] and w_out [L, F, H] are this rank's
    experts rank*L .. rank*L+L-1, whose gradients come from every rank's tokens.
    """

    def __init__(self, buffer: ep.Buffer, gate_weight: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor,
                 topk: int) -> None:
        super().__init__()
        self.buffer = buffer
        self.topk = topk
        self.num_experts = gate_weight.shape[0]
        self.gate_weight = torch.nn.Parameter(gate_weight.clone())
        self.w_in = torch.nn.Parameter(w_in.clone())
        self.w_out = torch.nn.Parameter(w_out.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idx, weights = route(self.gate_weight, x, self.topk)
        recv_x, recv_idx, recv_w, _, handle = ep.differentiable_dispatch(self.buffer, x, idx, weights,
                                                                         self.num_experts)
        expert_out = run_experts(recv_x, recv_idx, recv_w, self.w_in, self.w_out)
        # Keeps the graph the same on every rank: a rank whose experts got no row would
        # otherwise return zeros that need no gradient, autograd would skip this layer's
        # backward there, and its collective dispatch/combine would wait for it in vain (the
        # sums of empty slices are exact zeros, never NaN).
        expert_out = expert_out + (recv_x[:0].sum() + recv_w[:0].sum())
        return ep.differentiable_combine(self.buffer, expert_out, handle)


def moe_reference(x: torch.Tensor, gate_weight: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor,
                  topk: int) -> torch.Tensor:
    """The same layer in one process: w_in [E, H, F] and w_out [E, F, H] hold every expert."""
    idx, weights = route(gate_weight, x, topk)
    return run_experts(x, idx, weights, w_in, w_out)
