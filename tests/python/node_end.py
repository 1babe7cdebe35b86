"""The node's end of a worker's socketpair, for the moerl.worker tests: the worker's end is
announced in MOERL_WORKER_FD, and frames are written and read by hand (4-byte little-endian
length, JSON; workers/PROTOCOL.md)."""
import json
import socket
import struct


def node_end(monkeypatch):
    """The node's end of a socketpair; the worker's end is announced in MOERL_WORKER_FD."""
    mine, theirs = socket.socketpair()
    monkeypatch.setenv("MOERL_WORKER_FD", str(theirs.detach()))
    return mine


def send(sock, **msg):
    body = json.dumps({"v": 1, **msg}).encode()
    sock.sendall(struct.pack("<I", len(body)) + body)


def recv(sock):
    (n,) = struct.unpack("<I", sock.recv(4, socket.MSG_WAITALL))
    return json.loads(sock.recv(n, socket.MSG_WAITALL))
