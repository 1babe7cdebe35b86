"""CUDA tensors in ``moerl.ep`` (issue 29): what a call given CUDA tensors does.

The calls of ``Buffer`` (normal and low-latency) take CUDA tensors where moerl is built with
CUDA and a device is visible, along one of two paths (fabric/DEVICE_MEMORY.md):

- **device** (low-latency calls; normal ``dispatch``/``combine`` with x one tensor of bf16 or
  fp32): the channel's group keeps its payload rows in device memory
  (``fabric::ep_memory::cuda``); the rows move GPU to GPU, through CUDA IPC between ranks of
  a host (or FI_HMEM on efa), and x, recv_x, the combine's x and its result stay on the
  device. Only the routing and the small per-call tables cross to host memory, because the
  group plans the moves on the CPU: low-latency's topk_idx, topk_weights and statistics;
  normal mode's is_token_in_rank, topk_idx and topk_weights (which travel in a host channel
  of their own, ``topk:``), the handle's tables and ``get_dispatch_layout`` (computed on the
  CPU, its results copied to the device). With ``use_fp8`` the low-latency received rows
  cross once too (quantised by the CPU twin). Chosen per channel when the group accepts
  device memory (collectively, at the channel's first call).
- **host staging** (normal mode's FP8 pair (data, scales), baseline, and any channel whose
  group refused device memory: a peer on another host behind a provider without FI_HMEM,
  e.g. tcp): the call's CUDA tensors are copied to host memory, the expert plane moves them
  as it moves CPU tensors, and every returned tensor is copied to the inputs' device.

``Buffer.transport_report()`` says which per channel (``tensor_path``: ``device`` or
``host_staging``, with ``device_refused`` naming why a channel of rows stages) next to the
transport's ``peer_device_paths``; normal mode's ``topk:`` channel stages on either path.
Every rank passes tensors of one kind to a collective call, so every rank makes the same
choice.

A CUDA tensor where that cannot work is an error naming why: a moerl built without CUDA, or
no visible device. Tensors on other devices keep the argument checks' error
(_ep_common._check_tensor).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, Optional, Tuple

import torch

from . import _moerl

#: Buffer.transport_report()'s ``tensor_path`` for CUDA tensors through host staging.
TENSOR_PATH_CUDA = "host_staging"
#: ... and for a channel whose rows live in device memory.
TENSOR_PATH_DEVICE = "device"

#: The memory codes of the binding (python/bindings/module.cpp, fabric::ep_memory).
MEMORY_HOST, MEMORY_CUDA, MEMORY_HOST_SPLIT = 0, 1, 2
#: The memory of the device path's channels: MEMORY_CUDA; the tests set MEMORY_HOST_SPLIT to
#: run the device path (split layout, batched copies) on CPU stand-ins.
DEVICE_CHANNEL_MEMORY = MEMORY_CUDA


def cuda_unavailable_reason() -> Optional[str]:
    """None where CUDA tensors can be taken, else why not (for the caller's error)."""
    if not getattr(_moerl, "cuda_build", False):
        return (f"this moerl build (moerl {_moerl.__version__}) has no CUDA (built without nvcc or "
                f"with MOERL_ENABLE_CUDA=OFF): it takes CPU tensors only")
    if not torch.cuda.is_available():
        return (f"moerl {_moerl.__version__} is built with CUDA, but no CUDA device is visible to "
                f"this process (torch.cuda.is_available() is False)")
    return None


def _is_cuda(t: torch.Tensor) -> bool:
    return t.device.type == "cuda"


def _to_host(t: torch.Tensor) -> torch.Tensor:
    return t.cpu() if _is_cuda(t) else t


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t.to(device)


def cuda_device_of(t: Any) -> Optional[torch.device]:
    """t's device when t is a CUDA tensor (a call on the device path), else None."""
    return t.device if isinstance(t, torch.Tensor) and _is_cuda(t) else None


def routing_to_host(t: torch.Tensor) -> torch.Tensor:
    """The device path's routing tables, which the group reads on the CPU."""
    return t if t.device.type == "cpu" else t.cpu()


def inputs_ready(device: Optional[torch.device]) -> None:
    """The group copies rows on a stream of its own, which does not wait for the caller's:
    the kernels that wrote this call's inputs finish first."""
    if device is not None and device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


def _first_cuda(value: Any, name: str) -> Optional[Tuple[str, torch.device]]:
    """(argument name, device) of the first CUDA tensor in value (tensors, tuples, lists)."""
    if isinstance(value, torch.Tensor):
        return (name, value.device) if _is_cuda(value) else None
    if isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            found = _first_cuda(item, f"{name}[{i}]")
            if found:
                return found
    return None


def _has_cuda(value: Any) -> bool:
    """Whether value holds a CUDA tensor (_first_cuda's test, without naming it)."""
    if isinstance(value, torch.Tensor):
        return _is_cuda(value)
    if isinstance(value, (tuple, list)):
        return any(map(_has_cuda, value))
    return False


def _map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """value with fn applied to every tensor inside tuples and lists; tuple subclasses (the
    dispatch handles) keep their type and attributes, other objects pass through."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list):
        return [_map_tensors(v, fn) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        mapped = type(value)(_map_tensors(v, fn) for v in value)
        if type(value) is not tuple:  # the low-latency handle's state rides as an attribute
            mapped.__dict__.update(value.__dict__)
        return mapped
    return value


def stage_call(method: Callable[..., Any], arguments: Dict[str, Any], inout: Tuple[str, ...],
               device: torch.device, to_host: Callable[[torch.Tensor], torch.Tensor],
               to_device: Callable[[torch.Tensor, torch.device], torch.Tensor]) -> Any:
    """method(**arguments) with every tensor of the arguments put through to_host and every
    tensor of the result through to_device. The arguments named in `inout` (``out``, the
    receive statistics) are written by the call: their host copies are copied back into the
    caller's tensors, and a result that is one of them is returned as the caller's tensor."""
    host = {k: _map_tensors(v, to_host) for k, v in arguments.items()}
    result = method(**host)
    back: Dict[int, torch.Tensor] = {}  # id(host copy) -> the caller's tensor it stands for
    for name in inout:
        mine, theirs = host.get(name), arguments.get(name)
        if isinstance(mine, torch.Tensor) and isinstance(theirs, torch.Tensor):
            if mine is not theirs:
                theirs.copy_(mine)
            back[id(mine)] = theirs

    def up(t: torch.Tensor) -> torch.Tensor:
        return back[id(t)] if id(t) in back else to_device(t, device)

    return _map_tensors(result, up)


def takes_cuda_tensors(*inout: str, device_path: Optional[Callable[[Any, Dict[str, Any]], bool]] = None
                       ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorates a Buffer call whose arguments named in `inout` are written by it: CUDA
    tensors among its arguments go through stage_call (or raise naming the argument and why
    they cannot); calls without any run unchanged. With `device_path`, a call for which
    device_path(buffer, arguments) is true gets its CUDA tensors as they are (the device
    path); device_path is asked only where CUDA tensors can be taken at all."""

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(method)

        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            # CPU calls (the common case) go straight through: binding the signature and
            # naming the arguments cost a decode step's low-latency call 0.05-0.1 ms (cold
            # caches after the exchange), a tenth of its overhead over the C++ path.
            if not any(map(_has_cuda, args)) and not any(map(_has_cuda, kwargs.values())):
                return method(self, *args, **kwargs)
            bound = signature.bind(self, *args, **kwargs)
            arguments = {k: v for k, v in bound.arguments.items() if k != "self"}
            found = next((f for f in (_first_cuda(v, k) for k, v in arguments.items()) if f), None)
            if found is None:
                return method(self, *args, **kwargs)
            name, device = found
            reason = cuda_unavailable_reason()
            if reason is not None:
                raise RuntimeError(f"{method.__name__}: {name} is on {device}; {reason}")
            self._saw_cuda_tensors = True
            if device_path is not None and device_path(self, arguments):
                return method(self, *args, **kwargs)
            return stage_call(lambda **a: method(self, **a), arguments, inout, device,
                              lambda t: _to_host(t), lambda t, d: _to_device(t, d))

        return call

    return wrap


def _channel_memory(buffer: Any, kind: str, key: Tuple[int, ...], prepare: Callable[[int], str]) -> int:
    """DEVICE_CHANNEL_MEMORY where the `kind` ("ll" or "normal") channel of `key` accepted
    device memory (prepare(memory) returned ""), else MEMORY_HOST (the call stages; the refusal
    is kept as buffer._<kind>_device_refused for transport_report()). Asked once per key."""
    cache: Dict[Tuple[int, ...], int] = buffer.__dict__.setdefault(f"_{kind}_device_channels", {})
    if key not in cache:
        refused = prepare(DEVICE_CHANNEL_MEMORY)
        cache[key] = MEMORY_HOST if refused else DEVICE_CHANNEL_MEMORY
        if refused:
            buffer.__dict__[f"_{kind}_device_refused"] = refused
    return cache[key]


def device_channel(buffer: Any, hidden: int, dtype_code: int, max_tokens: int, num_experts: int,
                   topk: int) -> int:
    """The memory code of the low-latency channel of this shape for CUDA tensors
    (_channel_memory). The first call per shape creates the channel: collective, like the call
    it serves."""
    return _channel_memory(buffer, "ll", (hidden, dtype_code, max_tokens, num_experts, topk),
                           lambda memory: buffer._live_core().ll_prepare(hidden, dtype_code, max_tokens,
                                                                         num_experts, topk, memory))


def normal_device_channel(buffer: Any, hidden: int, dtype_code: int) -> int:
    """The memory code of normal mode's x channel of (hidden, dtype) for CUDA tensors
    (_channel_memory); collective at its first call, like device_channel."""
    return _channel_memory(buffer, "normal", (hidden, dtype_code),
                           lambda memory: buffer._live_core().prepare(dtype_code, hidden, memory))


def tensor_path(channel: Dict[str, Any], saw_cuda_tensors: bool, device_refused: Optional[str]) -> Dict[str, Any]:
    """transport_report()'s entry for one channel of EpCore.describe(); device_refused is the
    refusal of the device memory this channel's kind asked for (none for normal mode's
    ``topk:`` channel, which is host memory on every path)."""
    if channel.get("memory", "host") != "host":
        return dict(channel, tensor_path=TENSOR_PATH_DEVICE)
    entry = dict(channel, tensor_path=TENSOR_PATH_CUDA if saw_cuda_tensors else "host")
    if saw_cuda_tensors and device_refused and not channel["channel"].startswith("topk:"):
        entry["device_refused"] = device_refused
    return entry
