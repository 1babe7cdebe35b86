"""The example MoE layer (moerl.examples.moe_layer) across 2 and 4 processes equals the
single-process layer with every expert: outputs, and the gradients of the inputs, the gate
and the expert weights. The layer is applied twice in a row, so backward also crosses a
handle whose routing is no longer the open one (moerl replays it; python/README.md)."""

import pytest
import torch
import torch.distributed as dist

import moerl.ep
from ep_harness import run_ranks
from moerl.examples.moe_layer import ExpertParallelMoE, moe_reference

HIDDEN, FFN, EXPERTS, TOPK = 32, 16, 8, 3


def tokens_of(src: int) -> int:
    return 0 if src == 1 else 5 + 7 * src  # rank 1 sends nothing but still hosts experts


def parameters():
    g = torch.Generator().manual_seed(7)
    gate = torch.randn(EXPERTS, HIDDEN, generator=g) * 0.5
    w_in = torch.randn(EXPERTS, HIDDEN, FFN, generator=g) / HIDDEN ** 0.5
    w_out = torch.randn(EXPERTS, FFN, HIDDEN, generator=g) / FFN ** 0.5
    return gate, w_in, w_out


def data(src: int):
    """Rank src's tokens and the upstream gradient of the layer's output."""
    g = torch.Generator().manual_seed(100 + src)
    return torch.randn(tokens_of(src), HIDDEN, generator=g), torch.randn(tokens_of(src), HIDDEN, generator=g)


def close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    # fp32 with a different summation order on each side: a few ulps of the magnitudes here.
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, msg=lambda m: f"{what}: {m}")


def worker(rank: int, world: int) -> None:
    gate, w_in, w_out = parameters()
    local = EXPERTS // world
    mine = slice(rank * local, (rank + 1) * local)

    # The reference: every rank's tokens through one process holding every expert.
    all_x = [data(s)[0].requires_grad_() for s in range(world)]
    ref_params = [p.clone().requires_grad_() for p in (gate, w_in, w_out)]
    ref_loss = 0
    ref_y = []
    for s in range(world):
        y = moe_reference(moe_reference(all_x[s], *ref_params, TOPK), *ref_params, TOPK)
        ref_y.append(y.detach())
        ref_loss = ref_loss + (y * data(s)[1]).sum()
    ref_loss.backward()

    buf = moerl.ep.Buffer(dist.group.WORLD, num_nvl_bytes=1 << 22, op_timeout_ms=30000)
    layer = ExpertParallelMoE(buf, gate, w_in[mine], w_out[mine], TOPK)
    x, upstream = data(rank)
    x.requires_grad_()
    y = layer(layer(x))
    (y * upstream).sum().backward()

    close(y.detach(), ref_y[rank], "output")
    if tokens_of(rank):
        close(x.grad, all_x[rank].grad, "input gradient")
    else:  # the reference's empty input is not even in its graph
        assert x.grad is None or x.grad.numel() == 0
    close(layer.w_in.grad, ref_params[1].grad[mine], "w_in gradient")
    close(layer.w_out.grad, ref_params[2].grad[mine], "w_out gradient")
    # The gate is replicated: its full gradient is the sum of every rank's part.
    gate_grad = layer.gate_weight.grad.clone()
    dist.all_reduce(gate_grad)
    close(gate_grad, ref_params[0].grad, "gate gradient")
    assert float(gate_grad.abs().sum()) > 0 and float(layer.w_in.grad.abs().sum()) > 0


@pytest.mark.parametrize("world", [2, 4])
def test_moe_layer_forward_and_backward_equal_the_single_process_reference(world: int) -> None:
    run_ranks(worker, world, timeout_s=90)
