#!/usr/bin/env python3
"""moerl.ep.Buffer against torch.distributed.all_to_all_single (gloo) from PyTorch: the same
exchange, the same tensors, in one run.

Per (ranks, tokens): every rank routes its tokens to top-k of E experts (uniform random, the
same seeds for every implementation) and times, per iteration, dispatch + combine of
DeepEP's layout (rows grouped by source rank, one row per (token, destination rank), the
top-k ids and weights with them; the experts are the identity, so combine returns every
token times the number of ranks it went to):

- ``moerl_normal``: Buffer.get_dispatch_layout + dispatch + combine (normal mode).
- ``torch_all_to_all``: what a PyTorch MoE layer does without a specialised library
  (Megatron's alltoall dispatcher): pack each token once per destination rank, exchange the
  counts, all_to_all_single of the rows (as bytes: gloo in torch 1.13 rejects bf16) and of
  the top-k metadata, and back, then sum every token's returned rows in fp32.
- ``moerl_low_latency`` (tokens <= --ll-max-tokens): low_latency_dispatch + combine, one row
  per (token, expert) in DeepEP's packed per-expert layout, weighted combine.
- ``moerl_low_latency_zero_copy``: the same, the way the C++ row (``cpp_low_latency``, with
  --cpp) runs it, timed as it times it: dispatch from a barrier; then, untimed (`moerl bench
  ep` leaves out its combine_buffer() call and its experts), get_next_low_latency_combine_buffer,
  the identity experts' writes into it and a barrier; then the combine, which reads the rows
  there (``zero_copy=True``). The iteration's time is the slowest rank's dispatch plus the
  slowest rank's combine, as the C++ row's total_us. One difference is left, and belongs to
  the API: the Python dispatch copies the caller's x into the channel's dispatch buffer (peers
  on the host read the tokens there in place; torch's memory is private to the process), where
  the C++ row's layer wrote its tokens into dispatch_buffer() before the barrier.
- ``moerl_low_latency_zero_copy_io``: the same with that difference gone: the tokens are
  written into get_low_latency_dispatch_buffer (moerl's, not DeepEP's) before the barrier,
  untimed, and passed as x, so the dispatch copies nothing: the work the C++ row times.
- ``moerl_low_latency_fp8``: DeepEP's default low-latency dispatch (``use_fp8=True``: e4m3
  rows and per-128-channel scales), the identity experts dequantising into
  get_next_low_latency_combine_buffer (untimed), then the zero-copy combine.

What a MoE layer pays per step with each mode, the experts left out (identity), the same
work both ways (the rows above time the calls alone, and DeepEP-layout normal leaves the
expert-major fan-out and the weighted sum to the layer, which low-latency does itself):

- ``moerl_normal_layer``: moerl_normal plus the layer's work between the two calls, with
  the torch ops of Megatron-LM's unfused permutation (layer_permute: recv_topk_idx scattered
  into a routing map, masked_select of the row ids in expert-major order, index_select of
  recv_x; layer_unpermute: the rows times their weights in fp32, index_add_ into one fp32
  row per received token, cast to bf16), in workspaces kept across steps (torch's CPU
  allocator would page-fault anything over 32 MiB in afresh every step).
- ``moerl_low_latency_layer``, ``moerl_low_latency_zero_copy_layer``: moerl_low_latency and
  moerl_low_latency_zero_copy_io timed again under the layer's name, since the layer adds
  nothing to them (its experts read recv_x in place; the combine applies the weights).

Every Python row also reports each phase's slowest-rank p50 (``phases_p50_ms``: dispatch,
then permute and unpermute for the layer row, combine): a split of the total, not parts
that add up to it (a rank that finishes its phase early waits in the next one).

Each iteration starts after a barrier; its time is the slowest rank's (an all-reduce MAX of
the per-rank times, outside the timed region; per phase for the rows with untimed experts).
p50 and max over iterations. --rounds N runs the Python rows and the C++/MPI rows N times in
turn, so that both see the same stretch of a shared machine's load; a row's p50 is then the
median of its rounds' p50s. The results of
the implementations are compared once per case (the run fails if they differ).

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/python_ep/ep_vs_all_to_all.py
           [--ranks 2,4] [--tokens 128,512,2048] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import moerl
import moerl.ep

HERE = os.path.dirname(os.path.abspath(__file__))


def routing(rank: int, case: Dict[str, Any]):
    g = torch.Generator().manual_seed(10_000 * case["seed"] + rank)
    x = (torch.randn(case["tokens"], case["hidden"], generator=g)).to(case["dtype"])
    if case["routing"] == "zipf":
        # Expert popularity 1/i^1.2 over a permutation every rank shares (as fabric/
        # ep_workload's zipf routing), top-k distinct experts drawn in proportion to it.
        perm = torch.randperm(case["experts"], generator=torch.Generator().manual_seed(case["seed"]))
        popularity = torch.empty(case["experts"])
        popularity[perm] = 1.0 / torch.arange(1, case["experts"] + 1, dtype=torch.float32) ** 1.2
        idx = torch.multinomial(popularity.expand(max(case["tokens"], 1), -1), case["topk"], generator=g)
        idx = idx[:case["tokens"]]
    else:
        idx = torch.rand(case["tokens"], case["experts"], generator=g).topk(case["topk"], dim=1).indices
    w = torch.rand(case["tokens"], case["topk"], generator=g)
    return x, idx, w


def normal_dispatch(buf: moerl.ep.Buffer, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, experts: int):
    """get_dispatch_layout + dispatch: DeepEP's (recv_x, recv_topk_idx, recv_topk_weights,
    num_recv_tokens_per_expert_list, handle, event)."""
    per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, experts)
    return buf.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                        topk_idx=idx, topk_weights=w)


def moerl_normal(buf: moerl.ep.Buffer, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, experts: int):
    recv_x, _, _, _, handle, _ = normal_dispatch(buf, x, idx, w, experts)
    _mark("dispatch")
    out = buf.combine(recv_x, handle)[0]
    _mark("combine")
    return out


class Workspace:
    """A tensor kept across steps and grown when a step needs more rows: what a layer on a GPU
    gets from torch's caching allocator. On CPU torch takes each tensor from malloc, which
    maps anything over 32 MiB afresh (glibc's largest mmap threshold) and page-faults it in
    on every step: the Zipf decode shape's hottest rank at 4 ranks unpermutes 1519 rows, 43.5
    MB in fp32, and paid 10.6k page faults and 47-63 ms a step for that one .float() (3-14 ms
    on the other ranks)."""

    def __init__(self) -> None:
        self.storage = torch.empty(0)

    def rows(self, n: int, width: int, dtype: torch.dtype) -> torch.Tensor:
        if self.storage.dtype != dtype:
            self.storage = torch.empty(0, dtype=dtype)
        if self.storage.numel() < n * width:
            self.storage = torch.empty(max(n * width, 2 * self.storage.numel()), dtype=dtype)
        return self.storage[:n * width].view(n, width)


def layer_permute(recv_x: torch.Tensor, recv_idx: torch.Tensor, recv_w: torch.Tensor, local_experts: int,
                  space: Workspace):
    """What a layer does between DeepEP's normal dispatch and its grouped expert GEMM, with the
    torch ops of Megatron-LM's unfused permutation (moe_utils.permute, which its flex
    dispatcher runs on DeepEP's returns): recv_topk_idx/weights [R, K] scattered into a [R, L]
    routing map and probabilities, the map transposed so that masked_select of the row
    indices lists each local expert's rows in turn (expert-major, rows in order within an
    expert), then index_select of recv_x (into `space`). Returns (permuted [n, H],
    the recv_x row of each permuted row, its weight)."""
    rows = recv_x.shape[0]
    # A -1 entry goes to a spare column L, dropped: the map has one True per valid entry.
    col = torch.where(recv_idx >= 0, recv_idx, torch.full_like(recv_idx, local_experts))
    routing_map = torch.zeros(rows, local_experts + 1, dtype=torch.bool).scatter_(1, col, True)[:, :local_experts]
    probs = torch.zeros(rows, local_experts + 1, dtype=recv_w.dtype).scatter_(1, col, recv_w)[:, :local_experts]
    by_expert = routing_map.t().contiguous()
    source = torch.arange(rows).expand(local_experts, rows).masked_select(by_expert)
    weight = probs.t().contiguous().masked_select(by_expert)
    permuted = space.rows(source.numel(), recv_x.shape[1], recv_x.dtype)
    return torch.index_select(recv_x, 0, source, out=permuted), source, weight


def layer_unpermute(expert_out: torch.Tensor, source: torch.Tensor, weight: torch.Tensor, rows: int,
                    space: Workspace, sums: Workspace) -> torch.Tensor:
    """Megatron's unpermute: each expert output row times its weight in fp32, summed into its
    recv_x row in fp32 (in `sums`), cast back to the rows' dtype for the combine. Two choices
    of op, for torch 1.13 on CPU (one thread, 1024 x 7168 rows, the 2-rank decode shape): the
    rows are converted to fp32 (into `space`) before the product, as Megatron's bf16 rows
    times fp32 weights would promote them anyway, because the mixed-dtype product takes 43 ms
    against 5 (2 + 3); and index_add_ (2 ms) rather than Megatron's scatter_add_ with the
    index expanded over hidden (14 ms), the same sum."""
    weighted = space.rows(expert_out.shape[0], expert_out.shape[1], torch.float32)
    weighted.copy_(expert_out).mul_(weight.unsqueeze(1))
    out = sums.rows(rows, expert_out.shape[1], torch.float32).zero_()
    out.index_add_(0, source, weighted)
    return out.to(expert_out.dtype)


# The normal layer's workspaces (permuted rows, weighted fp32 rows, their fp32 sums per
# received row), kept across steps.
_layer_space = (Workspace(), Workspace(), Workspace())


def moerl_normal_layer(buf: moerl.ep.Buffer, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, experts: int,
                       world: int):
    """What a MoE layer pays per step with normal mode (experts left out): dispatch, the
    permutation into expert-major rows, the identity experts (the permuted rows are their
    outputs), the weighted un-permutation to one row per received token, combine."""
    recv_x, recv_idx, recv_w, _, handle, _ = normal_dispatch(buf, x, idx, w, experts)
    _mark("dispatch")
    permuted, source, weight = layer_permute(recv_x, recv_idx, recv_w, experts // world, _layer_space[0])
    _mark("permute")
    back = layer_unpermute(permuted, source, weight, recv_x.shape[0], _layer_space[1], _layer_space[2])
    _mark("unpermute")
    out = buf.combine(back, handle)[0]
    _mark("combine")
    return out


def check_layer_permute(buf: moerl.ep.Buffer, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, experts: int,
                        world: int) -> None:
    """layer_permute's rows are expert-major, num_recv_tokens_per_expert_list of them per local
    expert, each a row routed to that expert with that entry's weight (the combined output
    check cannot see the order)."""
    recv_x, recv_idx, recv_w, per_expert, handle, _ = normal_dispatch(buf, x, idx, w, experts)
    permuted, source, weight = layer_permute(recv_x, recv_idx, recv_w, experts // world, Workspace())
    expert = torch.repeat_interleave(torch.arange(experts // world), torch.tensor(per_expert, dtype=torch.int64))
    if source.numel() != expert.numel():
        raise AssertionError(f"layer_permute: {source.numel()} rows, num_recv_tokens_per_expert_list sums to "
                             f"{expert.numel()}")
    hit = recv_idx[source] == expert.unsqueeze(1)
    if not (bool(hit.any(1).all()) and torch.equal(permuted, recv_x[source]) and
            torch.equal(weight, recv_w[source][hit])):
        raise AssertionError("layer_permute: a permuted row is not a row routed to its expert with its weight")
    buf.combine(recv_x, handle)


def torch_all_to_all(x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, experts: int, world: int):
    """DeepEP's layout with torch.distributed alone (the metadata row is the K int64 ids and
    the K fp32 weights, as bytes)."""
    local = experts // world
    dest = idx // local  # -1 // local stays negative
    in_rank = torch.stack([(dest == r).any(1) for r in range(world)], dim=1)  # [T, N]
    send_counts = in_rank.sum(0)
    tokens = torch.cat([in_rank[:, r].nonzero()[:, 0] for r in range(world)])  # rank-major
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    send_split, recv_split = send_counts.tolist(), recv_counts.tolist()
    row_bytes = x.shape[1] * x.element_size()
    payload = x[tokens].view(torch.uint8).view(-1, row_bytes)
    k = idx.shape[1]
    meta = torch.cat([idx[tokens].view(torch.uint8).view(len(tokens), 8 * k),
                      w[tokens].view(torch.uint8).view(len(tokens), 4 * k)], dim=1)
    recv = payload.new_empty(sum(recv_split), row_bytes)
    recv_meta = meta.new_empty(sum(recv_split), meta.shape[1])
    dist.all_to_all_single(recv, payload, recv_split, send_split)
    dist.all_to_all_single(recv_meta, meta, recv_split, send_split)
    expert_out = recv  # identity experts: the rows go back as they came
    back = payload.new_empty(len(tokens), row_bytes)
    dist.all_to_all_single(back, expert_out, send_split, recv_split)
    y = torch.zeros(x.shape, dtype=torch.float32)
    y.index_add_(0, tokens, back.view(x.dtype).view(len(tokens), x.shape[1]).float())
    return y.to(x.dtype)


def moerl_low_latency(buf: moerl.ep.Buffer, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, experts: int):
    recv_x, _, handle, _, _ = buf.low_latency_dispatch(x, idx, max(x.shape[0], 1), experts, use_fp8=False)
    _mark("dispatch")
    # A layer's experts read recv_x [L, N*M, H] in place (recv_count[e] rows each) and the
    # combine applies the weights: the layer adds nothing here.
    out = buf.low_latency_combine(recv_x, idx, w, handle)[0]
    _mark("combine")
    return out


# The current timed call's untimed stretch (stand-in experts and what `moerl bench ep` also
# leaves out), as perf_counter (start, end); timed() splits the call there into two phases.
_untimed: List[float] = []
# The current timed call's phase ends, as (phase, perf_counter): timed() reports each phase's
# time (from the previous end, or the call's start; less the untimed stretch) beside the total.
_marks: List[Tuple[str, float]] = []


def _mark(phase: str) -> None:
    _marks.append((phase, time.perf_counter()))


def _pause() -> None:
    _untimed[:] = [time.perf_counter()]
    _mark("dispatch")


def _resume() -> None:
    _untimed.append(time.perf_counter())


def moerl_low_latency_zero_copy(buf: moerl.ep.Buffer, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor,
                                experts: int):
    recv_x, count, handle, _, _ = buf.low_latency_dispatch(x, idx, max(x.shape[0], 1), experts, use_fp8=False)
    # Untimed, as in `moerl bench ep` (its combine_buffer() call and experts' writes are outside
    # its timed phases): the combine buffer, the identity experts' outputs (valid rows only),
    # and a barrier, so no rank's combine waits out a peer's experts.
    _pause()
    target = buf.get_next_low_latency_combine_buffer(handle)
    for j, n in enumerate(count.tolist()):
        target[j, :n] = recv_x[j, :n]
    dist.barrier()
    _resume()
    out = buf.low_latency_combine(torch.empty(0), idx, w, handle, zero_copy=True)[0]
    _mark("combine")
    return out


def moerl_low_latency_zero_copy_io(buf: moerl.ep.Buffer, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor,
                                   experts: int):
    """moerl_low_latency_zero_copy with the tokens already in get_low_latency_dispatch_buffer
    (zero_copy_io_tokens, untimed before the barrier, as `moerl bench ep` writes its tokens
    into dispatch_buffer()): the dispatch copies nothing either."""
    return moerl_low_latency_zero_copy(buf, _tokens[0], idx, w, experts)


# The tokens zero_copy_io_tokens put into the dispatch buffer for the next timed call.
_tokens: List[torch.Tensor] = []


def zero_copy_io_tokens(buf: moerl.ep.Buffer, x: torch.Tensor, idx: torch.Tensor, experts: int) -> None:
    t = buf.get_low_latency_dispatch_buffer(max(x.shape[0], 1), x.shape[1], experts, idx.shape[1], x.dtype)
    t[:x.shape[0]] = x
    _tokens[:] = [t[:x.shape[0]]]


_E4M3 = None


def e4m3_values() -> torch.Tensor:
    """The float value of each e4m3 byte (kernels' encoding: 4 exponent bits, bias 7, 3
    mantissa bits, 0x7f/0xff NaN), for the stand-in experts' dequantisation."""
    global _E4M3
    if _E4M3 is None:
        code = torch.arange(256)
        sign = torch.where(code >= 128, -1.0, 1.0)
        exp, man = (code >> 3) & 15, (code & 7).float()
        value = torch.where(exp == 0, man * 2.0 ** -9, (1 + man / 8) * torch.pow(2.0, (exp - 7).float()))
        _E4M3 = torch.where((code & 127) == 127, torch.tensor(float("nan")), sign * value)
    return _E4M3


def moerl_low_latency_fp8(buf: moerl.ep.Buffer, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor,
                          experts: int):
    """DeepEP's default low-latency dispatch (use_fp8=True: e4m3 rows and per-128-channel
    scales), then the zero-copy combine: the identity experts dequantise their rows into
    get_next_low_latency_combine_buffer (untimed, as in moerl_low_latency_zero_copy)."""
    (q, scales), count, handle, _, _ = buf.low_latency_dispatch(x, idx, max(x.shape[0], 1), experts)
    _pause()
    target = buf.get_next_low_latency_combine_buffer(handle)
    table, hidden = e4m3_values(), x.shape[1]
    for j, n in enumerate(count.tolist()):
        if n:
            deq = table[q[j, :n].long()].view(n, -1, 128) * scales[j, :n].unsqueeze(2)
            target[j, :n] = deq.view(n, hidden).to(target.dtype)
    dist.barrier()
    _resume()
    out = buf.low_latency_combine(torch.empty(0), idx, w, handle, zero_copy=True)[0]
    _mark("combine")
    return out


def timed(fn: Callable[[], Any], iterations: int, warmup: int,
          setup: Optional[Callable[[], Any]] = None) -> Tuple[List[float], Dict[str, List[float]]]:
    """Per iteration, from a barrier: a call without an untimed stretch is one phase, the
    slowest rank's wall time; one with it (_pause/_resume) is two, dispatch up to the pause and
    combine from the resume (which follows a barrier), and the iteration's time is the sum of
    each phase's slowest rank: `moerl bench ep`'s total_us, phase for phase. Also returns, per
    phase the call marked (_mark), the slowest rank's time in it per iteration: a split of
    the total, not parts that add up to it (each phase's slowest rank may differ)."""
    out: List[float] = []
    split: Dict[str, List[float]] = {}
    for i in range(warmup + iterations):
        if setup is not None:  # untimed, before the barrier
            setup()
        dist.barrier()
        _untimed.clear()
        _marks.clear()
        start = time.perf_counter()
        fn()
        end = time.perf_counter()
        if _untimed:
            phases = [_untimed[0] - start, end - _untimed[1]]
        else:
            phases = [end - start, 0.0]
        marked, prev = [], start
        for _, t in _marks:  # each phase less its overlap with the untimed stretch
            hidden = max(0.0, min(t, _untimed[1]) - max(prev, _untimed[0])) if _untimed else 0.0
            marked.append(t - prev - hidden)
            prev = t
        mine = torch.tensor(phases + marked, dtype=torch.float64)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        if i >= warmup:
            out.append(float(mine[:2].sum()) * 1e3)
            for (name, _), v in zip(_marks, mine[2:].tolist()):
                split.setdefault(name, []).append(v * 1e3)
    return out, split


def rank_main(rank: int, world: int, init_file: str, cases: List[Dict[str, Any]], opts: Dict[str, Any],
              results: Any) -> None:
    try:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=600))
        max_tokens = max(max(c["tokens"] for c in cases), 1)
        hidden_bytes = max(c["hidden"] for c in cases) * 4
        normal = moerl.ep.Buffer(dist.group.WORLD, num_nvl_bytes=3 * world * (hidden_bytes + 64) * max_tokens,
                                 op_timeout_ms=600_000)
        ll = moerl.ep.Buffer(dist.group.WORLD, low_latency_mode=True, op_timeout_ms=600_000)
        rows = []
        for case in cases:
            x, idx, w = routing(rank, case)
            e = case["experts"]
            setups: Dict[str, Callable[[], Any]] = {}
            impls = {"moerl_normal": lambda: moerl_normal(normal, x, idx, w, e),
                     "torch_all_to_all": lambda: torch_all_to_all(x, idx, w, e, world),
                     "moerl_normal_layer": lambda: moerl_normal_layer(normal, x, idx, w, e, world)}
            if case["tokens"] <= opts["ll_max_tokens"]:
                impls["moerl_low_latency"] = lambda: moerl_low_latency(ll, x, idx, w, e)
                impls["moerl_low_latency_zero_copy"] = lambda: moerl_low_latency_zero_copy(ll, x, idx, w, e)
                # What a layer pays with low-latency is the calls themselves (its experts read
                # recv_x in place, the combine applies the weights): the layer rows are the
                # DeepEP call and the zero-copy one (tokens in the dispatch buffer, experts'
                # outputs in the combine buffer), timed again under the layer's name beside
                # moerl_normal_layer (two rows of the same work: the run's own noise).
                impls["moerl_low_latency_layer"] = impls["moerl_low_latency"]
                if hasattr(ll, "get_low_latency_dispatch_buffer"):  # not in packages before it
                    for name in ("moerl_low_latency_zero_copy_io", "moerl_low_latency_zero_copy_layer"):
                        impls[name] = lambda: moerl_low_latency_zero_copy_io(ll, x, idx, w, e)
                        setups[name] = lambda: zero_copy_io_tokens(ll, x, idx, e)
                if case["hidden"] % 128 == 0:
                    impls["moerl_low_latency_fp8"] = lambda: moerl_low_latency_fp8(ll, x, idx, w, e)
            # Same answers first: unweighted sums agree exactly (fp32 sums of the same rows
            # in rank order vs index_add order: within one rounding), the weighted one with
            # the weights applied to the reference.
            ref = impls["torch_all_to_all"]().float()
            got = impls["moerl_normal"]().float()
            torch.testing.assert_close(got, ref, rtol=2 ** -7, atol=1e-5)
            want = x.float() * torch.where(idx >= 0, w, torch.zeros_like(w)).sum(1, keepdim=True)
            # The layer's weighted sum per rank in fp32, rounded to bf16 once per rank.
            torch.testing.assert_close(impls["moerl_normal_layer"]().float(), want, rtol=2 ** -7, atol=1e-2)
            check_layer_permute(normal, x, idx, w, e, world)
            if "moerl_low_latency" in impls:
                for name in ("moerl_low_latency", "moerl_low_latency_zero_copy", "moerl_low_latency_zero_copy_io",
                             "moerl_low_latency_zero_copy_layer"):
                    if name not in impls:
                        continue
                    if name in setups:
                        setups[name]()
                    torch.testing.assert_close(impls[name]().float(), want, rtol=2 ** -7, atol=1e-2)
                if "moerl_low_latency_fp8" in impls:
                    # e4m3: 3 mantissa bits, so each term within 2^-4 of its value (plus the
                    # subnormal step of its block's scale), then bf16 rounding.
                    got = impls["moerl_low_latency_fp8"]().float()
                    bound = want.abs() * (2 ** -4 + 2 ** -7) + 0.05
                    if not bool(((got - want).abs() <= bound).all()):
                        raise AssertionError("moerl_low_latency_fp8: combine differs from the reference beyond "
                                             f"e4m3 rounding (max error {float((got - want).abs().max())})")
            # Hidden bytes per (token, destination rank), summed over ranks: what must cross.
            pairs = torch.tensor([float(sum(int(((idx // (e // world)) == r).any(1).sum()) for r in range(world)))],
                                 dtype=torch.float64)
            dist.all_reduce(pairs)
            logical = int(pairs) * case["hidden"] * x.element_size()
            # Low-latency moves one row per unmasked (token, expert) entry each way, the others
            # one per (token, destination rank): the bytes each row type must move.
            entries = torch.tensor([float(int((idx >= 0).sum()))], dtype=torch.float64)
            dist.all_reduce(entries)
            entry_bytes = int(entries) * case["hidden"] * x.element_size()
            for name, fn in impls.items():
                if opts["impls"] and name not in opts["impls"]:
                    continue
                ms, split = timed(fn, opts["iterations"], opts["warmup"], setups.get(name))
                p50 = statistics.median(ms)
                moved = entry_bytes if name.startswith("moerl_low_latency") else logical
                rows.append(dict(ranks=world, tokens=case["tokens"], impl=name, p50_ms=p50, max_ms=max(ms),
                                 all_ms=[round(v, 3) for v in ms], logical_bytes=logical,
                                 logical_gbps=2 * logical / (p50 * 1e6), moved_bytes=moved,
                                 moved_gbps=2 * moved / (p50 * 1e6),
                                 phases_p50_ms={k: statistics.median(v) for k, v in split.items()}))
        if rank == 0:
            results.put(("ok", rows, [c for c in normal.transport_report()]))
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:
        results.put(("error", f"rank {rank}:\n{traceback.format_exc()}", None))
        os._exit(1)


def run_world(world: int, cases: List[Dict[str, Any]], opts: Dict[str, Any]):
    ctx = mp.get_context("fork")  # the children share the imported torch and moerl
    with tempfile.TemporaryDirectory() as tmp:
        results = ctx.SimpleQueue()
        procs = [ctx.Process(target=rank_main, args=(r, world, os.path.join(tmp, "init"), cases, opts, results))
                 for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        status, rows, transports = results.get()
        if status != "ok" or any(p.exitcode for p in procs):
            raise SystemExit(f"ranks={world} failed:\n{rows}")
        return rows, transports


def build_mpi(out_dir: str) -> str:
    """mpi_alltoallv.c compiled with mpicc into out_dir; its path."""
    if shutil.which("mpicc") is None or shutil.which("mpirun") is None:
        raise SystemExit("--mpi: mpicc/mpirun not found (Debian: libopenmpi-dev, openmpi-bin)")
    binary = os.path.join(out_dir, "mpi_alltoallv")
    subprocess.run(["mpicc", "-O3", "-march=native", "-o", binary, os.path.join(HERE, "mpi_alltoallv.c"), "-lm"], check=True)
    return binary


def run_json(cmd: List[str], what: str) -> Any:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed ({done.returncode}): {' '.join(cmd)}\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    return json.loads(done.stdout[done.stdout.index("{"):])


def mpi_rows(binary: str, world: int, case: Dict[str, Any], opts: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The plain MPI exchange and its semantic equivalent (mpi_alltoallv.c) on the case's shape."""
    rows = []
    for variant in ("plain", "semantic"):
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(world),
               "--mca", "btl", "self,vader", binary, str(case["tokens"]), str(case["hidden"]), str(case["experts"]),
               str(case["topk"]), str(opts["iterations"]), str(opts["warmup"]), variant, case["routing"],
               str(case["seed"])]
        r = run_json(cmd, f"MPI {variant}")
        if r["check"] != "pass":
            raise SystemExit(f"MPI {variant}: its result check failed: {r}")
        rows.append(dict(ranks=world, tokens=case["tokens"], impl=f"mpi_alltoallv_{variant}", p50_ms=r["p50_ms"],
                         max_ms=r["max_ms"], all_ms=r["all_ms"], logical_bytes=r["logical_bytes"],
                         logical_gbps=2 * r["logical_bytes"] / (r["p50_ms"] * 1e6), check=r["check"],
                         mpi_library=r["mpi_library"], command=" ".join(cmd)))
    return rows


CPP_IMPLS = {"normal": "cpp_normal", "ll": "cpp_low_latency", "mpi_alltoallv": "cpp_bench_mpi_semantic_peer"}


def cpp_rows(moerl_bin: str, world: int, case: Dict[str, Any], opts: Dict[str, Any]) -> List[Dict[str, Any]]:
    """moerl's C++ path on the same shape: `moerl bench ep` (its shapes: decode = 128 and
    prefill = 4096 tokens/rank, 256 experts, top-8, bf16), with its own MPI peer."""
    shape = {128: "decode", 4096: "prefill"}.get(case["tokens"])
    if shape is None or (case["experts"], case["topk"], case["dtype"]) != (256, 8, torch.bfloat16):
        return []
    modes = "normal,ll" if case["tokens"] <= opts["ll_max_tokens"] else "normal"
    cmd = [moerl_bin, "bench", "ep", "--ranks", str(world), "--shape", shape, "--mode", modes, "--routing",
           case["routing"], "--hidden", str(case["hidden"]), "--starts", str(opts["cpp_starts"]),
           "--iterations", str(opts["iterations"]), "--warmup", str(opts["warmup"]), "--peer", "mpi", "--json"]
    report = run_json(cmd, "moerl bench ep")
    rows = []
    for m in report["modes"]:
        if m["mode"] not in CPP_IMPLS:
            continue
        total = m["total_us"]
        rows.append(dict(ranks=world, tokens=case["tokens"], impl=CPP_IMPLS[m["mode"]], p50_ms=total["p50"] / 1e3,
                         max_ms=total["max"] / 1e3, samples=total["samples"], logical_bytes=m["logical_bytes"],
                         logical_gbps=m["logical_gbps"], check=m.get("check"), command=" ".join(cmd)))
    return rows


RATIOS = {  # name: (numerator impl, denominator impl), p50s
    "torch_over_moerl_normal": ("torch_all_to_all", "moerl_normal"),
    "moerl_low_latency_over_normal": ("moerl_low_latency", "moerl_normal"),
    "python_normal_over_cpp_normal": ("moerl_normal", "cpp_normal"),
    "python_low_latency_over_cpp_low_latency": ("moerl_low_latency", "cpp_low_latency"),
    "python_low_latency_zero_copy_over_cpp_low_latency": ("moerl_low_latency_zero_copy", "cpp_low_latency"),
    "python_low_latency_zero_copy_io_over_cpp_low_latency": ("moerl_low_latency_zero_copy_io", "cpp_low_latency"),
    "moerl_low_latency_fp8_over_normal": ("moerl_low_latency_fp8", "moerl_normal"),
    "moerl_low_latency_zero_copy_over_normal": ("moerl_low_latency_zero_copy", "moerl_normal"),
    "moerl_low_latency_layer_over_normal_layer": ("moerl_low_latency_layer", "moerl_normal_layer"),
    "moerl_low_latency_zero_copy_layer_over_normal_layer": ("moerl_low_latency_zero_copy_layer", "moerl_normal_layer"),
    "moerl_normal_layer_over_normal": ("moerl_normal_layer", "moerl_normal"),
    "moerl_normal_over_mpi_plain": ("moerl_normal", "mpi_alltoallv_plain"),
    "moerl_normal_over_mpi_semantic": ("moerl_normal", "mpi_alltoallv_semantic"),
    "cpp_normal_over_cpp_bench_mpi_semantic_peer": ("cpp_normal", "cpp_bench_mpi_semantic_peer"),
}


def merge_rounds(rounds: List[List[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    """One row per (ranks, tokens, impl): the first round's, with p50_ms the median of the
    rounds' p50s, max_ms their max, and rounds_p50_ms each round's (one round: as it was)."""
    if len(rounds) == 1:
        return rounds[0]
    merged = []
    for row in rounds[0]:
        key = (row["ranks"], row["tokens"], row["impl"])
        same = [r for rs in rounds for r in rs if (r["ranks"], r["tokens"], r["impl"]) == key]
        out = dict(row, p50_ms=statistics.median(r["p50_ms"] for r in same), max_ms=max(r["max_ms"] for r in same),
                   rounds_p50_ms=[r["p50_ms"] for r in same])
        out.pop("all_ms", None)
        if "phases_p50_ms" in row:
            out["phases_p50_ms"] = {k: statistics.median(r["phases_p50_ms"][k] for r in same)
                                    for k in row["phases_p50_ms"]}
        out["all_ms_per_round"] = [r["all_ms"] for r in same if "all_ms" in r] or None
        for rate, size in (("logical_gbps", "logical_bytes"), ("moved_gbps", "moved_bytes")):
            if size in out and rate in out:
                out[rate] = 2 * out[size] / (out["p50_ms"] * 1e6)
        merged.append(out)
    return merged


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        return ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--tokens", default="128,512,2048", help="tokens per rank, comma-separated")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--ll-max-tokens", type=int, default=128,
                    help="also time the low-latency calls for token counts up to this")
    ap.add_argument("--routing", choices=["uniform", "zipf"], default="uniform",
                    help="expert choice: uniform random, or Zipf popularity (exponent 1.2)")
    ap.add_argument("--mpi", action="store_true",
                    help="also run mpi_alltoallv.c (compiled with mpicc), plain and semantic, on each case")
    ap.add_argument("--cpp", default="none",
                    help="path of the moerl binary (or 'auto': build/bin/moerl) to also run `moerl bench ep` "
                         "on the cases it has (128 and 4096 tokens, 256 experts, top-8, bf16)")
    ap.add_argument("--cpp-starts", type=int, default=1, help="process starts of `moerl bench ep`")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the Python rows, then the C++ and MPI rows, this many times in turn; each row's p50 "
                         "is the median of its rounds' p50s (per round in the JSON's rounds)")
    ap.add_argument("--impls", default="",
                    help="comma-separated Python rows to time (default all; the result checks run for all)")
    ap.add_argument("--json", help="write the results here (else print them)")
    args = ap.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    cases = [dict(seed=i + 1, tokens=t, hidden=args.hidden, experts=args.experts, topk=args.topk, dtype=dtype,
                  routing=args.routing) for i, t in enumerate(int(v) for v in args.tokens.split(","))]
    opts = dict(iterations=args.iterations, warmup=args.warmup, ll_max_tokens=args.ll_max_tokens,
                cpp_starts=args.cpp_starts, impls=[v for v in args.impls.split(",") if v])
    if args.rounds < 1:
        raise SystemExit(f"--rounds is {args.rounds}; expected >= 1")
    moerl_bin = args.cpp
    if moerl_bin == "auto":
        moerl_bin = os.path.join(HERE, "..", "..", "build", "bin", "moerl")
    if args.mpi and dtype != torch.bfloat16:
        raise SystemExit("--mpi: mpi_alltoallv.c moves bf16 rows; use --dtype bf16")
    load_before, uptime_before = os.getloadavg(), uptime()
    rounds: List[List[Dict[str, Any]]] = []
    transports: Dict[int, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        mpi_binary = build_mpi(tmp) if args.mpi else None
        for _ in range(args.rounds):
            this: List[Dict[str, Any]] = []
            for world in (int(v) for v in args.ranks.split(",")):
                world_rows, transports[world] = run_world(world, cases, opts)
                this += world_rows
                for case in cases:
                    if moerl_bin != "none":
                        this += cpp_rows(moerl_bin, world, case, opts)
                    if mpi_binary:
                        this += mpi_rows(mpi_binary, world, case, opts)
            rounds.append(this)
    rows = merge_rounds(rounds)
    load_after, uptime_after = os.getloadavg(), uptime()
    ratios = []
    for world in sorted({r["ranks"] for r in rows}):
        for tokens in sorted({r["tokens"] for r in rows}):
            by = {r["impl"]: r["p50_ms"] for r in rows if r["ranks"] == world and r["tokens"] == tokens}
            entry: Dict[str, Any] = dict(ranks=world, tokens=tokens)
            for name, (num, den) in RATIOS.items():
                entry[name] = by[num] / by[den] if num in by and den in by and by[den] > 0 else None
            # What bounds low-latency against normal on CPU: the bytes each moves (not a time).
            moved = {r["impl"]: r["moved_bytes"] for r in rows
                     if r["ranks"] == world and r["tokens"] == tokens and "moved_bytes" in r}
            if "moerl_low_latency" in moved and moved.get("moerl_normal"):
                entry["low_latency_over_normal_moved_bytes"] = moved["moerl_low_latency"] / moved["moerl_normal"]
            ratios.append(entry)
    out = dict(
        benchmark="python_ep",
        definition=("per iteration: barrier, then dispatch + combine (DeepEP layout, identity experts), the "
                    "slowest rank's wall time (moerl_low_latency_zero_copy, moerl_low_latency_fp8: the slowest "
                    "rank's dispatch + the slowest rank's combine, get_next_low_latency_combine_buffer, the "
                    "experts and a barrier untimed between them, as cpp_low_latency); p50/max over iterations "
                    "after warm-up (with rounds > 1: the median of the rounds' p50s); ratios from p50s of one run "
                    "(a ratio a_over_b > 1: a is slower). cpp_* rows: `moerl bench ep`'s total_us (dispatch and "
                    "combine each timed from a barrier; its normal mode returns rows expert-major, its experts untimed, "
                    "as moerl_low_latency_zero_copy's writes into the combine buffer); mpi_* rows: "
                    "mpi_alltoallv.c (plain: pack once per destination rank + MPI_Alltoallv there and back; "
                    "semantic: plus the expert-major fan-out and the weighted combine reduction); "
                    "logical_gbps = 2 x hidden bytes per (token, destination rank) / p50; moved_bytes: the hidden "
                    "bytes the row's mode moves one way (low-latency: one row per unmasked (token, expert) entry; "
                    "the others: per (token, destination rank)), moved_gbps = 2 x moved_bytes / p50; *_layer rows: what a "
                    "MoE layer pays per step with the mode, identity experts (moerl_normal_layer adds the "
                    "Megatron-style permutation into expert-major rows and the weighted un-permutation; the "
                    "low-latency layer rows are the same calls as moerl_low_latency and "
                    "moerl_low_latency_zero_copy_io); phases_p50_ms: per phase, the p50 of the slowest rank's time "
                    "in it"),
        command=" ".join([os.path.basename(sys.executable)] + sys.argv),
        shape=dict(hidden=args.hidden, experts=args.experts, topk=args.topk, dtype=args.dtype,
                   routing=args.routing + (" (popularity 1/i^1.2 over a shared permutation)"
                                           if args.routing == "zipf" else " random top-k")),
        iterations=args.iterations, warmup=args.warmup, rounds=args.rounds,
        host_load_average=dict(before=load_before, after=load_after),
        uptime=dict(before=uptime_before, after=uptime_after), cpus=os.cpu_count(),
        torch=torch.__version__, python=sys.version.split()[0], moerl_transports=transports,
        results=rows, ratios=ratios, provenance=moerl.provenance())
    text = json.dumps(out, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    for r in ratios:
        print(f"ranks={r['ranks']} tokens={r['tokens']}: " +
              ", ".join(f"{k} = {v:.2f}" for k, v in r.items() if (k in RATIOS or k.endswith("_moved_bytes")) and v is not None))
    if not args.json:
        print(text)


if __name__ == "__main__":
    main()
