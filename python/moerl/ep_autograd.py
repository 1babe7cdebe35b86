"""Dispatch and combine of ``moerl.ep.Buffer`` as ``torch.autograd.Function``s.

The pair is each other's adjoint, which is how Megatron's flex dispatcher uses DeepEP:

- dispatch copies token t to every rank it is routed to, so the gradient of token t is the
  sum of the gradients of its copies: a combine of the received rows' gradients with the
  dispatch's handle. The top-k weights travel with the rows (zeroed where the expert is not
  on the receiving rank), so their gradient is the same sum of the weight gradients, taken
  only where the expert is local (elsewhere the received weight is a constant 0).
- combine sums every rank's row of token t, so each row's gradient is token t's gradient:
  a cached dispatch (``handle=``) of the output gradient.

Both are collective: every rank must run forward and backward through the same calls in the
same order (the same layer graph on every rank gives that). Backward runs on the thread
that calls ``.backward()`` for CPU tensors, so the Buffer's one-thread rule holds.
"""

from __future__ import annotations

from typing import Any, List, Tuple

import torch


class DispatchFunction(torch.autograd.Function):
    """forward(buffer, x, topk_idx, topk_weights, num_experts) -> (recv_x, recv_topk_idx,
    recv_topk_weights, num_recv_tokens_per_expert_list, handle); differentiable in x and
    topk_weights."""

    @staticmethod
    def forward(ctx: Any, buffer: Any, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
                num_experts: int) -> Tuple[Any, ...]:
        per_rank, _, per_expert, in_rank, event = buffer.get_dispatch_layout(topk_idx, num_experts)
        recv_x, recv_idx, recv_w, counts, handle, _ = buffer.dispatch(
            x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
            topk_idx=topk_idx, topk_weights=topk_weights, previous_event=event)
        ctx.buffer = buffer
        ctx.handle = handle
        ctx.save_for_backward(recv_idx)
        ctx.mark_non_differentiable(recv_idx)
        return recv_x, recv_idx, recv_w, counts, handle

    @staticmethod
    def backward(ctx: Any, grad_recv_x: torch.Tensor, _grad_idx: Any, grad_recv_w: torch.Tensor,
                 _grad_counts: Any, _grad_handle: Any) -> Tuple[Any, ...]:
        (recv_idx,) = ctx.saved_tensors
        # Autograd materialises unused outputs' gradients as zeros (set_materialize_grads is
        # on by default), so both are tensors even on a rank whose layer ignored them: the
        # combine below is collective and must run everywhere.
        grad_w = grad_recv_w
        # A weight gradient where the expert is elsewhere belongs to a constant 0, not to w.
        grad_w = torch.where(recv_idx >= 0, grad_w, torch.zeros_like(grad_w)).contiguous()
        grad_x, grad_topk_w, _ = ctx.buffer.combine(grad_recv_x.contiguous(), ctx.handle, topk_weights=grad_w)
        return None, grad_x, None, grad_topk_w, None


class CombineFunction(torch.autograd.Function):
    """forward(buffer, x, handle) -> combined_x; differentiable in x."""

    @staticmethod
    def forward(ctx: Any, buffer: Any, x: torch.Tensor, handle: Any) -> torch.Tensor:
        combined, _, _ = buffer.combine(x, handle)
        ctx.buffer = buffer
        ctx.handle = handle
        return combined

    @staticmethod
    def backward(ctx: Any, grad_combined: torch.Tensor) -> Tuple[Any, ...]:
        grad_x = ctx.buffer.dispatch(grad_combined.contiguous(), handle=ctx.handle)[0]
        return None, grad_x, None


def dispatch(buffer: Any, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
             num_experts: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, List[int], Any]:
    """Layout and dispatch in one differentiable call: (recv_x, recv_topk_idx [local ids or -1],
    recv_topk_weights, num_recv_tokens_per_expert_list, handle). Collective."""
    return DispatchFunction.apply(buffer, x, topk_idx, topk_weights, num_experts)


def combine(buffer: Any, x: torch.Tensor, handle: Any) -> torch.Tensor:
    """The differentiable unweighted combine of rows x (in the handle's order). Collective."""
    return CombineFunction.apply(buffer, x, handle)
