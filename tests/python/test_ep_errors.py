"""Bad input to moerl.ep.Buffer raises an exception naming the argument and the expectation,
before anything is sent: after every rejected call both ranks still complete a good one."""

import pytest
import torch

import moerl
import moerl.ep
from ep_harness import run_ranks


def expect(exc: type, words: str, fn, *args, **kwargs) -> None:
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert words in str(info.value), f"{words!r} not in {str(info.value)!r}"


def worker(rank: int, world: int) -> None:
    buf = moerl.ep.Buffer(torch.distributed.group.WORLD, num_nvl_bytes=1 << 20, op_timeout_ms=30000)
    idx = torch.tensor([[0, 3], [1, -1], [2, 2]])
    w = torch.ones(3, 2)
    x = torch.ones(3, 64)
    per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, 4)

    expect(ValueError, "topk_idx has dtype int32; expected int64", buf.get_dispatch_layout, idx.int(), 4)
    expect(ValueError, "topk_idx[0, 1] is 3; expected -1 (masked) or an expert id in [0, 2)",
           buf.get_dispatch_layout, idx, 2)
    expect(ValueError, "num_experts is 3; expected a positive multiple of the group size (2)",
           buf.get_dispatch_layout, idx, 3)
    expect(ValueError, "x has dtype float64; expected bfloat16 or float32", buf.dispatch, x.double(),
           is_token_in_rank=in_rank)
    expect(ValueError, "x is not contiguous", buf.dispatch, torch.ones(64, 3).t(), is_token_in_rank=in_rank)
    expect(RuntimeError, "takes CPU tensors", buf.dispatch, torch.empty(3, 64, device="meta"), is_token_in_rank=in_rank)
    expect(ValueError, "is_token_in_rank has shape (2, 2); expected (3, 2)", buf.dispatch, x,
           is_token_in_rank=in_rank[:2])
    expect(ValueError, "is_token_in_rank is None", buf.dispatch, x)
    expect(ValueError, "topk_weights has dtype bfloat16; expected float32", buf.dispatch, x,
           is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w.bfloat16())
    expect(ValueError, "pass num_nvl_bytes >= ", buf.dispatch, torch.ones(3, 1 << 14),
           is_token_in_rank=in_rank)
    expect(ValueError, "low_latency_mode=False", buf.low_latency_dispatch, x, idx, 8, 4, use_fp8=False)
    expect(TypeError, "x is list; expected a torch.Tensor", buf.dispatch, [[1.0]], is_token_in_rank=in_rank)
    expect(ValueError, "x[0] has dtype float32; expected uint8", buf.dispatch, (x, x), is_token_in_rank=in_rank)
    q = torch.zeros(3, 128, dtype=torch.uint8)
    expect(ValueError, "x[1] has shape (3, 2); expected (3, 1)", buf.dispatch, (q, torch.ones(3, 2)),
           is_token_in_rank=in_rank)
    expect(ValueError, "x[0] has shape (3, 64); expected a hidden size that is a multiple of 128", buf.dispatch,
           (q[:, :64].contiguous(), torch.ones(3, 1)), is_token_in_rank=in_rank)

    recv_x, recv_idx, recv_w, counts, handle, _ = buf.dispatch(
        x, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
    expect(ValueError, "x has 2 rows; expected", buf.combine, recv_x[:2], handle)
    expect(ValueError, "handle is tuple; expected the handle a dispatch of this Buffer returned", buf.combine,
           recv_x, tuple(handle))
    expect(ValueError, "topk_idx/topk_weights are given with handle=", buf.dispatch, x, handle=handle,
           topk_idx=idx)
    combined, _, _ = buf.combine(recv_x, handle)
    assert torch.equal(combined, x * in_rank.sum(1, keepdim=True))

    check_low_latency_errors(x, idx, w)

    # Destroyed: calls say so; a new Buffer on the same group works.
    old = moerl.ep.Buffer(torch.distributed.group.WORLD, num_nvl_bytes=1 << 20, explicitly_destroy=True)
    old.destroy()
    expect(RuntimeError, "destroyed", old.dispatch, x, is_token_in_rank=in_rank)
    expect(ValueError, "handle comes from another Buffer", old.combine, recv_x, handle)
    again = moerl.ep.Buffer(torch.distributed.group.WORLD, num_nvl_bytes=1 << 20)
    assert torch.equal(again.dispatch(x, is_token_in_rank=in_rank)[0], recv_x)


def check_low_latency_errors(x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor) -> None:
    buf = moerl.ep.Buffer(torch.distributed.group.WORLD, low_latency_mode=True, op_timeout_ms=30000)
    ll = buf.low_latency_dispatch
    expect(NotImplementedError, "round_scale/use_ue8m0", ll, x, idx, 8, 4, use_fp8=True, round_scale=True)
    expect(ValueError, "x has dtype float64; expected bfloat16 or float32", ll, x.double(), idx, 8, 4, use_fp8=False)
    expect(ValueError, "topk_idx has dtype int32; expected int64", ll, x, idx.int(), 8, 4, use_fp8=False)
    expect(ValueError, "topk_idx has shape (2, 2); expected 3 rows", ll, x, idx[:2], 8, 4, use_fp8=False)
    expect(ValueError, "x has 3 tokens; expected at most num_max_dispatch_tokens_per_rank (2)", ll, x, idx, 2, 4,
           use_fp8=False)
    expect(ValueError, "num_max_dispatch_tokens_per_rank is 0; expected an int >= 1", ll, x, idx, 0, 4,
           use_fp8=False)
    expect(ValueError, "topk_idx[0, 1] is 3; expected -1 (masked) or an expert id in [0, 2)", ll, x, idx, 8, 2,
           use_fp8=False)
    expect(ValueError, "cumulative_local_expert_recv_stats has shape (3,); expected (2,)", ll, x, idx, 8, 4,
           cumulative_local_expert_recv_stats=torch.zeros(3, dtype=torch.int32), use_fp8=False)
    expect(ValueError, "async_finish and return_recv_hook are both True", ll, x, idx, 8, 4, use_fp8=False,
           async_finish=True, return_recv_hook=True)
    expect(RuntimeError, "takes CPU tensors", ll, torch.empty(3, 64, device="meta"), idx, 8, 4, use_fp8=False)
    lb = buf.get_low_latency_dispatch_buffer
    expect(ValueError, "hidden is 0; expected an int >= 1", lb, 8, 0, 4, 2)
    expect(ValueError, "topk is -1; expected an int >= 1", lb, 8, 64, 4, -1)
    expect(ValueError, "num_experts is 3; expected a positive multiple of the group size (2)", lb, 8, 64, 3, 2)
    expect(ValueError, "dtype is torch.float64; expected torch.bfloat16 or torch.float32", lb, 8, 64, 4, 2,
           torch.float64)
    plain = moerl.ep.Buffer(torch.distributed.group.WORLD, num_nvl_bytes=1 << 20)
    expect(ValueError, "low_latency_mode=False", plain.get_low_latency_dispatch_buffer, 8, 64, 4, 2)

    recv_x, count, handle, _, _ = ll(x, idx, 8, 4, use_fp8=False)
    lc = buf.low_latency_combine
    expect(ValueError, "x has shape (2, 16, 32); expected (2, 16, 64)", lc, recv_x[:, :, :32].contiguous(), idx, w,
           handle)
    expect(ValueError, "x has dtype bfloat16; expected float32", lc, recv_x.bfloat16(), idx, w, handle)
    expect(ValueError, "topk_weights has dtype float64; expected float32", lc, recv_x, idx, w.double(), handle)
    expect(ValueError, "topk_idx has shape (3, 1); expected (3, 2)", lc, recv_x, idx[:, :1].contiguous(), w, handle)
    expect(ValueError, "out has shape (3, 32); expected (3, 64)", lc, recv_x, idx, w, handle, out=torch.empty(3, 32))
    expect(ValueError, "handle is tuple; expected the handle a low_latency_dispatch", lc, recv_x, idx, w,
           tuple(handle))
    expect(NotImplementedError, "use_logfmt=True", lc, recv_x, idx, w, handle, use_logfmt=True)
    # A wrong routing cannot be refused before sending (it is the same shape), but it is
    # refused before anything else is sent for the combine.
    other = torch.where(idx == 0, torch.full_like(idx, 1), idx)
    expect(ValueError, "topk_idx differs from the one the handle's low_latency_dispatch was given", lc, recv_x, other,
           w, handle)
    # An id out of range: refused by the binding before the comparison and before any send.
    bad = idx.clone()
    bad[0, 1] = 9
    expect(ValueError, "topk_idx[0, 1] is 9; expected -1 (masked) or an expert id in [0, 4)", lc, recv_x, bad, w,
           handle)
    combined, _, _ = lc(recv_x, idx, w, handle)
    assert torch.equal(combined, x * torch.where(idx >= 0, w, torch.zeros_like(w)).sum(1, keepdim=True))

    # Tokens that name expert 0 twice: each source's 4 entries fit rank 0's slots for it, but
    # together they overflow expert 0's block of num_ranks * 2 rows. Rank 0 raises naming the
    # cause, rank 1 (nothing received) does not, and the channel goes on working for both.
    twice = torch.zeros(2, 2, dtype=torch.int64)
    if torch.distributed.get_rank() == 0:
        expect(ValueError, "does a token name one expert twice in topk_idx?", ll, x[:2], twice, 2, 4, use_fp8=False)
    else:
        ll(x[:2], twice, 2, 4, use_fp8=False)
    buf.clean_low_latency_buffer(2, x.shape[1], 4)
    recv_x, _, handle, _, _ = ll(x[:2], idx[:2], 2, 4, use_fp8=False)
    combined, _, _ = lc(recv_x, idx[:2], w[:2], handle)
    assert torch.equal(combined, x[:2] * torch.where(idx[:2] >= 0, w[:2], torch.zeros_like(w[:2])).sum(1, keepdim=True))


def test_bad_input_is_refused_before_anything_is_sent() -> None:
    run_ranks(worker, 2, timeout_s=60)


def test_package_reports_version_and_provenance() -> None:
    prov = moerl.provenance()
    assert prov["version"] == moerl.__version__
    assert {"commit", "compiler", "build_type", "libfabric", "host"} <= set(prov)
    assert any(p["name"] for p in prov["libfabric"]["providers"])
