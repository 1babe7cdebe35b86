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
    expect(RuntimeError, "CPU-only", buf.dispatch, torch.empty(3, 64, device="meta"), is_token_in_rank=in_rank)
    expect(ValueError, "is_token_in_rank has shape (2, 2); expected (3, 2)", buf.dispatch, x,
           is_token_in_rank=in_rank[:2])
    expect(ValueError, "is_token_in_rank is None", buf.dispatch, x)
    expect(ValueError, "topk_weights has dtype bfloat16; expected float32", buf.dispatch, x,
           is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w.bfloat16())
    expect(ValueError, "pass num_nvl_bytes >= ", buf.dispatch, torch.ones(3, 1 << 14),
           is_token_in_rank=in_rank)
    expect(NotImplementedError, "issue 25", buf.low_latency_dispatch, x, idx, 8, 4)
    expect(NotImplementedError, "FP8", buf.dispatch, (x, x), is_token_in_rank=in_rank)

    recv_x, recv_idx, recv_w, counts, handle, _ = buf.dispatch(
        x, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
    expect(ValueError, "x has 2 rows; expected", buf.combine, recv_x[:2], handle)
    expect(ValueError, "handle is tuple; expected the handle a dispatch of this Buffer returned", buf.combine,
           recv_x, tuple(handle))
    expect(ValueError, "topk_idx/topk_weights are given with handle=", buf.dispatch, x, handle=handle,
           topk_idx=idx)
    combined, _, _ = buf.combine(recv_x, handle)
    assert torch.equal(combined, x * in_rank.sum(1, keepdim=True))

    # Destroyed: calls say so; a new Buffer on the same group works.
    old = moerl.ep.Buffer(torch.distributed.group.WORLD, num_nvl_bytes=1 << 20, explicitly_destroy=True)
    old.destroy()
    expect(RuntimeError, "destroyed", old.dispatch, x, is_token_in_rank=in_rank)
    expect(ValueError, "handle comes from another Buffer", old.combine, recv_x, handle)
    again = moerl.ep.Buffer(torch.distributed.group.WORLD, num_nvl_bytes=1 << 20)
    assert torch.equal(again.dispatch(x, is_token_in_rank=in_rank)[0], recv_x)


def test_bad_input_is_refused_before_anything_is_sent() -> None:
    run_ranks(worker, 2, timeout_s=60)


def test_package_reports_version_and_provenance() -> None:
    prov = moerl.provenance()
    assert prov["version"] == moerl.__version__
    assert {"commit", "compiler", "build_type", "libfabric", "host"} <= set(prov)
    assert any(p["name"] for p in prov["libfabric"]["providers"])
