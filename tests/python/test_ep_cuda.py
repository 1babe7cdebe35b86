"""moerl.ep.Buffer given CUDA tensors (issue 29; moerl/_ep_device.py): the low-latency and
normal calls on the device path (the channel's rows in device memory, CUDA IPC between
ranks), normal mode's FP8 pairs and refused channels staged through host memory at each
call's edges. Here (no device): the staging and the device path of both modes on CPU
stand-ins (the device path's split layout and batched copies on host memory,
fabric::ep_memory::host_split), and the errors for a CUDA tensor where it cannot work. On a
GPU (bench/gpu_check.sh): DeepEP-style checks of test_ep_buffer.py and
test_ep_low_latency.py, unchanged, with every tensor the calls see on the device, 2 and 4
processes sharing the one GPU."""

import subprocess
import sys

import pytest
import torch

import moerl.ep
from moerl import _ep_device, _moerl
from ep_harness import run_ranks
import test_ep_buffer
import test_ep_low_latency


def _device_visible() -> bool:
    # Asked from a child: CUDA initialised in this process would be unusable in the ranks it
    # forks (ep_harness forks them).
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", probe], timeout=120).returncode == 0


NO_GPU = None if _moerl.cuda_build and _device_visible() else (
    "no CUDA device visible" if _moerl.cuda_build else "moerl built without CUDA")


class _Handle(tuple):
    """A tuple subclass like the dispatch handle, to see that staging keeps the type."""


def test_staging_copies_arguments_down_and_results_up_keeping_handles_and_inout() -> None:
    x = torch.arange(6.0).view(2, 3)
    stats = torch.zeros(2, dtype=torch.int32)
    out = torch.zeros(2, 3)
    seen = {}

    def method(x, handle, stats, out, n):
        seen.update(x=x, handle=handle, stats=stats, out=out, n=n)
        stats += 5
        out.copy_(x * 2)
        return out, _Handle((x + 1, None, [x.sum()])), "event"

    downs, ups = [], []

    def to_host(t):
        downs.append(t)
        return t.clone()

    def to_device(t, device):
        ups.append(device)
        return t.clone()

    handle = _Handle((x, 7))
    handle.state = "kept"
    result = _ep_device.stage_call(method, dict(x=x, handle=handle, stats=stats, out=out, n=3),
                                   ("stats", "out"), torch.device("cpu"), to_host, to_device)
    # The call saw host copies, never the caller's tensors; non-tensors passed as they were.
    assert seen["x"] is not x and torch.equal(seen["x"], x) and seen["n"] == 3
    assert type(seen["handle"]) is _Handle and seen["handle"][1] == 7 and seen["handle"][0] is not x
    assert seen["handle"].state == "kept"
    # In/out arguments were written back; `out` comes back as the caller's own tensor.
    assert stats.tolist() == [5, 5] and torch.equal(out, x * 2)
    assert result[0] is out and result[2] == "event"
    assert type(result[1]) is _Handle and torch.equal(result[1][0], x + 1) and result[1][1] is None
    assert isinstance(result[1][2], list) and float(result[1][2][0]) == 15.0
    assert len(downs) == 4 and len(ups) == 2  # x, handle's x, stats, out; x + 1 and the sum


def test_the_reason_names_the_build_or_the_missing_device(monkeypatch) -> None:
    monkeypatch.setattr(_moerl, "cuda_build", False, raising=False)
    assert "has no CUDA" in _ep_device.cuda_unavailable_reason()
    monkeypatch.setattr(_moerl, "cuda_build", True, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "no CUDA device is visible" in _ep_device.cuda_unavailable_reason()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert _ep_device.cuda_unavailable_reason() is None


@pytest.mark.parametrize("build", [False, True])
def test_a_cuda_tensor_that_cannot_be_taken_is_an_error_naming_argument_and_why(monkeypatch, build) -> None:
    # This torch has no CUDA: meta tensors stand for CUDA ones.
    monkeypatch.setattr(_ep_device, "_is_cuda", lambda t: t.device.type == "meta")
    monkeypatch.setattr(_moerl, "cuda_build", build, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    buf = object.__new__(moerl.ep.Buffer)  # the checks run before the Buffer is used
    idx = torch.zeros(3, 2, dtype=torch.int64)
    why = "has no CUDA" if build is False else "no CUDA device is visible"
    with pytest.raises(RuntimeError, match=f"dispatch: x is on meta; .*{why}"):
        buf.dispatch(torch.empty(3, 64, device="meta"), topk_idx=idx)
    with pytest.raises(RuntimeError, match=f"low_latency_combine: topk_weights is on meta; .*{why}"):
        buf.low_latency_combine(torch.empty(0), idx, torch.empty(3, 2, device="meta"), None)


class _OnDevice:
    """A Buffer seen through CUDA tensors: every tensor argument goes to the device, every
    tensor of the result must come back on it (then returns to the CPU, where the unchanged
    checks of the CPU tests compare it); in/out arguments are copied back into the caller's."""

    INOUT = ("out", "cumulative_local_expert_recv_stats", "dispatch_wait_recv_cost_stats")

    def __init__(self, buf: "moerl.ep.Buffer", device: torch.device) -> None:
        self.buf, self.device = buf, device

    def __getattr__(self, name: str):
        target = getattr(self.buf, name)
        if name not in ("get_dispatch_layout", "dispatch", "combine", "low_latency_dispatch", "low_latency_combine"):
            return target

        def call(*args, **kwargs):
            to_dev = lambda t: t.to(self.device)  # noqa: E731
            dev_args = _ep_device._map_tensors(args, to_dev)
            dev_kwargs = {k: _ep_device._map_tensors(v, to_dev) for k, v in kwargs.items()}
            result = target(*dev_args, **dev_kwargs)

            def back(t):
                assert t.device == self.device, f"{name} returned a tensor on {t.device}"
                return t.cpu()

            for k in self.INOUT:
                if isinstance(kwargs.get(k), torch.Tensor):
                    kwargs[k].copy_(dev_kwargs[k])
            host = _ep_device._map_tensors(result, back)
            if isinstance(kwargs.get("out"), torch.Tensor):
                assert result[0] is dev_kwargs["out"]
                host = (kwargs["out"],) + tuple(host[1:])
            return host

        return call


def _staged_on_cpu() -> None:
    """The staged path on CPU tensors: every CPU tensor counts as a device one, and staging
    clones (down and up), so the Buffer's calls run exactly as they do for CUDA tensors. The
    low-latency channels refuse device memory here, as a group spanning hosts over tcp does."""
    _ep_device._is_cuda = lambda t: True
    _ep_device.cuda_unavailable_reason = lambda: None
    _ep_device._to_host = lambda t: t.clone()
    _ep_device._to_device = lambda t, device: t.clone()
    _ep_device.device_channel = lambda *args: _ep_device.MEMORY_HOST
    _ep_device.normal_device_channel = lambda *args: _ep_device.MEMORY_HOST


def _device_path_on_cpu() -> None:
    """The device path on CPU tensors: every CPU tensor counts as a device one, and the
    channels keep their rows in host_split memory (the device path's layout and batched
    copies, with the CPU twins). Nothing may be staged but normal mode's FP8 pairs (data,
    scales), which stage by design."""
    stage = _ep_device.stage_call

    def only_fp8_pairs(method, arguments, inout, device, to_host, to_device):
        if not isinstance(arguments.get("x"), tuple):
            raise AssertionError(f"a call on the device path staged its tensors ({sorted(arguments)})")
        return stage(method, arguments, inout, device, lambda t: t.clone(), lambda t, d: t.clone())

    _ep_device._is_cuda = lambda t: True
    _ep_device.cuda_unavailable_reason = lambda: None
    _ep_device.stage_call = only_fp8_pairs
    _ep_device.DEVICE_CHANNEL_MEMORY = _ep_device.MEMORY_HOST_SPLIT


def _cuda_worker(rank: int, world: int, mode: str, device_type: str = "cuda", stand_in: str = "staged") -> None:
    device = torch.device(device_type, 0 if device_type == "cuda" else None)
    if device_type == "cuda":
        torch.cuda.set_device(device)  # every rank on the one GPU
    elif stand_in == "device":
        _device_path_on_cpu()
    else:
        _staged_on_cpu()
    if mode == "normal":
        buf = moerl.ep.Buffer(torch.distributed.group.WORLD, num_nvl_bytes=test_ep_buffer.NUM_BYTES,
                              op_timeout_ms=60000)
        for case in test_ep_buffer.CASES:
            test_ep_buffer.check_case(rank, world, _OnDevice(buf, device), case)
    else:
        buf = moerl.ep.Buffer(torch.distributed.group.WORLD, num_rdma_bytes=1 << 20, low_latency_mode=True,
                              op_timeout_ms=60000)
        for case in test_ep_low_latency.CASES:
            test_ep_low_latency.check_case(rank, world, _OnDevice(buf, device), case)
    report = buf.transport_report()
    on_device = device_type == "cuda" or stand_in == "device"
    memory = "cuda" if device_type == "cuda" else "host_split"
    # Channels of rows on the device path: every low-latency channel; normal mode's x
    # channels of the cases' plain x (its top-k channels and the FP8 pairs' stage).
    device_channels = {f"x:{'fp32' if c['dtype'] == torch.float32 else 'bf16'}:{c['hidden']}:{memory}"
                       for c in test_ep_buffer.CASES}
    for c in report:
        want = on_device and (mode == "low_latency" or c["channel"] in device_channels)
        assert c["tensor_path"] == ("device" if want else "host_staging"), report
        assert (c["memory"] == memory and c["channel"].endswith(":" + memory)) == want, report
    if on_device and mode == "normal":
        assert device_channels <= {c["channel"] for c in report}, report
    if device_type == "cuda":
        assert all(c["peer_device_paths"] == ["cuda_same_process" if r == rank else "cuda_ipc" for r in range(world)]
                   for c in report), report


@pytest.mark.parametrize("mode", ["normal", "low_latency"])
def test_the_staged_path_on_cpu_stand_ins_matches_the_references(mode: str) -> None:
    run_ranks(_cuda_worker, 2, mode, "cpu", timeout_s=180)


@pytest.mark.parametrize("world", [2, 4])
def test_the_low_latency_device_path_on_cpu_stand_ins_matches_the_references(world: int) -> None:
    run_ranks(_cuda_worker, world, "low_latency", "cpu", "device", timeout_s=240)


@pytest.mark.parametrize("world", [2, 4])
def test_the_normal_device_path_on_cpu_stand_ins_matches_the_references(world: int) -> None:
    # test_ep_buffer's checks: layout, rows naming their source rank and token in DeepEP's
    # order, per-expert counts, cached dispatch with handle=, a replayed routing, combine with
    # weights and bias against the reference, masked -1 entries, a rank with no tokens (at 4
    # ranks), bf16 and fp32.
    run_ranks(_cuda_worker, world, "normal", "cpu", "device", timeout_s=300)


class _PreparingCore:
    """An EpCore whose ll_prepare and prepare answer from a list and record what was asked."""

    def __init__(self, answers):
        self.answers, self.asked = list(answers), []

    def _answer(self, shape):
        self.asked.append(shape)
        return self.answers.pop(0)

    def ll_prepare(self, *shape):
        return self._answer(shape)

    def prepare(self, *shape):
        return self._answer(shape)


class _BufferOf:
    def __init__(self, core):
        self.core = core

    def _live_core(self):
        return self.core


@pytest.mark.parametrize("kind, ask, asked", [
    ("ll", lambda b: _ep_device.device_channel(b, 64, 0, 8, 8, 2), (64, 0, 8, 8, 2, _ep_device.MEMORY_CUDA)),
    ("normal", lambda b: _ep_device.normal_device_channel(b, 64, 0), (0, 64, _ep_device.MEMORY_CUDA)),
])
def test_a_device_channel_is_asked_for_once_per_shape_and_a_refusal_is_kept(kind, ask, asked) -> None:
    ok = _BufferOf(_PreparingCore([""]))
    assert ask(ok) == _ep_device.MEMORY_CUDA
    assert ask(ok) == _ep_device.MEMORY_CUDA
    assert ok.core.asked == [asked]  # collective: once per shape
    refused = _BufferOf(_PreparingCore(["EP: memory cuda: ... host staging)"]))
    assert ask(refused) == _ep_device.MEMORY_HOST
    assert ask(refused) == _ep_device.MEMORY_HOST
    assert len(refused.core.asked) == 1 and "host staging" in getattr(refused, f"_{kind}_device_refused")


def test_a_refused_device_channel_is_reported_with_why_it_stages() -> None:
    refused = "EP: memory cuda: rank 1 is on another host ... (CUDA tensors then go through host staging)"
    channels = [{"channel": "ll:bf16:64:m8:e8:k2", "memory": "host"}, {"channel": "x:bf16:64", "memory": "host"},
                {"channel": "topk:fp32:12", "memory": "host"}]
    ll, normal, topk = (_ep_device.tensor_path(c, True, refused) for c in channels)
    assert ll["tensor_path"] == "host_staging" and ll["device_refused"] == refused
    assert normal["tensor_path"] == "host_staging" and normal["device_refused"] == refused
    # The routing channel is host memory on every path: no device memory was refused to it.
    assert topk["tensor_path"] == "host_staging" and "device_refused" not in topk
    device = _ep_device.tensor_path({"channel": "ll:bf16:64:m8:e8:k2:cuda", "memory": "cuda"}, True, None)
    assert device["tensor_path"] == "device"
    assert _ep_device.tensor_path(channels[0], False, None)["tensor_path"] == "host"


@pytest.mark.skipif(NO_GPU is not None, reason=NO_GPU or "")
@pytest.mark.parametrize("mode", ["normal", "low_latency"])
@pytest.mark.parametrize("world", [2, 4])
def test_cuda_tensors_on_one_gpu_match_the_references(world: int, mode: str) -> None:
    run_ranks(_cuda_worker, world, mode, timeout_s=240)
