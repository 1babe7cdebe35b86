"""What ``moerl.ep``'s modules share: DeepEP's event object, the dtype codes of the binding,
and the argument checks whose messages name the argument and the expectation (raised before
anything is sent)."""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from . import _moerl

_ISSUE = "moerl issue 25"
#: dtype -> the binding's dtype code (python/bindings/module.cpp, dtype_of).
_DTYPES = {torch.bfloat16: 0, torch.float32: 1}


class EventOverlap:
    """DeepEP's event: on CPU every call has finished when it returns, so waiting is a no-op."""

    def __init__(self, event: Any = None, extra_tensors: Optional[Tuple[torch.Tensor, ...]] = None) -> None:
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self, release_handle: bool = False) -> None:
        """Nothing to wait for: the work is complete."""

    def register_hook_after_wait(self, hook: Any) -> None:
        hook()

    def __call__(self, release_handle: bool = False) -> None:
        self.current_stream_wait(release_handle)

    def __enter__(self) -> "EventOverlap":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.current_stream_wait()


def _fail(msg: str) -> None:
    raise ValueError(msg)


def _check_tensor(name: str, t: Any, dtypes: Tuple[torch.dtype, ...], dim: int,
                  device: Optional[torch.device] = None) -> torch.Tensor:
    """t's type, dtype, dimensions and contiguity; on the CPU, or on `device` where given (the
    low-latency calls' device path, moerl/_ep_device.py)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} is {type(t).__name__}; expected a torch.Tensor")
    if device is not None and t.device != device:
        _fail(f"{name} is on {t.device}; expected {device} (the device of x, whose rows this call moves)")
    if device is None and t.device.type != "cpu":
        # CUDA tensors are staged before the checks (_ep_device.takes_cuda_tensors); a tensor
        # here is on a device moerl never takes, or on CUDA where it cannot.
        raise RuntimeError(f"{name} is on {t.device}; moerl.ep takes CPU tensors, and CUDA tensors where "
                           f"moerl {_moerl.__version__} is built with CUDA and a device is visible")
    if t.dtype not in dtypes:
        want = " or ".join(str(d).replace("torch.", "") for d in dtypes)
        _fail(f"{name} has dtype {str(t.dtype).replace('torch.', '')}; expected {want}")
    if t.dim() != dim:
        _fail(f"{name} has shape {tuple(t.shape)}; expected {dim} dimensions")
    if not t.is_contiguous():
        _fail(f"{name} is not contiguous; expected a contiguous tensor (call .contiguous())")
    return t


def _check_shape(name: str, t: torch.Tensor, shape: Tuple[int, ...], what: str) -> None:
    if tuple(t.shape) != tuple(shape):
        _fail(f"{name} has shape {tuple(t.shape)}; expected {tuple(shape)} ({what})")


def _not_yet(what: str) -> None:
    raise NotImplementedError(f"moerl.ep: {what} is not implemented yet ({_ISSUE})")
