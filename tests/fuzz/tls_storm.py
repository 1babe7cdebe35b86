#!/usr/bin/env python3
"""A TLS handshake storm against one port (issue 31): N connections at once of each bad kind,
held or repeated for a while, so a node's TLS listener can be watched under it.

    tls_storm.py HOST:PORT [--connections N] [--modes silent,partial,garbage,nocert,badcert]
                 [--duration S] [--pause S] [--rogue-cert PEM --rogue-key KEY] [--json OUT]

Kinds (each gets N connections, all kinds at once):
  silent   connects and sends nothing, until the server closes it or the duration ends
  partial  sends the first 40 bytes of a real ClientHello, then stalls
  garbage  sends 512 random bytes, then waits for the close
  nocert   completes a TLS handshake without a client certificate
  badcert  completes a TLS handshake with a certificate of another CA (--rogue-cert/--rogue-key,
           made here with the openssl CLI when not given)
Every client the server closes reconnects after about --pause s, until the duration ends.

Prints (and with --json writes) what happened per kind: connections opened, closed by the
server, still open at the end, failed to connect, handshakes the server refused or completed.
Importable: storm(host, port, ...) returns the same dict."""
import argparse
import asyncio
import json
import os
import random
import ssl
import subprocess
import sys
import tempfile
import time

MODES = ("silent", "partial", "garbage", "nocert", "badcert")


def client_hello_bytes():
    """The bytes a TLS client sends first (its ClientHello), from Python's ssl module."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def rogue_credentials(workdir):
    """A CA of nobody's cluster and a certificate it signed (openssl CLI)."""
    q = dict(cwd=workdir, check=True, capture_output=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    "rogue-ca.key", "-out", "rogue-ca.pem", "-days", "1", "-subj",
                    "/CN=rogue-ca"], **q)
    subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "rogue.key",
                    "-out", "rogue.csr", "-subj", "/CN=rogue"], **q)
    subprocess.run(["openssl", "x509", "-req", "-in", "rogue.csr", "-CA", "rogue-ca.pem",
                    "-CAkey", "rogue-ca.key", "-CAcreateserial", "-out", "rogue.pem", "-days",
                    "1"], **q)
    return os.path.join(workdir, "rogue.pem"), os.path.join(workdir, "rogue.key")


def client_context(cert=None, key=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


async def wait_closed_by_server(reader, until):
    """True when the server closed (EOF or reset) before `until` (monotonic)."""
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return False
        try:
            data = await asyncio.wait_for(reader.read(4096), timeout=left)
        except asyncio.TimeoutError:
            return False
        except (ConnectionError, OSError, ssl.SSLError):
            return True
        if not data:
            return True


async def one_connection(host, port, mode, tally, until, hello, tls_ctx):
    """One client of `mode`; returns True when it should reconnect (the server closed it and
    the kind is a repeating one)."""
    tally["opened"] += 1
    try:
        if mode in ("nocert", "badcert"):
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port, ssl=tls_ctx, server_hostname=None),
                    timeout=max(0.1, until - time.monotonic()))
            except (ssl.SSLError, ConnectionError) as e:
                tally["refused_in_handshake"] += 1
                tally.setdefault("errors", {}).setdefault(type(e).__name__, 0)
                tally["errors"][type(e).__name__] += 1
                return True
            tally["handshake_completed"] += 1  # TLS 1.3: the client finishes before the
            # server has checked its certificate; the server's refusal then arrives as a close
        else:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                                    timeout=max(0.1, until - time.monotonic()))
    except (ConnectionError, OSError, asyncio.TimeoutError):
        tally["connect_failed"] += 1
        await asyncio.sleep(0.05)
        return True
    try:
        if mode == "partial":
            writer.write(hello[:40])
        elif mode == "garbage":
            writer.write(bytes(random.getrandbits(8) for _ in range(512)))
        await writer.drain()
    except (ConnectionError, OSError):  # reset by the server before our bytes went out
        tally["closed_by_server"] += 1
        writer.transport.abort()
        return True
    closed = await wait_closed_by_server(reader, until)
    tally["closed_by_server" if closed else "open_at_end"] += 1
    writer.transport.abort()
    return closed


async def client_loop(host, port, mode, tally, until, hello, tls_ctx, pause):
    # A client the server closed comes back after `pause` s: the storm keeps its size
    # without turning into a connect-rate benchmark of this machine's own CPUs.
    while time.monotonic() < until:
        if not await one_connection(host, port, mode, tally, until, hello, tls_ctx):
            break
        await asyncio.sleep(pause * random.uniform(0.5, 1.5))


async def run_storm(host, port, connections, modes, duration, rogue, pause):
    hello = client_hello_bytes()
    until = time.monotonic() + duration
    tallies = {m: {"opened": 0, "closed_by_server": 0, "open_at_end": 0, "connect_failed": 0,
                   "refused_in_handshake": 0, "handshake_completed": 0} for m in modes}
    ctxs = {"nocert": client_context(), "badcert": client_context(*rogue) if rogue else None}
    tasks = [client_loop(host, port, m, tallies[m], until, hello, ctxs.get(m), pause)
             for m in modes for _ in range(connections)]
    await asyncio.gather(*tasks)
    return tallies


def storm(host, port, connections=1000, modes=MODES, duration=10.0, rogue=None, workdir=None,
          pause=1.0):
    """Runs the storm; returns {mode: tally}. `rogue` = (cert, key) for badcert; a client the
    server closed reconnects after ~`pause` s."""
    if "badcert" in modes and rogue is None:
        rogue = rogue_credentials(workdir or tempfile.mkdtemp(prefix="moerl-storm-"))
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = connections * len(modes) + 64
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, need), hard))
    return asyncio.run(run_storm(host, port, connections, modes, duration, rogue, pause))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("target", help="HOST:PORT of a TLS CAF port")
    ap.add_argument("--connections", type=int, default=1000, help="connections per kind")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--duration", type=float, default=10.0, help="seconds the storm lasts")
    ap.add_argument("--pause", type=float, default=1.0,
                    help="seconds a client the server closed waits before it reconnects")
    ap.add_argument("--rogue-cert")
    ap.add_argument("--rogue-key")
    ap.add_argument("--json")
    a = ap.parse_args()
    host, port = a.target.rsplit(":", 1)
    modes = [m for m in a.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            sys.exit(f"unknown mode {m!r}: one of {', '.join(MODES)}")
    rogue = (a.rogue_cert, a.rogue_key) if a.rogue_cert else None
    t0 = time.monotonic()
    out = storm(host, int(port), a.connections, modes, a.duration, rogue, pause=a.pause)
    res = {"target": a.target, "connections_per_kind": a.connections, "duration_s": a.duration,
           "elapsed_s": time.monotonic() - t0, "kinds": out, "loadavg": os.getloadavg()}
    print(json.dumps(res, indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
