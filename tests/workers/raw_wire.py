"""The worker's end of the node's socketpair, spoken by hand, for the fake workers that
misbehave on purpose (fake_workers.py, fake_trainers.py): moerl.worker would refuse to send
what those tests send. Frames: 4-byte little-endian length, then the body (workers/PROTOCOL.md)."""
import json
import os
import socket
import struct
import sys

sock = socket.socket(fileno=int(os.environ["MOERL_WORKER_FD"]))
_buf = b""


def send_raw(body: bytes):
    sock.sendall(struct.pack("<I", len(body)) + body)


def send(**msg):
    send_raw(json.dumps(msg).encode())


def recv():
    """The next frame's JSON; exits quietly when the node closed the channel."""
    global _buf
    while True:
        if len(_buf) >= 4:
            (n,) = struct.unpack("<I", _buf[:4])
            if len(_buf) >= 4 + n:
                body, _buf = _buf[4:4 + n], _buf[4 + n:]
                return json.loads(body)
        chunk = sock.recv(65536)
        if not chunk:
            sys.exit(0)
        _buf += chunk
