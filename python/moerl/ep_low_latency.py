"""DeepEP V1's low-latency calls for ``moerl.ep.Buffer`` (a mixin; ``Buffer`` inherits it).

They run on fabric's low-latency ep_group (one write per (token, expert) entry straight into
the destination's pre-registered slots, no count exchange before writing; fabric/PROTOCOL.md
"low-latency"), one channel per (dtype, hidden, num_max_dispatch_tokens_per_rank,
num_experts, top-k), created collectively at its first use. The layout returned is DeepEP's:
per local expert a block of ``num_ranks * num_max_dispatch_tokens_per_rank`` rows whose first
``recv_count[j]`` are valid, the rows of one source rank contiguous. moerl's blocks are in
source-rank order and token order inside a source (DeepEP's are in arrival order, which its
users do not rely on: they read ``layout_range``). Rows past ``recv_count`` are
uninitialised, as in DeepEP.

The channel's group works in that layout itself (fabric's ``ep_config::ll_expert_stride``):
it puts the received rows straight into recv_x, and a combine's x goes to it as given, so no
row is copied on the way in or out of DeepEP's layout.

On CPU every call is complete when it returns: the hook does nothing when called, and the
event's wait is a no-op. Tensors: inputs are read during the call only. Returned tensors
are new and own their memory, except two that the Buffer keeps, as DeepEP does: dispatch's
recv_x, one of two buffers per shape used in turn (valid until the second dispatch after
it), and ``get_next_low_latency_combine_buffer``'s, which a ``zero_copy=True`` combine reads
(a view of the channel's own combine memory, see there).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch

from . import _ep_device
from ._ep_common import _DTYPES, EventOverlap, _check_shape, _check_tensor, _fail, _not_yet
from ._ep_device import MEMORY_HOST, inputs_ready, routing_to_host, takes_cuda_tensors


class RecvHook:
    """DeepEP's receive hook (``return_recv_hook=True``): calling it makes the received data
    valid. moerl's CPU calls have received everything when they return, so it does nothing."""

    def __call__(self) -> None:
        return None


class _LowLatencyHandle(tuple):
    """DeepEP's low-latency handle: (src_info [L, N*M] int32 (each row's source token),
    layout_range [L, N] int64 ((first row from source s) << 32 | rows from s), M, hidden,
    num_experts). moerl's own state rides as an attribute, so the tuple unpacks as DeepEP's."""

    state: "_LowLatencyState"


class _LowLatencyState:
    def __init__(self, buffer_id: int, routing_id: int, num_tokens: int, topk: int, dtype: torch.dtype,
                 memory: int = MEMORY_HOST, device: Optional[torch.device] = None):
        self.buffer_id = buffer_id
        self.routing_id = routing_id
        self.num_tokens = num_tokens
        self.topk = topk
        self.dtype = dtype
        # The device path (_ep_device): the channel's memory code and the tensors' device.
        self.memory = memory
        self.device = device


def _dispatch_on_device(buffer: "LowLatencyCalls", a: Dict[str, Any]) -> bool:
    """Whether a low_latency_dispatch given CUDA tensors takes the device path: its shape
    looks valid (else the staged call's checks name the problem) and the channel's group
    accepted device memory (_ep_device.device_channel)."""
    x, idx = a.get("x"), a.get("topk_idx")
    m, e = a.get("num_max_dispatch_tokens_per_rank"), a.get("num_experts")
    if not (isinstance(x, torch.Tensor) and isinstance(idx, torch.Tensor) and _ep_device._is_cuda(x)):
        return False
    if not buffer.low_latency_mode or x.dtype not in _DTYPES or x.dim() != 2 or idx.dim() != 2:
        return False
    if not all(isinstance(v, int) and v >= 1 for v in (m, e)) or e % buffer.group_size:
        return False
    memory = _ep_device.device_channel(buffer, x.shape[1], _DTYPES[x.dtype], m, e, idx.shape[1])
    return memory != MEMORY_HOST


def _combine_on_device(buffer: "LowLatencyCalls", a: Dict[str, Any]) -> bool:
    """A low_latency_combine takes the device path when its handle's dispatch did."""
    handle = a.get("handle")
    return isinstance(handle, _LowLatencyHandle) and handle.state.memory != MEMORY_HOST


def _hook_and_event(async_finish: bool, return_recv_hook: bool) -> Tuple[EventOverlap, Optional[RecvHook]]:
    if async_finish and return_recv_hook:
        _fail("async_finish and return_recv_hook are both True; expected at most one (as DeepEP)")
    return EventOverlap(), (RecvHook() if return_recv_hook else None)


def _check_positive(name: str, v: Any) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        _fail(f"{name} is {v!r}; expected an int >= 1")


class LowLatencyCalls:
    """low_latency_dispatch, low_latency_combine, get_next_low_latency_combine_buffer,
    clean_low_latency_buffer and get_low_latency_rdma_size_hint, with DeepEP's names,
    parameter order and returns. Needs ``Buffer(..., low_latency_mode=True)``, as DeepEP."""

    # Set by Buffer.__init__.
    rank: int
    group_size: int
    low_latency_mode: bool
    _id: int

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int,
                                       num_experts: int) -> int:
        """DeepEP's size hint for num_rdma_bytes (its formula: two buffers of send and receive
        slots for fp8-or-bf16 rows). moerl's low-latency channels size their own regions, so
        any num_rdma_bytes works; this keeps DeepEP callers' sizing code running."""
        m, h, e = num_max_dispatch_tokens_per_rank, hidden, num_experts
        dispatch_msg = 16 + max(2 * h, h + 4 * (h // 128))
        combine_msg = 4 * (h // 128) + 2 * h
        send = max(m * dispatch_msg, e * m * combine_msg)
        recv = e * m * max(dispatch_msg, combine_msg)
        signals = -(-4 * e // 128) * 128
        return -(-(2 * send + 2 * recv + 2 * signals) // 128) * 128

    def _check_low_latency(self) -> None:
        if not self.low_latency_mode:
            _fail("this Buffer was built with low_latency_mode=False; expected Buffer(..., low_latency_mode=True) "
                  "for the low-latency calls (as DeepEP)")

    def _ll_handle_state(self, handle: Any) -> _LowLatencyState:
        if not isinstance(handle, _LowLatencyHandle):
            _fail(f"handle is {type(handle).__name__}; expected the handle a low_latency_dispatch of this "
                  f"Buffer returned")
        st = handle.state
        if st.buffer_id != self._id:
            _fail("handle comes from another Buffer; expected a handle this Buffer's low_latency_dispatch returned")
        return st

    @takes_cuda_tensors("cumulative_local_expert_recv_stats", "dispatch_wait_recv_cost_stats",
                        device_path=_dispatch_on_device)
    def low_latency_dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor, num_max_dispatch_tokens_per_rank: int,
                             num_experts: int, cumulative_local_expert_recv_stats: Optional[torch.Tensor] = None,
                             dispatch_wait_recv_cost_stats: Optional[torch.Tensor] = None, use_fp8: bool = True,
                             round_scale: bool = False, use_ue8m0: bool = False, async_finish: bool = False,
                             return_recv_hook: bool = False) -> tuple:
        """DeepEP's low-latency dispatch: every (token, expert) entry of topk_idx [T, K] (-1
        masked) is one row. Returns (recv_x [L, N*M, H] of x's dtype, recv_count [L] int32,
        handle, event, hook). recv_x is, as in DeepEP, one of two buffers used in turn: it
        stays valid until the second low_latency_dispatch after this one (of the same shape);
        clone it to keep it longer. A token with two experts on one rank arrives twice, once per
        expert. ``cumulative_local_expert_recv_stats`` ([L] int32) is added to;
        ``dispatch_wait_recv_cost_stats`` is accepted and left as is (no per-rank wait
        timing on CPU). With ``use_fp8=True`` (DeepEP's default) recv_x is DeepEP's pair
        (e4m3 bits [L, N*M, H] as uint8, torch 1.13 having no float8 dtype; fp32 scales [L,
        N*M, ceil(H/128)], column-major), one scale per 128 channels of a row = the block's
        amax / 448 (kernels::fp8_quantize). moerl sends the rows in x's dtype and quantises
        them on receipt: the same bits as quantising at the sender, twice the bytes on the
        wire. round_scale/use_ue8m0 are not implemented. Collective.

        CUDA tensors (moerl/_ep_device.py): on the device path every returned tensor is on
        x's device and the rows never cross host memory (with use_fp8 they cross once, to be
        quantised); elsewhere they are staged through host memory."""
        self._check_low_latency()
        if use_fp8 and (round_scale or use_ue8m0):
            _not_yet("round_scale/use_ue8m0 (power-of-two or UE8M0 FP8 scales)")
        # Here with a CUDA x only on the device path (takes_cuda_tensors stages the others).
        device = x.device if isinstance(x, torch.Tensor) and _ep_device._is_cuda(x) else None
        x = _check_tensor("x", x, (torch.bfloat16, torch.float32), 2, device)
        _check_tensor("topk_idx", topk_idx, (torch.int64,), 2, device)
        topk_idx = routing_to_host(topk_idx)
        num_tokens, hidden = x.shape
        if topk_idx.shape[0] != num_tokens:
            _fail(f"topk_idx has shape {tuple(topk_idx.shape)}; expected {num_tokens} rows (x's tokens)")
        _check_positive("num_max_dispatch_tokens_per_rank", num_max_dispatch_tokens_per_rank)
        if num_tokens > num_max_dispatch_tokens_per_rank:
            _fail(f"x has {num_tokens} tokens; expected at most num_max_dispatch_tokens_per_rank "
                  f"({num_max_dispatch_tokens_per_rank})")
        self._check_num_experts(num_experts)
        # topk_idx's values: checked by the binding before anything is sent (ll_dispatch).
        num_local = num_experts // self.group_size
        if cumulative_local_expert_recv_stats is not None:
            _check_tensor("cumulative_local_expert_recv_stats", cumulative_local_expert_recv_stats, (torch.int32,), 1,
                          device)
            _check_shape("cumulative_local_expert_recv_stats", cumulative_local_expert_recv_stats, (num_local,),
                         "one count per local expert")
        if dispatch_wait_recv_cost_stats is not None:
            _check_tensor("dispatch_wait_recv_cost_stats", dispatch_wait_recv_cost_stats, (torch.int64,), 1, device)
        memory = MEMORY_HOST
        if device is not None:
            memory = _ep_device.device_channel(self, hidden, _DTYPES[x.dtype], num_max_dispatch_tokens_per_rank,
                                               num_experts, topk_idx.shape[1])
        event, hook = _hook_and_event(async_finish, return_recv_hook)

        topk = topk_idx.shape[1]
        block = self.group_size * num_max_dispatch_tokens_per_rank
        recv_count = torch.empty(num_local, dtype=torch.int32)
        src_info = torch.empty(num_local, block, dtype=torch.int32)
        layout_range = torch.empty(num_local, self.group_size, dtype=torch.int64)
        if use_fp8:
            # e4m3 bits as uint8 (torch 1.13 has no float8 dtype); the scales column-major
            # like DeepEP's: [L, N*M, blocks] over [L, blocks, N*M] memory. Quantised on the
            # CPU, so host buffers even on the device path.
            q = self._ll_recv_buffer((num_local, block, hidden), torch.uint8)
            scales = self._ll_recv_buffer((num_local, -(-hidden // 128), block), torch.float32)
            recv_x: Any = (q, scales)
            out_ptr, q_ptr, scales_ptr = 0, q.data_ptr(), scales.data_ptr()
        else:
            recv_x = self._ll_recv_buffer((num_local, block, hidden), x.dtype, device)
            out_ptr, q_ptr, scales_ptr = recv_x.data_ptr(), 0, 0
        routing_id = next(self._routing_ids)
        inputs_ready(device)
        self._live_core().ll_dispatch(hidden, _DTYPES[x.dtype], num_max_dispatch_tokens_per_rank, num_experts, topk,
                                      x.data_ptr(), topk_idx.data_ptr(), num_tokens, routing_id, out_ptr,
                                      recv_count.data_ptr(), src_info.data_ptr(), layout_range.data_ptr(), q_ptr,
                                      scales_ptr, memory)
        if device is not None:  # the small tables follow the rows to the device
            recv_count, src_info, layout_range = (t.to(device) for t in (recv_count, src_info, layout_range))
            if use_fp8:
                recv_x = (recv_x[0].to(device), recv_x[1].to(device))
        if use_fp8:
            recv_x = (recv_x[0], recv_x[1].transpose(1, 2))
        if cumulative_local_expert_recv_stats is not None:
            cumulative_local_expert_recv_stats += recv_count
        handle = _LowLatencyHandle((src_info, layout_range, num_max_dispatch_tokens_per_rank, hidden, num_experts))
        handle.state = _LowLatencyState(self._id, routing_id, num_tokens, topk, x.dtype, memory, device)
        return recv_x, recv_count, handle, event, hook

    def _ll_recv_buffer(self, shape: Tuple[int, int, int], dtype: torch.dtype,
                        device: Optional[torch.device] = None) -> torch.Tensor:
        """One of two tensors kept per (shape, dtype, device), alternating: DeepEP's double
        buffering. A fresh [L, N*M, H] tensor per call would cost more than the exchange (its
        pages are faulted in anew every time at these sizes)."""
        pairs: Dict[Any, list] = self.__dict__.setdefault("_ll_recv_buffers", {})
        pair = pairs.setdefault((shape, dtype, device), [None, None, 0])
        i = pair[2]
        pair[2] = 1 - i
        if pair[i] is None:
            pair[i] = torch.empty(shape, dtype=dtype, device=device or "cpu")
        return pair[i]

    def get_next_low_latency_combine_buffer(self, handle: Any) -> torch.Tensor:
        """DeepEP's zero-copy combine input: a [L, N*M, H] tensor (the handle's dtype) to
        write the experts' outputs into before ``low_latency_combine(..., zero_copy=True)``;
        its contents are read by the next zero-copy combine of the shape only.

        While the handle's dispatch is the latest low-latency call of its shape (the usual
        dispatch, experts, combine), the tensor is a view of the channel's own combine
        memory: the combine then copies nothing, and peers on this host read the rows in
        place. That memory belongs to the Buffer: the view is valid until ``destroy()`` (or
        until the Buffer is collected; the view does not keep it alive), moerl never writes
        it, and every handle of the shape gets the same memory. Otherwise (an older handle,
        a device channel) it is a tensor the Buffer keeps per shape, as before, whose rows
        the combine hands to the group."""
        self._check_low_latency()
        st = self._ll_handle_state(handle)
        _, _, m, hidden, num_experts = handle
        shape = self._ll_block_shape(handle)
        address = 0
        if st.device is None:
            address = self._live_core().ll_combine_buffer(hidden, _DTYPES[st.dtype], m, num_experts, st.topk,
                                                          st.memory, st.routing_id)
        target = self._ll_channel_view(address, shape, st.dtype) if address else self._ll_combine_buffer(handle)
        # What the next zero-copy combine of this shape reads.
        self.__dict__.setdefault("_ll_next_combine", {})[(shape, st.dtype, st.device)] = target
        return target

    def get_low_latency_dispatch_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int,
                                        topk: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """moerl's zero-copy dispatch input (not in DeepEP; its counterpart of
        ``get_next_low_latency_combine_buffer``): a [num_max_dispatch_tokens_per_rank, hidden]
        tensor of ``dtype`` (bf16 or fp32) to write the next step's tokens into, then to pass
        (its first num_tokens rows, ``x[:num_tokens]``) as ``low_latency_dispatch``'s x with
        that shape and a topk_idx of ``topk`` columns. While the channel of that shape exists
        (after its first dispatch) and has no step open (after the last dispatch's combine), it
        is a view of the channel's own token memory: the dispatch then copies nothing, and
        peers on this host read the tokens there in place, as moerl's C++ path does. Such a
        view is valid until ``destroy()`` (it does not keep the memory alive), and every call
        of the shape gets the same memory: write it only after the previous step's combine
        returned, and leave it unchanged from the dispatch that passes it until that step's
        combine returns (peers may still be reading it). Otherwise (no channel yet, a step
        open, CUDA) it is a tensor the Buffer keeps per shape, which the dispatch copies like
        any x. Not collective."""
        self._check_low_latency()
        for name, v in (("num_max_dispatch_tokens_per_rank", num_max_dispatch_tokens_per_rank),
                        ("hidden", hidden), ("topk", topk)):
            _check_positive(name, v)
        self._check_num_experts(num_experts)
        if dtype not in _DTYPES:
            _fail(f"dtype is {dtype}; expected torch.bfloat16 or torch.float32")
        shape = (num_max_dispatch_tokens_per_rank, hidden)
        address = self._live_core().ll_dispatch_buffer(hidden, _DTYPES[dtype], num_max_dispatch_tokens_per_rank,
                                                       num_experts, topk, MEMORY_HOST)
        if address:
            return self._ll_channel_view(address, shape, dtype)
        own: Dict[Any, torch.Tensor] = self.__dict__.setdefault("_ll_dispatch_buffers", {})
        if (shape, dtype) not in own:
            own[(shape, dtype)] = torch.empty(shape, dtype=dtype)
        return own[(shape, dtype)]

    def _ll_channel_view(self, address: int, shape: Tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A tensor over a channel's memory at `address` (ll_combine_buffer,
        ll_dispatch_buffer), made once per (address, shape, dtype): the same memory comes back
        every step, and torch.frombuffer plus a view cost tens of microseconds of a decode
        step."""
        views: Dict[Any, torch.Tensor] = self.__dict__.setdefault("_ll_channel_views", {})
        key = (address, shape, dtype)
        view = views.get(key)
        if view is None:
            num_bytes = (torch.finfo(dtype).bits // 8) * int(torch.Size(shape).numel())
            view = torch.frombuffer(self._live_core().view_of(address, num_bytes), dtype=dtype).view(shape)
            views[key] = view
        return view

    def _ll_block_shape(self, handle: _LowLatencyHandle) -> Tuple[int, int, int]:
        """[num_local_experts, num_ranks * num_max_dispatch_tokens_per_rank, hidden]."""
        _, _, m, hidden, num_experts = handle
        return (num_experts // self.group_size, self.group_size * m, hidden)

    def _ll_combine_buffer(self, handle: _LowLatencyHandle) -> torch.Tensor:
        shape = self._ll_block_shape(handle)
        device = handle.state.device
        key = (shape, handle.state.dtype, device)
        buffers: Dict[Any, torch.Tensor] = self.__dict__.setdefault("_ll_combine_buffers", {})
        if key not in buffers:
            buffers[key] = torch.zeros(shape, dtype=handle.state.dtype, device=device or "cpu")
        return buffers[key]

    def _ll_zero_copy_source(self, handle: _LowLatencyHandle) -> torch.Tensor:
        """The tensor get_next_low_latency_combine_buffer last returned for the handle's shape
        (the Buffer's own one if none was asked for)."""
        key = (self._ll_block_shape(handle), handle.state.dtype, handle.state.device)
        target = self.__dict__.get("_ll_next_combine", {}).get(key)
        return self._ll_combine_buffer(handle) if target is None else target

    @takes_cuda_tensors("out", device_path=_combine_on_device)
    def low_latency_combine(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor, handle: tuple,
                            use_logfmt: bool = False, zero_copy: bool = False, async_finish: bool = False,
                            return_recv_hook: bool = False, out: Optional[torch.Tensor] = None,
                            combine_wait_recv_cost_stats: Optional[torch.Tensor] = None
                            ) -> Tuple[torch.Tensor, EventOverlap, Optional[RecvHook]]:
        """DeepEP's low-latency combine: combined_x[t] = sum over k with topk_idx[t, k] != -1 of
        topk_weights[t, k] * (the row expert topk_idx[t, k] returned for token t), fp32
        accumulation in k order, one rounding. x [L, N*M, H] in the handle's layout (with
        ``zero_copy=True``, the tensor from get_next_low_latency_combine_buffer is read
        instead); topk_idx [T, K] as given to the handle's dispatch; topk_weights [T, K] fp32.
        Returns (combined_x [T, H], event, hook); written into ``out`` when given.
        ``combine_wait_recv_cost_stats`` is accepted and left as is. Collective. A handle
        from the device path wants its tensors on that device, and returns combined_x there."""
        self._check_low_latency()
        st = self._ll_handle_state(handle)
        device = st.device
        if use_logfmt:
            _not_yet("use_logfmt=True (LogFMT-compressed low-latency combine)")
        _, _, m, hidden, num_experts = handle
        src = self._ll_zero_copy_source(handle) if zero_copy else x
        name = "get_next_low_latency_combine_buffer's tensor" if zero_copy else "x"
        _check_tensor(name, src, (st.dtype,), 3, device)
        _check_shape(name, src, self._ll_block_shape(handle),
                     "[num_local_experts, num_ranks * num_max_dispatch_tokens_per_rank, hidden] of the handle")
        _check_tensor("topk_idx", topk_idx, (torch.int64,), 2, device)
        _check_shape("topk_idx", topk_idx, (st.num_tokens, st.topk), "as given to the handle's dispatch")
        _check_tensor("topk_weights", topk_weights, (torch.float32,), 2, device)
        _check_shape("topk_weights", topk_weights, (st.num_tokens, st.topk), "like topk_idx")
        # topk_idx's values: checked by the binding before anything is sent (ll_combine).
        topk_idx, topk_weights = routing_to_host(topk_idx), routing_to_host(topk_weights)
        if out is not None:
            _check_tensor("out", out, (st.dtype,), 2, device)
            _check_shape("out", out, (st.num_tokens, hidden), "[num_tokens, hidden]")
        if combine_wait_recv_cost_stats is not None:
            _check_tensor("combine_wait_recv_cost_stats", combine_wait_recv_cost_stats, (torch.int64,), 1, device)
        event, hook = _hook_and_event(async_finish, return_recv_hook)
        y = out if out is not None else self._host_empty(st.num_tokens, hidden, st.dtype, device)
        inputs_ready(device)
        self._live_core().ll_combine(hidden, _DTYPES[st.dtype], m, num_experts, st.topk, src.data_ptr(),
                                     topk_idx.data_ptr(), topk_weights.data_ptr(), st.num_tokens, st.routing_id,
                                     y.data_ptr(), st.memory)
        return y, event, hook

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int) -> None:
        """DeepEP requires it between normal-mode and low-latency use of one buffer. moerl's
        channels are separate per mode, so it only closes any low-latency step still open
        (a dropped combine): later low-latency calls start from a clean state. Collective."""
        self._check_low_latency()
        _check_positive("num_max_dispatch_tokens_per_rank", num_max_dispatch_tokens_per_rank)
        _check_positive("hidden", hidden)
        self._check_num_experts(num_experts)
        self._live_core().ll_clean()

    # Provided by Buffer.
    def _live_core(self) -> Any:
        raise NotImplementedError

    def _check_num_experts(self, num_experts: Any) -> None:
        raise NotImplementedError
