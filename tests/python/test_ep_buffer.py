"""moerl.ep.Buffer across 2 and 4 processes (gloo group), checked against pure-torch
references that every rank computes alone: each rank regenerates every rank's inputs from
the same seeds, so no reference travels over the group."""

import pytest
import torch

import moerl.ep
from ep_harness import run_ranks

NUM_BYTES = 1 << 25  # holds the largest case below (64 tokens of hidden 7168 on 4 ranks)


def tokens_of(src: int, world: int) -> int:
    # Rank 1 has no tokens; the others differ, so row counts identify mistakes.
    return 0 if src == 1 else 23 + 17 * src


def inputs(src: int, world: int, case: dict):
    """Rank src's x [T, H] (column 0 = src, column 1 = token index, the rest multiples of 1/8,
    all exact in bf16), topk_idx [T, K] and topk_weights [T, K]."""
    g = torch.Generator().manual_seed(1000 * case["seed"] + src)
    num_tokens, hidden, topk, num_experts = tokens_of(src, world), case["hidden"], case["topk"], case["experts"]
    x = torch.randint(-64, 64, (num_tokens, hidden), generator=g).float() / 8
    x[:, 0] = src
    x[:, 1] = torch.arange(num_tokens).float()
    if case.get("one_expert"):
        idx = torch.full((num_tokens, topk), -1, dtype=torch.int64)
        idx[:, 0] = num_experts - 1
    else:
        idx = torch.rand(num_tokens, num_experts, generator=g).topk(topk, dim=1).indices
        if case.get("mask"):
            idx[torch.rand(num_tokens, topk, generator=g) < 0.25] = -1
    w = torch.rand(num_tokens, topk, generator=g)
    return x.to(case["dtype"]), idx, w


def reference_layout(idx: torch.Tensor, world: int, num_experts: int):
    per_rank_experts = num_experts // world
    in_rank = torch.zeros(idx.shape[0], world, dtype=torch.bool)
    for r in range(world):
        in_rank[:, r] = ((idx >= r * per_rank_experts) & (idx < (r + 1) * per_rank_experts)).any(1)
    per_expert = torch.bincount(idx[idx >= 0], minlength=num_experts).int()
    return in_rank.sum(0).int(), per_expert, in_rank


def check_case(rank: int, world: int, buf: "moerl.ep.Buffer", case: dict) -> None:
    num_experts, topk, hidden, dtype = case["experts"], case["topk"], case["hidden"], case["dtype"]
    local = num_experts // world
    all_in = [inputs(s, world, case) for s in range(world)]
    x, idx, w = all_in[rank]

    # Layout against the reference.
    per_rank, per_rdma, per_expert, in_rank, event = buf.get_dispatch_layout(idx, num_experts)
    ref_rank, ref_expert, ref_in = reference_layout(idx, world, num_experts)
    assert per_rdma is None
    assert torch.equal(per_rank, ref_rank) and torch.equal(per_expert, ref_expert) and torch.equal(in_rank, ref_in)
    event.current_stream_wait()

    align = case.get("align", 1)
    recv_x, recv_idx, recv_w, counts, handle, event = buf.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
        topk_idx=idx, topk_weights=w, expert_alignment=align, previous_event=event)
    event.current_stream_wait()

    # Every row, in DeepEP's order (source rank ascending, then token), names its source.
    expected = [(s, t) for s in range(world) for t in range(tokens_of(s, world))
                if reference_layout(all_in[s][1], world, num_experts)[2][t, rank]]
    assert recv_x.shape == (len(expected), hidden) and recv_x.dtype == dtype
    got = list(zip(recv_x[:, 0].float().int().tolist(), recv_x[:, 1].float().int().tolist()))
    assert got == expected
    assert list(zip(handle[1].tolist(), handle[3].tolist())) == expected
    prefix = torch.tensor([sum(1 for s2, _ in expected if s2 <= s) for s in range(world)], dtype=torch.int32)
    assert torch.equal(handle[0][:, rank], prefix)
    ref_idx = torch.full((len(expected), topk), -1, dtype=torch.int64)
    ref_w = torch.zeros(len(expected), topk)
    for i, (s, t) in enumerate(expected):
        assert torch.equal(recv_x[i], all_in[s][0][t])
        e = all_in[s][1][t]
        here = (e >= rank * local) & (e < (rank + 1) * local)
        ref_idx[i] = torch.where(here, e - rank * local, torch.full_like(e, -1))
        ref_w[i] = torch.where(here, all_in[s][2][t], torch.zeros(topk))
    assert torch.equal(recv_idx, ref_idx) and torch.equal(recv_w, ref_w)
    all_idx = torch.cat([a[1] for a in all_in])
    ref_counts = [int((all_idx == rank * local + j).sum()) for j in range(local)]
    assert counts == [-(-c // align) * align for c in ref_counts]

    # Cached dispatch: the same rows of another tensor, in the same order.
    recv_x2, i2, w2, c2, h2, _ = buf.dispatch(x * 2, handle=handle)
    assert (i2, w2, c2, h2) == (None, None, None, None)
    assert torch.equal(recv_x2, recv_x * 2)

    # A dispatch with another routing, then combine with the first handle (replayed routing).
    other = buf.dispatch(x, is_token_in_rank=torch.ones_like(in_rank))
    assert other[0].shape[0] == sum(tokens_of(s, world) for s in range(world))

    # Combine: every rank's "expert" scales its rows by (rank + 1) and returns them.
    bias = torch.full((x.shape[0], hidden), 0.5).to(dtype)
    combined, combined_w, _ = buf.combine(recv_x * (rank + 1), handle, topk_weights=recv_w, bias=bias)
    ref = torch.zeros(x.shape[0], hidden)
    for r in range(world):
        go = ref_in[:, r]
        ref[go] += (x[go] * (r + 1)).to(dtype).float()
    ref = (ref.to(dtype).float() + bias.float()).to(dtype)
    if dtype == torch.float32:
        assert torch.equal(combined, ref)
    else:  # one rounding of the fp32 sum, then the bias: within one bf16 step of the reference
        torch.testing.assert_close(combined.float(), ref.float(), rtol=2 ** -7, atol=0)
    assert torch.equal(combined_w, torch.where(idx >= 0, w, torch.zeros_like(w)))

    if hidden % 128 == 0:
        check_fp8(rank, world, buf, case, expected, in_rank, idx, w, per_expert)

    # Combine without weights or bias after a cached dispatch of the same routing.
    buf.dispatch(x, handle=handle)
    plain, none_w, _ = buf.combine(recv_x, handle)
    assert none_w is None
    ref_plain = torch.zeros(x.shape[0], hidden)
    for r in range(world):
        ref_plain[ref_in[:, r]] += x[ref_in[:, r]].float()
    if dtype == torch.float32:
        assert torch.equal(plain, ref_plain)
    else:
        torch.testing.assert_close(plain.float(), ref_plain.to(dtype).float(), rtol=2 ** -7, atol=0)


def fp8_inputs(src: int, world: int, case: dict):
    """Rank src's FP8 x: arbitrary e4m3 bytes (every bit pattern: dispatch only copies) and
    scales, both regenerable by every rank."""
    g = torch.Generator().manual_seed(5000 * case["seed"] + src)
    num_tokens, hidden = tokens_of(src, world), case["hidden"]
    data = torch.randint(0, 256, (num_tokens, hidden), generator=g).to(torch.uint8)
    scales = torch.rand(num_tokens, hidden // 128, generator=g)
    return data, scales


def check_fp8(rank: int, world: int, buf, case: dict, expected, in_rank, idx, w, per_expert) -> None:
    """FP8 x (uint8 e4m3 bits, fp32 scales): every received pair is its source token's, in
    the same order as the bf16 rows, plain and cached."""
    data, scales = fp8_inputs(rank, world, case)
    (recv_q, recv_s), _, _, _, handle, _ = buf.dispatch(
        (data, scales), is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
    assert recv_q.dtype == torch.uint8 and recv_s.dtype == torch.float32
    assert recv_q.shape == (len(expected), case["hidden"]) and recv_s.shape == (len(expected), case["hidden"] // 128)
    all_fp8 = {s: fp8_inputs(s, world, case) for s in {s for s, _ in expected}}
    for i, (s, t) in enumerate(expected):
        assert torch.equal(recv_q[i], all_fp8[s][0][t]) and torch.equal(recv_s[i], all_fp8[s][1][t])
    (again_q, again_s), *_ = buf.dispatch((data, scales), handle=handle)
    assert torch.equal(again_q, recv_q) and torch.equal(again_s, recv_s)


CASES = [
    dict(seed=1, dtype=torch.float32, hidden=256, topk=4, experts=16, mask=True, align=4),
    dict(seed=2, dtype=torch.bfloat16, hidden=7168, topk=8, experts=32, mask=True),
    dict(seed=3, dtype=torch.bfloat16, hidden=256, topk=2, experts=8, one_expert=True),
]


def worker(rank: int, world: int, transport: dict) -> None:
    buf = moerl.ep.Buffer(torch.distributed.group.WORLD, num_nvl_bytes=NUM_BYTES, op_timeout_ms=30000,
                          **transport)
    for case in CASES:
        check_case(rank, world, buf, case)
    report = buf.transport_report()
    # x: fp32/256, bf16/7168, bf16/256; top-k: K = 4, 8, 2; FP8 bytes as bf16/128 and /3584,
    # FP8 scales as fp32/2 and /56.
    assert len(report) == 10
    for c in report:
        if transport:
            assert (c["provider"], c["peer_paths"], c["reorder_shim"]) == ("tcp;ofi_rxm", [], True), c
        else:
            assert c["peer_paths"] == ["same_process" if r == rank else "same_host" for r in range(world)], c


@pytest.mark.parametrize("world", [2, 4])
def test_dispatch_and_combine_match_the_torch_reference(world: int) -> None:
    run_ranks(worker, world, {}, timeout_s=90)


def test_reordered_writes_over_tcp_give_the_same_results() -> None:
    # Every peer through libfabric's tcp provider with the reorder shim: nothing may rely on
    # the order in which writes land (fabric/PROTOCOL.md).
    run_ranks(worker, 2, dict(fabric_provider="tcp", fabric_paths="fabric", reorder_shim=True), timeout_s=90)


def held_views_worker(rank: int, world: int) -> None:
    """recv_x views the channel's output slot (python/README.md, "Returned tensors"): held
    ones keep their rows while later steps run, past the slots (a copy then), and after the
    Buffer is destroyed; a released slot is reused."""
    buf = moerl.ep.Buffer(torch.distributed.group.WORLD, num_nvl_bytes=NUM_BYTES, op_timeout_ms=30000,
                          explicitly_destroy=True)
    case = dict(dtype=torch.bfloat16, hidden=256, topk=2, experts=8)
    held, want, ptrs = [], [], []
    for step in range(5):
        x, idx, w = inputs(rank, world, dict(case, seed=40 + step))
        per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, case["experts"])
        recv_x, _, _, _, handle, _ = buf.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                                                  num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
        # Every row is its source's token (columns 0 and 1 say which); the sum of the rows
        # every rank returns unchanged is the token times the ranks it went to.
        y, _, _ = buf.combine(recv_x, handle)
        assert torch.equal(y.float(), x.float() * in_rank.sum(1, keepdim=True).float())
        recv_x[:, 2:] += 1  # the caller's rows: writable, the channel never reads them again
        held.append(recv_x)
        want.append(recv_x.clone())
        ptrs.append(recv_x.data_ptr())
    # Four slots, one always left free: steps 0-2 viewed slots 0-2, steps 3 and 4 were copies.
    core = buf._live_core()
    assert core.recv_views_held() == 3 and len(set(ptrs[:3])) == 3
    for got, expected in zip(held, want):
        assert torch.equal(got, expected)
    first = ptrs[0]
    del held[0], want[0]
    assert core.recv_views_held() == 2
    x, idx, w = inputs(rank, world, dict(case, seed=50))
    per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, case["experts"])
    recv_x, _, _, _, handle, _ = buf.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                                              num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
    if recv_x.shape[0]:
        assert recv_x.data_ptr() == first and core.recv_views_held() == 3  # slot 0 again
    buf.combine(recv_x, handle)
    buf.destroy()
    for got, expected in zip(held, want):
        assert torch.equal(got, expected)


def test_held_recv_x_keeps_its_rows() -> None:
    run_ranks(held_views_worker, 2, timeout_s=60)
