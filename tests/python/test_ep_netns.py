"""Two ranks in two network namespaces, joined only by a veth pair: the gloo group and
moerl.ep.Buffer's libfabric endpoints (tcp;ofi_rxm, through the reorder shim) cross the pair,
as between two hosts. Each rank enters its namespace before it joins the group; moerl tells
hosts apart by network namespace (common/host_identity.h), so the peer's path must be
"network", which the transport report read from Python must say. Normal dispatch/combine
(fp32, bf16, FP8 pairs) and the low-latency calls are checked against the same references as
on one host (test_ep_buffer.py, test_ep_low_latency.py).

Needs root and iproute2's `ip netns`. Run by CTest as a script: where namespaces cannot be
made it prints the reason and exits 77 (CTest's SKIP_RETURN_CODE); under plain pytest the
test is skipped with that reason."""

import ctypes
import itertools
import os
import shutil
import subprocess
import sys
import time
from typing import List, Optional

import pytest
import torch

import moerl.ep
import test_ep_buffer as normal
import test_ep_low_latency as low_latency
from ep_harness import run_ranks

CLONE_NEWNET = 0x40000000
IFACE = "moerl0"  # both ends of the pair carry this name, each in its own namespace
ADDRESSES = ("10.77.0.1/30", "10.77.0.2/30")  # private to the two namespaces: no host route
_pairs = itertools.count()


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip() or f'exit {done.returncode}'}")


class NamespacePair:
    """Namespaces <name>-0 and <name>-1 with a veth pair between them (IFACE on each side,
    IPv4 only, loopback left down so that the pair is the only interface up)."""

    def __init__(self) -> None:
        base = f"moerl-py-{os.getpid()}-{next(_pairs)}"
        self.names: List[str] = []
        try:
            for i in range(2):
                _ip("netns", "add", f"{base}-{i}")
                self.names.append(f"{base}-{i}")
            a, b = self.names
            _ip("-n", a, "link", "add", IFACE, "type", "veth", "peer", "name", IFACE, "netns", b)
            for name, address in zip(self.names, ADDRESSES):
                _ip("-n", name, "link", "set", IFACE, "addrgenmode", "none")  # no IPv6 link-local
                _ip("-n", name, "addr", "add", address, "dev", IFACE)
                _ip("-n", name, "link", "set", IFACE, "up")
            self._wait_until_running()
        except BaseException:
            self.close()
            raise

    def _wait_until_running(self, timeout_s: float = 10) -> None:
        # The kernel reports a veth end's carrier asynchronously (linkwatch, up to a second
        # after both ends are up); libfabric's tcp provider ignores an interface without it,
        # so a rank that looked too early would offer only the (down) loopback address.
        deadline = time.monotonic() + timeout_s
        while True:
            states = [subprocess.run(["ip", "-n", n, "-o", "link", "show", IFACE], capture_output=True,
                                     text=True, timeout=30).stdout for n in self.names]
            if all("state UP" in s and "NO-CARRIER" not in s for s in states):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the veth pair did not come up within {timeout_s} s: {states}")
            time.sleep(0.05)

    def close(self) -> None:
        for name in self.names:  # the pair goes with its namespaces
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        self.names = []


def unavailable_reason() -> Optional[str]:
    """None when this process can make a NamespacePair; else why not."""
    if os.geteuid() != 0:
        return "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network namespaces"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    try:
        NamespacePair().close()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        return f"cannot create two network namespaces with a veth pair: {e}"
    return None


def enter_namespace(names: List[str], rank: int) -> None:
    """In the forked child, before it joins the group: move this (single-threaded) process
    into its rank's namespace; gloo and libfabric's tcp provider use the pair's interface."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{names[rank]}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {names[rank]}: {os.strerror(err)}")
    finally:
        os.close(fd)
    os.environ["GLOO_SOCKET_IFNAME"] = IFACE
    os.environ["FI_TCP_IFACE"] = IFACE


def check_report(rank: int, world: int, report: List[dict], channels: int) -> None:
    assert len(report) == channels, report
    paths = ["same_process" if r == rank else "network" for r in range(world)]
    for c in report:
        assert (c["provider"], c["peer_paths"], c["reorder_shim"]) == ("tcp;ofi_rxm", paths, True), c


def worker(rank: int, world: int, host_net: str) -> None:
    here = os.readlink("/proc/self/ns/net")
    assert here != host_net, f"rank {rank} is still in the test's network namespace {here}"
    transport = dict(fabric_provider="tcp", reorder_shim=True, op_timeout_ms=30000)  # paths "auto"
    buf = moerl.ep.Buffer(torch.distributed.group.WORLD, num_nvl_bytes=normal.NUM_BYTES, **transport)
    for case in normal.CASES:
        normal.check_case(rank, world, buf, case)
    check_report(rank, world, buf.transport_report(), 10)  # the channels test_ep_buffer.py counts

    ll = moerl.ep.Buffer(torch.distributed.group.WORLD, num_rdma_bytes=1 << 20, low_latency_mode=True,
                         **transport)
    for case in low_latency.CASES:
        low_latency.check_case(rank, world, ll, case)
    check_report(rank, world, ll.transport_report(), len(low_latency.CASES))


@pytest.fixture
def namespaces():
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    pair = NamespacePair()
    try:
        yield pair.names
    finally:
        pair.close()


def test_two_namespaces_over_tcp_match_the_reference(namespaces: List[str]) -> None:
    names = list(namespaces)
    run_ranks(worker, 2, os.readlink("/proc/self/ns/net"), timeout_s=120,
              before_init=lambda rank: enter_namespace(names, rank))


if __name__ == "__main__":  # CTest: skipped (77) with the reason where namespaces cannot be made
    why = unavailable_reason()
    if why:
        print(f"SKIP: {why}", flush=True)
        sys.exit(77)
    sys.exit(int(pytest.main(["-q", "-p", "no:cacheprovider", __file__])))
