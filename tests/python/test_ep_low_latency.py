"""moerl.ep.Buffer's low-latency calls across 2 and 4 processes (gloo group) against what
DeepEP's test_low_latency.py checks, with references every rank computes alone from the same
seeds: per-expert receive counts (and the cumulative statistics), every valid row names its
source rank and token, layout_range's blocks, and the weighted combine; with out=, zero-copy,
the receive hook, two dispatches in a row, masked entries and a rank without tokens; and the
FP8 dispatch (e4m3 bits and scales in DeepEP's layout) against the bf16 one."""

import pytest
import torch

import moerl.ep
from ep_harness import run_ranks

MAX_TOKENS = 40  # num_max_dispatch_tokens_per_rank


def tokens_of(src: int) -> int:
    return 0 if src == 1 else 11 + 9 * src  # rank 1 sends nothing; at most MAX_TOKENS


def inputs(src: int, case: dict):
    """Rank src's x [T, H] (column 0 = src, column 1 = token, the rest multiples of 1/8: exact
    in bf16), topk_idx [T, K] with about a fifth of the entries masked, weights [T, K]."""
    g = torch.Generator().manual_seed(1000 * case["seed"] + src)
    num_tokens, hidden, topk, num_experts = tokens_of(src), case["hidden"], case["topk"], case["experts"]
    x = torch.randint(-64, 64, (num_tokens, hidden), generator=g).float() / 8
    x[:, 0] = src
    x[:, 1] = torch.arange(num_tokens).float()
    idx = torch.rand(num_tokens, num_experts, generator=g).topk(topk, dim=1).indices
    idx[torch.rand(num_tokens, topk, generator=g) < 0.2] = -1
    w = torch.rand(num_tokens, topk, generator=g)
    return x.to(case["dtype"]), idx, w


def check_dispatch(rank: int, world: int, case: dict, all_in, recv_x, recv_count, handle) -> None:
    num_experts, hidden = case["experts"], case["hidden"]
    local = num_experts // world
    src_info, layout_range, m, h, e = handle
    assert (m, h, e) == (MAX_TOKENS, hidden, num_experts)
    assert recv_x.shape == (local, world * MAX_TOKENS, hidden) and recv_x.dtype == case["dtype"]
    assert recv_count.dtype == torch.int32 and layout_range.shape == (local, world)
    for j in range(local):
        expert = rank * local + j
        # Every source's entries for this expert (a token naming the expert once per row).
        want = {s: sorted(int(t) for t in (all_in[s][1] == expert).nonzero()[:, 0]) for s in range(world)}
        assert int(recv_count[j]) == sum(len(v) for v in want.values())
        valid = recv_x[j, :int(recv_count[j])].float()
        seen = 0
        for s in range(world):
            begin, count = int(layout_range[j, s]) >> 32, int(layout_range[j, s]) & 0xFFFFFFFF
            assert count == len(want[s]), (j, s)
            if count == 0:
                continue
            rows = valid[begin:begin + count]
            assert bool((rows[:, 0] == s).all())
            tokens = rows[:, 1].int().tolist()
            assert sorted(tokens) == want[s]
            assert src_info[j, begin:begin + count].tolist() == tokens
            for i, t in enumerate(tokens):
                assert torch.equal(rows[i], all_in[s][0][t].float())
            seen += count
        assert seen == int(recv_count[j])


def expert_outputs(rank: int, world: int, case: dict, recv_x: torch.Tensor) -> torch.Tensor:
    """A stand-in for the experts: local expert j scales its rows by (global id + 1), so a row
    returned to the wrong (token, k) changes the result."""
    local = case["experts"] // world
    scale = torch.arange(rank * local + 1, (rank + 1) * local + 1, dtype=torch.float32).view(-1, 1, 1)
    return (recv_x.float() * scale).to(case["dtype"])


def reference_combine(case: dict, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    acc = torch.zeros(x.shape, dtype=torch.float32)
    for k in range(idx.shape[1]):
        e = idx[:, k]
        term = (x.float() * (e + 1).float().unsqueeze(1)).to(case["dtype"]).float()
        acc += torch.where((e >= 0).unsqueeze(1), w[:, k:k + 1] * term, torch.zeros_like(term))
    return acc.to(case["dtype"])


def check_combine(case: dict, got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    assert not bool(got.float().isnan().any())
    if case["dtype"] == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    else:  # one rounding of the fp32 sum: within one bf16 step
        torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -7, atol=2 ** -7)


def check_case(rank: int, world: int, buf: "moerl.ep.Buffer", case: dict) -> None:
    num_experts = case["experts"]
    local = num_experts // world
    all_in = [inputs(s, case) for s in range(world)]
    x, idx, w = all_in[rank]
    stats = torch.zeros(local, dtype=torch.int32)

    recv_x, recv_count, handle, event, hook = buf.low_latency_dispatch(
        x, idx, MAX_TOKENS, num_experts, cumulative_local_expert_recv_stats=stats, use_fp8=False)
    assert hook is None
    event.current_stream_wait()
    check_dispatch(rank, world, case, all_in, recv_x, recv_count, handle)
    assert torch.equal(stats, recv_count)

    # A second dispatch (other tokens, same routing) before the first is combined, with the
    # receive hook; then both are combined, the first with out=, the second zero-copy.
    recv_x2, recv_count2, handle2, _, hook2 = buf.low_latency_dispatch(
        x * 2, idx, MAX_TOKENS, num_experts, cumulative_local_expert_recv_stats=stats, use_fp8=False,
        return_recv_hook=True)
    hook2()
    assert torch.equal(stats, 2 * recv_count) and torch.equal(recv_count2, recv_count)
    valid = [recv_x2[j, :int(recv_count[j])] for j in range(local)]
    assert all(torch.equal(v.float(), 2 * recv_x[j, :int(recv_count[j])].float()) for j, v in enumerate(valid))

    out = torch.full((x.shape[0], case["hidden"]), float("nan"), dtype=case["dtype"])
    combined, event, hook = buf.low_latency_combine(expert_outputs(rank, world, case, recv_x), idx, w, handle,
                                                    out=out)
    assert combined is out and hook is None
    check_combine(case, combined, reference_combine(case, x, idx, w))

    target = buf.get_next_low_latency_combine_buffer(handle2)
    target.copy_(expert_outputs(rank, world, case, recv_x2))
    w2 = w.flip(1).contiguous()  # other weights than the first combine's
    combined2, _, hook = buf.low_latency_combine(torch.empty(0), idx, w2, handle2, zero_copy=True,
                                                 return_recv_hook=True)
    hook()
    check_combine(case, combined2, reference_combine(case, x * 2, idx, w2))

    # After a clean, the next round starts afresh.
    buf.clean_low_latency_buffer(MAX_TOKENS, case["hidden"], num_experts)
    recv_x3, _, handle3, _, _ = buf.low_latency_dispatch(x, idx, MAX_TOKENS, num_experts, use_fp8=False)
    check_dispatch(rank, world, case, all_in, recv_x3, recv_count, handle3)
    combined3, _, _ = buf.low_latency_combine(expert_outputs(rank, world, case, recv_x3), idx, w, handle3)
    check_combine(case, combined3, reference_combine(case, x, idx, w))

    # The latest dispatch's combine buffer is the channel's own combine memory (the combine
    # copies nothing, same-host peers read it in place), the same memory for every such handle
    # of the shape; an older handle's (target, above) is the Buffer's own tensor. (Host
    # channels only: test_ep_cuda runs these checks on the device path, which keeps the
    # Buffer's own tensor.)
    host_channel = isinstance(buf, moerl.ep.Buffer)
    recv_x4, _, handle4, _, _ = buf.low_latency_dispatch(x, idx, MAX_TOKENS, num_experts, use_fp8=False)
    view = buf.get_next_low_latency_combine_buffer(handle4)
    assert view.shape == target.shape and (view.data_ptr() != target.data_ptr() or not host_channel)
    view.copy_(expert_outputs(rank, world, case, recv_x4))
    combined4, _, _ = buf.low_latency_combine(torch.empty(0), idx, w2, handle4, zero_copy=True)
    check_combine(case, combined4, reference_combine(case, x, idx, w2))
    recv_x5, _, handle5, _, _ = buf.low_latency_dispatch(x * 2, idx, MAX_TOKENS, num_experts, use_fp8=False)
    view5 = buf.get_next_low_latency_combine_buffer(handle5)
    assert view5.data_ptr() == view.data_ptr() or not host_channel
    view5.copy_(expert_outputs(rank, world, case, recv_x5))
    combined5, _, _ = buf.low_latency_combine(torch.empty(0), idx, w, handle5, zero_copy=True)
    check_combine(case, combined5, reference_combine(case, x * 2, idx, w))
    if host_channel:
        check_zero_copy_dispatch(rank, world, buf, case, all_in)


def check_zero_copy_dispatch(rank: int, world: int, buf: "moerl.ep.Buffer", case: dict, all_in) -> None:
    """get_low_latency_dispatch_buffer: with no step open it is the channel's own token memory
    (the address the binding reads x from without a copy), the same every time; tokens written
    there (also a slice not at its start, which overlaps where the rows go) arrive as from
    any x; with a step open it is the Buffer's own tensor, copied like any x."""
    num_experts, hidden, dtype = case["experts"], case["hidden"], case["dtype"]
    x, idx, w = all_in[rank]
    num_tokens, topk = x.shape[0], idx.shape[1]
    core = buf._live_core()
    tokens = buf.get_low_latency_dispatch_buffer(MAX_TOKENS, hidden, num_experts, topk, dtype)
    assert tokens.shape == (MAX_TOKENS, hidden) and tokens.dtype == dtype
    address = core.ll_dispatch_buffer(hidden, 0 if dtype == torch.bfloat16 else 1, MAX_TOKENS, num_experts, topk, 0)
    assert address != 0 and tokens.data_ptr() == address
    assert buf.get_low_latency_dispatch_buffer(MAX_TOKENS, hidden, num_experts, topk, dtype).data_ptr() == address
    def other_values(xs: torch.Tensor) -> torch.Tensor:  # columns 0 and 1 still name source and token
        out = xs.clone()
        out[:, 2:] *= 3  # multiples of 1/8 below 24 in magnitude: exact in bf16
        return out

    scaled = [(other_values(xs), i, ws) for xs, i, ws in all_in]
    x3 = scaled[rank][0]
    for step, first in enumerate((0, 1)):  # x at the buffer's start (no copy), then a row later
        tokens[first:first + num_tokens] = x3
        recv_x, recv_count, handle, _, _ = buf.low_latency_dispatch(tokens[first:first + num_tokens], idx,
                                                                    MAX_TOKENS, num_experts, use_fp8=False)
        check_dispatch(rank, world, case, scaled, recv_x, recv_count, handle)
        # A step is open: not the channel's memory now (writing it would change what peers
        # may still be reading), and dispatching from it copies.
        other = buf.get_low_latency_dispatch_buffer(MAX_TOKENS, hidden, num_experts, topk, dtype)
        assert other.data_ptr() != address, step
        buf.get_next_low_latency_combine_buffer(handle).copy_(expert_outputs(rank, world, case, recv_x))
        combined, _, _ = buf.low_latency_combine(torch.empty(0), idx, w, handle, zero_copy=True)
        check_combine(case, combined, reference_combine(case, x3, idx, w))
    other[:num_tokens] = x
    recv_x, recv_count, handle, _, _ = buf.low_latency_dispatch(other[:num_tokens], idx, MAX_TOKENS, num_experts,
                                                                use_fp8=False)
    check_dispatch(rank, world, case, all_in, recv_x, recv_count, handle)
    combined, _, _ = buf.low_latency_combine(expert_outputs(rank, world, case, recv_x), idx, w, handle)
    check_combine(case, combined, reference_combine(case, x, idx, w))
    with pytest.raises(ValueError, match="dtype is torch.float16"):
        buf.get_low_latency_dispatch_buffer(MAX_TOKENS, hidden, num_experts, topk, torch.float16)


def e4m3_table() -> torch.Tensor:
    """The value of every e4m3fn code (1 sign, 4 exponent bits with bias 7, 3 mantissa
    bits; 0x7f/0xff are NaN), written from the format's definition."""
    values = []
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exp, man = (code >> 3) & 0xF, code & 7
        if exp == 15 and man == 7:
            values.append(float("nan"))
        elif exp == 0:
            values.append(sign * man / 8 * 2.0 ** -6)
        else:
            values.append(sign * (1 + man / 8) * 2.0 ** (exp - 7))
    return torch.tensor(values)


def check_fp8(rank: int, world: int, buf: "moerl.ep.Buffer", case: dict) -> None:
    """use_fp8=True: the same rows as a bf16 dispatch, as e4m3 bits and per-128-channel scales
    (block amax / 448) laid out as DeepEP's; the bf16 combine still works on its handle."""
    x, idx, w = inputs(rank, case)
    num_experts, hidden = case["experts"], case["hidden"]
    plain, count, handle, _, _ = buf.low_latency_dispatch(x, idx, MAX_TOKENS, num_experts, use_fp8=False)
    (q, scales), count8, handle8, _, _ = buf.low_latency_dispatch(x, idx, MAX_TOKENS, num_experts)
    local, blocks = num_experts // world, hidden // 128
    assert q.dtype == torch.uint8 and q.shape == (local, world * MAX_TOKENS, hidden)
    assert scales.dtype == torch.float32 and scales.shape == (local, world * MAX_TOKENS, blocks)
    assert scales.stride() == (blocks * world * MAX_TOKENS, 1, world * MAX_TOKENS)  # column-major
    assert torch.equal(count8, count)
    assert all(torch.equal(handle8[0][j, :int(count[j])], handle[0][j, :int(count[j])]) for j in range(local))
    assert torch.equal(handle8[1], handle[1])
    table = e4m3_table()
    for j in range(local):
        n = int(count[j])
        rows = plain[j, :n].float().view(n, blocks, 128)
        want_scales = rows.abs().amax(2) / 448
        want_scales[want_scales == 0] = 1
        assert torch.equal(scales[j, :n], want_scales)
        values = table[q[j, :n].long()].view(n, blocks, 128)
        assert not bool(values.isnan().any())
        deq = values * scales[j, :n].unsqueeze(2)
        bound = rows.abs() * 2 ** -4 + scales[j, :n].unsqueeze(2) * 2 ** -9
        assert bool(((deq - rows).abs() <= bound).all())
    combined, _, _ = buf.low_latency_combine(expert_outputs(rank, world, case, plain), idx, w, handle8)
    check_combine(case, combined, reference_combine(case, x, idx, w))


CASES = [
    dict(seed=1, dtype=torch.float32, hidden=128, topk=4, experts=16),
    dict(seed=2, dtype=torch.bfloat16, hidden=7168, topk=8, experts=32),
    dict(seed=3, dtype=torch.bfloat16, hidden=256, topk=3, experts=8),
]


def worker(rank: int, world: int, transport: dict) -> None:
    buf = moerl.ep.Buffer(torch.distributed.group.WORLD, num_rdma_bytes=1 << 20, low_latency_mode=True,
                          op_timeout_ms=30000, **transport)
    for case in CASES:
        check_case(rank, world, buf, case)
        if case["dtype"] == torch.bfloat16:
            check_fp8(rank, world, buf, case)
    names = [c["channel"] for c in buf.transport_report()]
    assert sorted(names) == ["ll:bf16:256:m40:e8:k3", "ll:bf16:7168:m40:e32:k8", "ll:fp32:128:m40:e16:k4"]


@pytest.mark.parametrize("world", [2, 4])
def test_low_latency_dispatch_and_combine_match_the_reference(world: int) -> None:
    run_ranks(worker, world, {}, timeout_s=90)


def test_low_latency_through_reordered_tcp_writes() -> None:
    run_ranks(worker, 2, dict(fabric_provider="tcp", fabric_paths="fabric", reorder_shim=True), timeout_s=90)



def pooled_combine_worker(rank: int, world: int) -> None:
    # No num_nvl_bytes/num_rdma_bytes (DeepEP callers often pass only the hint's, or none):
    # the Buffer's pool still keeps the combine outputs' blocks, so a decode loop's combines
    # reuse pages instead of mapping, faulting and unmapping 2 MiB each step.
    buf = moerl.ep.Buffer(torch.distributed.group.WORLD, low_latency_mode=True, op_timeout_ms=30000)
    tokens, hidden, experts = 64, 8192, 2 * world  # a [64, 8192] bf16 output: 1 MiB, pooled
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(tokens, hidden, generator=g).bfloat16()
    idx = torch.randint(0, experts, (tokens, 1), generator=g)
    w = torch.ones(tokens, 1)
    core = buf._live_core()
    assert core.cached_host_bytes() == 0
    for step in range(3):
        recv_x, _, handle, _, _ = buf.low_latency_dispatch(x, idx, tokens, experts, use_fp8=False)
        y, _, _ = buf.low_latency_combine(recv_x, idx, w, handle)
        assert torch.equal(y, x), step
        del y  # its block goes back to the pool, and the next step's combine takes it
        assert core.cached_host_bytes() >= 1 << 20, (step, core.cached_host_bytes())


def test_low_latency_combine_outputs_reuse_the_pool_without_a_byte_budget() -> None:
    run_ranks(pooled_combine_worker, 2, timeout_s=60)
