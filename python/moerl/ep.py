"""``moerl.ep.Buffer``: DeepEP V1's ``Buffer`` over moerl's expert plane.

Code written for ``deep_ep.Buffer`` runs by changing the import. The group given to the
constructor (a ``torch.distributed`` process group; gloo for CPU tensors) carries only the
fabric endpoints' address records (once per channel, at its first use); tokens move through
moerl's ep_group: shared memory on one host, libfabric between hosts. The mapping from
DeepEP's layout onto ep_group is in python/README.md.

Tensors: inputs are read in place through ``data_ptr()`` (no copy into moerl; they only need
to live for the duration of the call). Every returned tensor is a new torch tensor whose
memory no later call touches while the tensor lives, so results stay valid after later
calls (low-latency recv_x excepted: ep_low_latency.py). On CPU, normal dispatch's recv_x
views the rows where the senders stored them (one of the channel's output slots,
``Buffer._recv_rows``), and combined_x and other large outputs (1 MiB and over) view blocks
of the Buffer's own pool of host memory (``Buffer._host_empty``); either goes back to moerl
when the tensor's last view dies, so a step reuses earlier pages instead of faulting in
fresh ones. fp32 and bf16; CPU tensors, and CUDA tensors where moerl is built with CUDA and a
device is visible: their rows stay on the device where the channel's group accepts device
memory, else they are staged through host memory at each call's edges (moerl/_ep_device.py
says which and what crosses to host).

The low-latency calls are in ep_low_latency.py, the autograd pair in ep_autograd.py.
"""

from __future__ import annotations

import itertools
import multiprocessing.util
from typing import Any, List, Optional, Tuple, Union

import torch
import torch.distributed as dist

from . import _moerl
from ._ep_common import _DTYPES, EventOverlap, _check_shape, _check_tensor, _fail, _not_yet
from . import _ep_device
from ._ep_device import MEMORY_HOST, cuda_device_of, inputs_ready, routing_to_host, takes_cuda_tensors, tensor_path
from .ep_low_latency import LowLatencyCalls

_buffer_ids = itertools.count()

#: DeepEP's index dtype.
topk_idx_t = torch.int64


def _normal_on_device(buffer: "Buffer", a: dict) -> bool:
    """Whether a normal dispatch or combine given CUDA tensors takes the device path: x is one
    tensor (FP8's (data, scales) pair stages) of a dtype and rank the channels move (else the
    staged call's checks name the problem), and the x channel of its shape accepted device
    memory (_ep_device.normal_device_channel, collective at its first call)."""
    x = a.get("x")
    if cuda_device_of(x) is None or x.dtype not in _DTYPES or x.dim() != 2:
        return False
    return _ep_device.normal_device_channel(buffer, x.shape[1], _DTYPES[x.dtype]) != MEMORY_HOST


def _layout_on_device(buffer: "Buffer", a: dict) -> bool:
    """get_dispatch_layout is local: with a CUDA topk_idx it computes on a host copy and
    returns its tables on topk_idx's device, whatever the channels' memory."""
    return cuda_device_of(a.get("topk_idx")) is not None


def _on(device: Optional[torch.device], value: Any) -> Any:
    """The device path's results: value's tensors (in tuples, lists and handles) copied to
    the device; unchanged on the host path (device None)."""
    return value if device is None else _ep_device._map_tensors(value, lambda t: t.to(device))


class Config:
    """DeepEP's tuning config; accepted and ignored (moerl sizes its chunks itself)."""

    def __init__(self, num_sms: int = 20, num_max_nvl_chunked_send_tokens: int = 6,
                 num_max_nvl_chunked_recv_tokens: int = 256, num_max_rdma_chunked_send_tokens: int = 6,
                 num_max_rdma_chunked_recv_tokens: int = 256) -> None:
        self.num_sms = num_sms


class _Handle(tuple):
    """DeepEP's dispatch handle: a tuple (rank_prefix_matrix, recv_src_rank, None,
    recv_src_idx, is_token_in_rank, state).

    rank_prefix_matrix [N, N] int32: column ``rank`` holds what DeepEP's does (entry [i][rank] is
    the rows this rank received from ranks 0..i); other columns are -1 (moerl does not
    exchange them). recv_src_rank / recv_src_idx [R] int32: each received row's source rank
    and token index there. is_token_in_rank [T, N] bool: this rank's routing.
    """

    @property
    def _state(self) -> "_HandleState":
        return self[5]


class _HandleState:
    def __init__(self, buffer_id: int, routing_id: int, num_tokens: int, num_recv: int, topk: int):
        self.buffer_id = buffer_id
        self.routing_id = routing_id
        self.num_tokens = num_tokens
        self.num_recv = num_recv
        self.topk = topk


def _release_core(box: List[Any]) -> None:
    core, box[0] = box[0], None
    if core is not None:
        core.close()  # now, even if a stored traceback's frame still holds the core


def _group_allgather(group: Any, size: int) -> Any:
    """The bootstrap's all-gather (address records of a new channel) over the user's group.
    A closure over the group, not a method: the C++ core keeps it, and a reference back to
    the Buffer would be a cycle the garbage collector cannot see through the binding."""

    def gather(mine: bytes) -> List[bytes]:
        out: List[Any] = [None] * size
        dist.all_gather_object(out, mine, group=group)
        return out

    return gather


class Buffer(LowLatencyCalls):
    """DeepEP V1's ``Buffer`` over moerl's expert plane (normal mode, CPU tensors).

    ``num_nvl_bytes + num_rdma_bytes`` bound the tokens one dispatch can carry per rank
    (moerl holds a whole step in its registered regions, where DeepEP streams through a ring):
    a dispatch with more tokens raises ValueError naming the size it needs. Every call is
    collective over the group, in the same order on every rank, as in DeepEP. After an
    exception from a collective call (a timeout, a dead peer) build a new Buffer.
    Threading: one thread per rank calls into a Buffer.

    moerl's own keyword-only parameters: ``op_timeout_ms`` (a step not complete within it
    raises TimeoutError), ``fabric_provider`` (None: ``MOERL_FABRIC_PROVIDER``, else auto:
    efa > shm > tcp;ofi_rxm), ``fabric_paths`` ("auto": shared memory on one host, the fabric
    between hosts; "fabric": every peer through libfabric) and ``reorder_shim`` (the
    fabric's writes split, reordered and re-delivered, as tests use it; fabric/PROTOCOL.md).
    """

    num_sms: int = 20

    def __init__(self, group: Any, num_nvl_bytes: int = 0, num_rdma_bytes: int = 0,
                 low_latency_mode: bool = False, num_qps_per_rank: int = 24,
                 allow_nvlink_for_low_latency_mode: bool = True, allow_mnnvl: bool = False,
                 use_fabric: bool = False, explicitly_destroy: bool = False,
                 enable_shrink: bool = False, comm: Any = None, *, op_timeout_ms: int = 10000,
                 fabric_provider: Optional[str] = None, fabric_paths: str = "auto",
                 reorder_shim: bool = False) -> None:
        if group is None:
            _fail("group is None; expected a torch.distributed process group (mpi4py comm is not supported)")
        if fabric_paths not in ("auto", "fabric"):
            _fail(f"fabric_paths is {fabric_paths!r}; expected 'auto' (a transport per distance) or 'fabric'")
        if not isinstance(op_timeout_ms, int) or op_timeout_ms < 1:
            _fail(f"op_timeout_ms is {op_timeout_ms!r}; expected an int >= 1")
        for name, v in (("num_nvl_bytes", num_nvl_bytes), ("num_rdma_bytes", num_rdma_bytes)):
            if not isinstance(v, int) or v < 0:
                _fail(f"{name} is {v!r}; expected an int >= 0")
        self.group = group
        self.rank: int = dist.get_rank(group)
        self.group_size: int = dist.get_world_size(group)
        self.num_nvl_bytes = num_nvl_bytes
        self.num_rdma_bytes = num_rdma_bytes
        self.low_latency_mode = low_latency_mode
        self.explicitly_destroy = explicitly_destroy
        self._id = next(_buffer_ids)
        self._routing_ids = itertools.count()
        # The finalizer empties this box and closes the core: when the Buffer is collected, at
        # destroy(), or, failing both, as the process exits. Ranks started by multiprocessing
        # (torch.multiprocessing.spawn) leave through os._exit, which runs no destructor, and
        # libfabric's shm provider then left its /dev/shm regions (16 MiB each) behind;
        # multiprocessing runs its finalizers before that os._exit. close() frees the regions
        # even while something else still holds the core (a stored exception's frames).
        self._core_box: List[Optional[_moerl.EpCore]] = [_moerl.EpCore(
            self.rank, self.group_size, num_nvl_bytes + num_rdma_bytes, op_timeout_ms,
            _group_allgather(group, self.group_size), fabric_provider or "", fabric_paths, reorder_shim)]
        self._release = multiprocessing.util.Finalize(self, _release_core, args=(self._core_box,),
                                                      exitpriority=0)

    def destroy(self) -> None:
        """Releases the fabric endpoints and regions (DeepEP: needs explicitly_destroy=True)."""
        assert self.explicitly_destroy, "`explicitly_destroy` flag must be set"
        self._release()

    def _live_core(self) -> "_moerl.EpCore":
        core = self._core_box[0]
        if core is None:
            raise RuntimeError("moerl.ep.Buffer was destroyed")
        return core

    def transport_report(self) -> List[dict]:
        """Per channel (created on first use): {channel, provider, peer_paths, reorder_shim,
        peer_device_paths, tensor_path}; peer_paths names each peer's path ("same_process",
        "same_host" or "network"), and is empty when every peer goes through the fabric
        (fabric_paths="fabric"). peer_device_paths (CUDA builds) names how each peer would
        write the transport's device regions ("cuda_same_process", "cuda_ipc", "fi_hmem" or
        "host_staging"; fabric/DEVICE_MEMORY.md); memory is where the channel's group keeps its
        rows ("host", or "cuda" for a channel of CUDA tensors on the device path: low-latency
        channels and normal mode's x channels); tensor_path is "device" for such a channel,
        else "host" until a call took CUDA tensors, then "host_staging", with device_refused
        naming why a channel of rows stages (normal mode's "topk:" channel carries the routing
        in host memory on either path; moerl/_ep_device.py)."""
        saw = getattr(self, "_saw_cuda_tensors", False)
        refused = {kind: getattr(self, f"_{kind}_device_refused", None) for kind in ("ll", "normal")}
        return [tensor_path(d, saw, refused["ll" if d["channel"].startswith("ll:") else "normal"])
                for d in self._live_core().describe()]

    @staticmethod
    def set_num_sms(new_num_sms: int) -> None:
        assert new_num_sms % 2 == 0, "The SM count must be even"
        Buffer.num_sms = new_num_sms

    @staticmethod
    def capture() -> EventOverlap:
        return EventOverlap()

    @staticmethod
    def is_sm90_compiled() -> bool:
        return False

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        return Config(Buffer.num_sms)

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        return Config(Buffer.num_sms)

    # ---- normal mode ------------------------------------------------------------------

    @takes_cuda_tensors(device_path=_layout_on_device)
    def get_dispatch_layout(self, topk_idx: torch.Tensor, num_experts: int,
                            previous_event: Optional[EventOverlap] = None, async_finish: bool = False,
                            allocate_on_comm_stream: bool = False
                            ) -> Tuple[torch.Tensor, None, torch.Tensor, torch.Tensor, EventOverlap]:
        """DeepEP's layout: (num_tokens_per_rank [N] int32, None, num_tokens_per_expert [E]
        int32, is_token_in_rank [T, N] bool, event). Local: nothing is sent. A CUDA topk_idx
        crosses to host (the layout is computed on the CPU) and the tables come back on its
        device."""
        device = cuda_device_of(topk_idx)
        _check_tensor("topk_idx", topk_idx, (torch.int64,), 2, device)
        topk_idx = routing_to_host(topk_idx)
        self._check_num_experts(num_experts)
        self._check_topk_range(topk_idx, num_experts)
        num_tokens, topk = topk_idx.shape
        per_rank = torch.empty(self.group_size, dtype=torch.int32)
        per_expert = torch.empty(num_experts, dtype=torch.int32)
        in_rank = torch.empty(num_tokens, self.group_size, dtype=torch.bool)
        self._live_core().layout(topk_idx.data_ptr(), num_tokens, topk, num_experts, per_rank.data_ptr(),
                                 per_expert.data_ptr(), in_rank.data_ptr())
        return _on(device, per_rank), None, _on(device, per_expert), _on(device, in_rank), EventOverlap()

    def _check_num_experts(self, num_experts: Any) -> None:
        if not isinstance(num_experts, int) or num_experts < self.group_size or num_experts % self.group_size:
            _fail(f"num_experts is {num_experts!r}; expected a positive multiple of the group size "
                  f"({self.group_size})")

    @staticmethod
    def _check_topk_range(topk_idx: torch.Tensor, num_experts: int) -> None:
        if topk_idx.numel() == 0:
            return
        bad = (topk_idx < -1) | (topk_idx >= num_experts)
        if bool(bad.any()):
            t, k = (int(v) for v in bad.nonzero()[0])
            _fail(f"topk_idx[{t}, {k}] is {int(topk_idx[t, k])}; expected -1 (masked) or an expert id "
                  f"in [0, {num_experts})")

    def _check_x(self, x: Any, device: Optional[torch.device] = None) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """(rows to send, FP8 scales or None). DeepEP's FP8 x is (e4m3 data [T, H], fp32
        scales [T, H/128]); torch 1.13 has no float8 dtype, so the data comes as uint8 (the
        e4m3 bits, as low_latency_dispatch returns them) and travels as raw bytes in a bf16
        channel of H/2 elements (dispatch only copies rows), the scales in an fp32 channel."""
        if not isinstance(x, tuple):
            return _check_tensor("x", x, (torch.bfloat16, torch.float32), 2, device), None
        if len(x) != 2:
            _fail(f"x is a tuple of {len(x)}; expected (e4m3 data as uint8 [T, H], fp32 scales [T, H/128])")
        data = _check_tensor("x[0]", x[0], (torch.uint8,), 2)
        if data.shape[1] % 128:
            _fail(f"x[0] has shape {tuple(data.shape)}; expected a hidden size that is a multiple of 128 (FP8)")
        scales = _check_tensor("x[1]", x[1], (torch.float32,), 2)
        _check_shape("x[1]", scales, (data.shape[0], data.shape[1] // 128), "one scale per 128 channels of x[0]")
        return data.view(torch.bfloat16), scales

    def _move_rows(self, rows: torch.Tensor, in_rank: torch.Tensor, routing_id: int) -> torch.Tensor:
        """A second tensor of one dispatch (the FP8 scales): the same routing, its own channel."""
        core = self._live_core()
        num_recv = core.dispatch(rows.data_ptr(), rows.shape[0], rows.shape[1], _DTYPES[rows.dtype],
                                 in_rank.data_ptr(), 0, 0, 0, routing_id)
        out = torch.empty(num_recv, rows.shape[1], dtype=rows.dtype)
        src_rank, src_idx = torch.empty(num_recv, dtype=torch.int32), torch.empty(num_recv, dtype=torch.int32)
        core.read_dispatch(out.data_ptr(), src_rank.data_ptr(), src_idx.data_ptr(), 0, 0, 0)
        return out

    _POOLED_MIN_BYTES = 1 << 20

    def _host_empty(self, rows: int, width: int, dtype: torch.dtype,
                    device: Optional[torch.device] = None) -> torch.Tensor:
        """torch.empty(rows, width) for a returned tensor: on CPU, from 1 MiB, a view of a block
        of this Buffer's host memory pool (python/bindings/host_block_pool.h). A fresh
        torch.empty of prefill size is a fresh mmap whose every page faults and is zeroed on
        first write, and is unmapped when dropped: about a third of a 2-rank prefill step's
        CPU time. The block returns to the pool when the tensor's last view dies (torch keeps
        the buffer alive), and the next step's tensor reuses its pages. Not resizable in
        place (torch's frombuffer storage); everything else is an ordinary tensor."""
        element = torch.empty(0, dtype=dtype).element_size()
        nbytes = rows * width * element
        if device is not None or nbytes < self._POOLED_MIN_BYTES:
            return torch.empty(rows, width, dtype=dtype, device=device or "cpu")
        block = self._live_core().host_block(nbytes)
        return torch.frombuffer(block, dtype=dtype, count=rows * width).view(rows, width)

    def _recv_rows(self, num_recv: int, hidden: int, dtype: torch.dtype,
                   device: Optional[torch.device]) -> Tuple[torch.Tensor, int]:
        """recv_x for the dispatch just made, and the pointer read_dispatch copies it to (0:
        none). On CPU a view of the rows where the channel received them (one of its output
        slots, python/README.md "Returned tensors"): the senders' stores were the only copy.
        Else, or with every other slot held by earlier recv_x tensors, a pooled copy."""
        if device is None and num_recv > 0:
            view = self._live_core().recv_view()
            if view is not None:
                return torch.frombuffer(view, dtype=dtype, count=num_recv * hidden).view(num_recv, hidden), 0
        recv_x = self._host_empty(num_recv, hidden, dtype, device)
        return recv_x, recv_x.data_ptr()

    def _check_capacity(self, x: torch.Tensor, topk: int) -> None:
        core = self._live_core()
        num_tokens = x.shape[0]
        rows = [x.shape[1] * x.element_size()] + ([12 * topk] if topk else [])
        for row_bytes in rows:
            if num_tokens > core.capacity(row_bytes):
                _fail(f"x has {num_tokens} tokens; this Buffer (num_nvl_bytes + num_rdma_bytes = "
                      f"{self.num_nvl_bytes + self.num_rdma_bytes}) holds at most {core.capacity(row_bytes)} "
                      f"per rank at hidden {x.shape[1]} {str(x.dtype).replace('torch.', '')}; "
                      f"pass num_nvl_bytes >= {core.bytes_needed(num_tokens, row_bytes)}")

    @takes_cuda_tensors(device_path=_normal_on_device)
    def dispatch(self, x: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]], handle: Optional[tuple] = None,
                 num_tokens_per_rank: Optional[torch.Tensor] = None,
                 num_tokens_per_rdma_rank: Optional[torch.Tensor] = None,
                 is_token_in_rank: Optional[torch.Tensor] = None,
                 num_tokens_per_expert: Optional[torch.Tensor] = None,
                 topk_idx: Optional[torch.Tensor] = None, topk_weights: Optional[torch.Tensor] = None,
                 expert_alignment: int = 1, num_worst_tokens: int = 0, config: Optional[Config] = None,
                 previous_event: Optional[EventOverlap] = None, async_finish: bool = False,
                 allocate_on_comm_stream: bool = False) -> tuple:
        """DeepEP's normal dispatch. Returns (recv_x [R, H], recv_topk_idx [R, K] int64 local
        expert ids or -1, recv_topk_weights [R, K] fp32 (0 where the id is -1),
        num_recv_tokens_per_expert_list, handle, event). Rows are grouped by source rank in
        ascending order, in token order inside a source. With ``handle=`` (cached): the same
        routing again, returning (recv_x, None, None, None, None, event). FP8: x = (e4m3 bits
        as uint8 [T, H], fp32 scales [T, H/128]) returns recv_x as the same pair of [R, ...]
        tensors (H a multiple of 128). Every tensor returned is new and owns its memory. CUDA
        tensors (moerl/_ep_device.py): on the device path x's rows go GPU to GPU and every
        returned tensor is on x's device; is_token_in_rank, topk_idx and topk_weights cross to
        host (the group plans on the CPU), and the small tables come back."""
        # Here with a CUDA x only on the device path (takes_cuda_tensors stages the others).
        device = cuda_device_of(x)
        x, scales = self._check_x(x, device)
        num_tokens, hidden = x.shape
        n = self.group_size
        if not isinstance(expert_alignment, int) or expert_alignment < 1:
            _fail(f"expert_alignment is {expert_alignment!r}; expected an int >= 1")
        if not isinstance(num_worst_tokens, int) or num_worst_tokens < 0:
            _fail(f"num_worst_tokens is {num_worst_tokens!r}; expected an int >= 0")
        if handle is not None:
            return self._cached_dispatch(x, scales, handle, topk_idx, topk_weights, device)
        if is_token_in_rank is None:
            _fail("is_token_in_rank is None; expected the [num_tokens, num_ranks] bool tensor from "
                  "get_dispatch_layout (or a handle)")
        _check_tensor("is_token_in_rank", is_token_in_rank, (torch.bool,), 2, device)
        _check_shape("is_token_in_rank", is_token_in_rank, (num_tokens, n), "x's tokens by ranks")
        topk = 0
        num_experts = 0
        if topk_idx is not None:
            _check_tensor("topk_idx", topk_idx, (torch.int64,), 2, device)
            if topk_idx.shape[0] != num_tokens:
                _fail(f"topk_idx has shape {tuple(topk_idx.shape)}; expected {num_tokens} rows (x's tokens)")
            topk = topk_idx.shape[1]
            if topk_weights is None:
                _fail("topk_weights is None; expected a float32 tensor shaped like topk_idx")
            _check_tensor("topk_weights", topk_weights, (torch.float32,), 2, device)
            _check_shape("topk_weights", topk_weights, tuple(topk_idx.shape), "like topk_idx")
            if num_tokens_per_expert is None:
                _fail("num_tokens_per_expert is None; expected the [num_experts] int32 tensor from "
                      "get_dispatch_layout (moerl takes num_experts from its length)")
            _check_tensor("num_tokens_per_expert", num_tokens_per_expert, (torch.int32,), 1, device)
            num_experts = num_tokens_per_expert.shape[0]
            self._check_num_experts(num_experts)
            self._check_topk_range(topk_idx, num_experts)
        elif topk_weights is not None:
            _fail("topk_weights is given without topk_idx; expected both or neither")
        if num_tokens_per_rank is not None:
            _check_tensor("num_tokens_per_rank", num_tokens_per_rank, (torch.int32,), 1, device)
            _check_shape("num_tokens_per_rank", num_tokens_per_rank, (n,), "one count per rank")
        self._check_capacity(x, topk)
        if scales is not None:
            self._check_capacity(scales, 0)

        core = self._live_core()
        routing_id = next(self._routing_ids)
        memory = self._x_memory(x, device)
        in_rank = routing_to_host(is_token_in_rank)
        if topk:
            topk_idx, topk_weights = routing_to_host(topk_idx), routing_to_host(topk_weights)
        inputs_ready(device)
        num_recv = core.dispatch(x.data_ptr(), num_tokens, hidden, _DTYPES[x.dtype], in_rank.data_ptr(),
                                 topk_idx.data_ptr() if topk else 0, topk_weights.data_ptr() if topk else 0,
                                 topk, routing_id, memory)
        recv_x, recv_ptr = self._recv_rows(num_recv, hidden, x.dtype, device)
        src_rank = torch.empty(num_recv, dtype=torch.int32)
        src_idx = torch.empty(num_recv, dtype=torch.int32)
        recv_topk_idx = torch.empty(num_recv, topk, dtype=torch.int64) if topk else None
        recv_topk_weights = torch.empty(num_recv, topk, dtype=torch.float32) if topk else None
        per_expert = core.read_dispatch(recv_ptr, src_rank.data_ptr(), src_idx.data_ptr(),
                                        recv_topk_idx.data_ptr() if topk else 0,
                                        recv_topk_weights.data_ptr() if topk else 0, num_experts)
        per_expert_list = [-(-c // expert_alignment) * expert_alignment for c in per_expert]
        recv_scales = self._move_rows(scales, is_token_in_rank, routing_id) if scales is not None else None

        rank_prefix = torch.full((n, n), -1, dtype=torch.int32)
        rank_prefix[:, self.rank] = torch.cumsum(torch.bincount(src_rank.long(), minlength=n), 0).to(torch.int32)
        state = _HandleState(self._id, routing_id, num_tokens, num_recv, topk)
        new_handle = _Handle((rank_prefix, src_rank, None, src_idx, in_rank.clone(), state))
        if num_worst_tokens > 0:
            if num_worst_tokens < num_recv:
                _fail(f"num_worst_tokens is {num_worst_tokens}; this rank received {num_recv} rows")
            pad = num_worst_tokens - num_recv
            recv_x = torch.cat([recv_x, recv_x.new_zeros(pad, hidden)])
            if recv_scales is not None:
                recv_scales = torch.cat([recv_scales, recv_scales.new_ones(pad, recv_scales.shape[1])])
            if topk:
                recv_topk_idx = torch.cat([recv_topk_idx, recv_topk_idx.new_full((pad, topk), -1)])
                recv_topk_weights = torch.cat([recv_topk_weights, recv_topk_weights.new_zeros(pad, topk)])
            per_expert_list = []
        out_x: Any = (recv_x.view(torch.uint8), recv_scales) if recv_scales is not None else recv_x
        # The device path: recv_x is on the device already; the small tables follow it.
        recv_topk_idx, recv_topk_weights, new_handle = _on(device, (recv_topk_idx, recv_topk_weights, new_handle))
        return out_x, recv_topk_idx, recv_topk_weights, per_expert_list, new_handle, EventOverlap()

    def _x_memory(self, x: torch.Tensor, device: Optional[torch.device]) -> int:
        """The memory code of x's channel: the device channel's on the device path (decided,
        and the channel created, by _normal_on_device), else host."""
        if device is None:
            return MEMORY_HOST
        return _ep_device.normal_device_channel(self, x.shape[1], _DTYPES[x.dtype])

    def _state_of(self, handle: Any) -> _HandleState:
        if not isinstance(handle, _Handle):
            _fail(f"handle is {type(handle).__name__}; expected the handle a dispatch of this Buffer returned")
        st = handle._state
        if st.buffer_id != self._id:
            _fail("handle comes from another Buffer; expected a handle this Buffer's dispatch returned")
        return st

    def _cached_dispatch(self, x: torch.Tensor, scales: Optional[torch.Tensor], handle: Any, topk_idx: Any,
                         topk_weights: Any, device: Optional[torch.device] = None) -> tuple:
        st = self._state_of(handle)
        if topk_idx is not None or topk_weights is not None:
            _fail("topk_idx/topk_weights are given with handle=; expected None (cached dispatch reuses the routing)")
        if x.shape[0] != st.num_tokens:
            _fail(f"x has {x.shape[0]} tokens; the handle's dispatch had {st.num_tokens}")
        self._check_capacity(x, 0)
        if scales is not None:
            self._check_capacity(scales, 0)
        core = self._live_core()
        in_rank = routing_to_host(handle[4])
        inputs_ready(device)
        num_recv = core.dispatch(x.data_ptr(), x.shape[0], x.shape[1], _DTYPES[x.dtype], in_rank.data_ptr(),
                                 0, 0, 0, st.routing_id, self._x_memory(x, device))
        recv_x, recv_ptr = self._recv_rows(num_recv, x.shape[1], x.dtype, device)
        src_rank = torch.empty(num_recv, dtype=torch.int32)
        src_idx = torch.empty(num_recv, dtype=torch.int32)
        core.read_dispatch(recv_ptr, src_rank.data_ptr(), src_idx.data_ptr(), 0, 0, 0)
        if scales is not None:
            return (recv_x.view(torch.uint8), self._move_rows(scales, in_rank, st.routing_id)), None, None, None, \
                None, EventOverlap()
        return recv_x, None, None, None, None, EventOverlap()

    @takes_cuda_tensors(device_path=_normal_on_device)
    def combine(self, x: torch.Tensor, handle: tuple, topk_weights: Optional[torch.Tensor] = None,
                bias: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor], None] = None,
                config: Optional[Config] = None, previous_event: Optional[EventOverlap] = None,
                async_finish: bool = False, allocate_on_comm_stream: bool = False
                ) -> Tuple[torch.Tensor, Optional[torch.Tensor], EventOverlap]:
        """DeepEP's normal combine: combined_x[t] = the sum (fp32 accumulation, one rounding)
        of the rows every rank returns for token t, plus bias; combined_topk_weights likewise
        (the original weight where the id was local somewhere, else 0). x [R, H] in the
        handle's row order. Returns new tensors. CUDA tensors: on the device path x and
        combined_x stay on the device; the handle's is_token_in_rank and topk_weights cross to
        host, combined_topk_weights comes back."""
        st = self._state_of(handle)
        device = cuda_device_of(x)
        x = _check_tensor("x", x, (torch.bfloat16, torch.float32), 2, device)
        if x.shape[0] != st.num_recv:
            _fail(f"x has {x.shape[0]} rows; expected {st.num_recv} (the rows the handle's dispatch received)")
        topk = 0
        if topk_weights is not None:
            _check_tensor("topk_weights", topk_weights, (torch.float32,), 2, device)
            topk_weights = routing_to_host(topk_weights)
            if topk_weights.shape[0] != st.num_recv:
                _fail(f"topk_weights has shape {tuple(topk_weights.shape)}; expected {st.num_recv} rows")
            topk = topk_weights.shape[1]
        biases = [] if bias is None else (list(bias) if isinstance(bias, tuple) else [bias])
        for i, b in enumerate(biases):
            if b is None:
                continue
            _check_tensor(f"bias[{i}]", b, (x.dtype,), 2, device)
            _check_shape(f"bias[{i}]", b, (st.num_tokens, x.shape[1]), "[num_tokens, hidden]")
        self._check_capacity(x.new_empty(st.num_tokens, x.shape[1]), topk)
        y = self._host_empty(st.num_tokens, x.shape[1], x.dtype, device)
        combined_w = torch.empty(st.num_tokens, topk, dtype=torch.float32) if topk else None
        in_rank = routing_to_host(handle[4])
        inputs_ready(device)
        self._live_core().combine(x.data_ptr(), x.shape[0], x.shape[1], _DTYPES[x.dtype], in_rank.data_ptr(),
                                  st.num_tokens, st.routing_id, y.data_ptr(),
                                  topk_weights.data_ptr() if topk else 0, topk,
                                  combined_w.data_ptr() if topk else 0, self._x_memory(x, device))
        combined_w = _on(device, combined_w)
        biases = [b for b in biases if b is not None]
        if biases:
            acc = y.float()
            for b in biases:
                acc += b.float()
            y = acc.to(x.dtype)
        return y, combined_w, EventOverlap()

    # ---- not yet ----------------------------------------------------------------------

    def internode_dispatch(self, *args: Any, **kwargs: Any) -> Any:
        _not_yet("internode_dispatch (normal dispatch already spans hosts)")

    def internode_combine(self, *args: Any, **kwargs: Any) -> Any:
        _not_yet("internode_combine (normal combine already spans hosts)")


__all__ = ["Buffer", "Config", "EventOverlap", "topk_idx_t"]

# The autograd pair (defined beside, re-exported here so users find it under moerl.ep).
from .ep_autograd import CombineFunction, DispatchFunction  # noqa: E402
from .ep_autograd import combine as differentiable_combine  # noqa: E402
from .ep_autograd import dispatch as differentiable_dispatch  # noqa: E402

__all__ += ["CombineFunction", "DispatchFunction", "differentiable_combine", "differentiable_dispatch"]
