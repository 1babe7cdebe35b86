#!/usr/bin/env python3
"""Live-port fuzzing (issue 31): during a real `moerl up`, Debian's zzuf mutates frames captured
from the run itself (tcpdump on loopback) and every input goes to the port it was captured on,
over a fresh TCP connection: the coordinator's CAF middleman, the admin console (ZeroMQ), the
HTTP console, the buffer shards' sample plane, the reward hop, the weight caches, the env
servers (with --config configs/multi-turn.yaml). The mutator is zzuf's, not ours; this script
only captures, cuts the mutated stream back into inputs and sends them.

    live_ports_fuzz.py MOERL [--inputs N] [--config YAML] [--json OUT]

Passes when, after every port got its N inputs: no node process died or was replaced, the
accounting holds (lost = duplicated = 0, invariant ok), the job still trains, and every port
still accepts connections. What each port did with its inputs (closed by the node = refused,
still open when we let go, answered) and the nodes' own refusal counters are printed and, with
--json, written with the provenance (load average, zzuf version).

Exit 77 (CTest: skipped) when zzuf or tcpdump is missing or capturing on lo is not permitted."""
import argparse
import asyncio
import collections
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "apps"))
# The console tests' endless cluster runner, policy size, tokens and liveness-bounded wait.
from http_console_test import BOUND_S, OPERATOR, SMALL, VIEWER, up_run, wait_for  # noqa: E402,F401

SEED_BYTES = 4096  # prefix of each captured client stream kept as a seed
MAX_SEEDS = 12  # per port
BATCH = 500  # inputs per zzuf run
HOLD_S = 0.02  # how long an input's connection waits for the node to close it
CONCURRENCY = 16  # connections in flight per port
ZMTP_GREETING = 64  # ZMTP 3 greeting length: half the inputs keep it intact to reach deeper


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


def api(http, path, token=VIEWER, method="GET", body=None):
    req = urllib.request.Request("http://" + http + path, method=method,
                                 data=body.encode() if body else None,
                                 headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError):
        return None, b""


def console_call(moerl, console, verb):
    """One `moerl console` call (traffic for the capture). It gives up on the coordinator by
    itself after console.timeout_ms (5 s), so one still running after 60 s hangs elsewhere (it
    did once, in CI beside other tests): its threads' stacks (when gdb is installed) and its
    output go into the failure."""
    p = subprocess.Popen([moerl, "console", "--connect", console, verb],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        p.communicate(timeout=60)
        return
    except subprocess.TimeoutExpired:
        pass
    stacks = "(gdb is not installed: no stacks)"
    if shutil.which("gdb"):
        stacks = subprocess.run(["gdb", "-batch", "-p", str(p.pid), "-ex", "thread apply all bt"],
                                capture_output=True, text=True, timeout=120).stdout[-6000:]
    p.kill()
    out, err = p.communicate()
    sys.exit(f"FAIL: `moerl console {verb}` still running after 60 s\nstdout: {out[-2000:]}\n"
             f"stderr: {err[-2000:]}\nstacks:\n{stacks}")


def status(http):
    code, raw = api(http, "/api/v1/status")
    return json.loads(raw) if code == 200 else None


def nodes_of(pgid):
    """pid -> node name of every `moerl node` process in the run's session."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.getpgid(int(pid)) != pgid:
                continue
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except (OSError, ProcessLookupError):
            continue
        if len(argv) > 1 and argv[1] == b"node":
            names = [a.decode()[len("node.name="):] for a in argv if a.startswith(b"node.name=")]
            out[int(pid)] = names[-1] if names else "?"
    return out


def listening_ports(pids):
    """port -> pid for every TCP port the run's nodes listen on (ss, iproute2)."""
    out = {}
    ss = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    for line in ss.splitlines():
        m = re.search(r"\s(\S+):(\d+)\s.*pid=(\d+)", line)
        if m and int(m.group(3)) in pids:
            out[int(m.group(2))] = int(m.group(3))
    return out


# --- capture: tcpdump on lo, then the client->server byte streams out of the pcap -----------

def read_pcap(path):
    """(src_port, dst_port, seq, flags, payload) of every IPv4 TCP packet in a pcap file."""
    data = open(path, "rb").read()
    if len(data) < 24:
        return []
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    link_len = {1: 14, 113: 16, 276: 20, 0: 4}.get(linktype)
    if link_len is None:
        skip(f"pcap link type {linktype} not understood")
    out, off = [], 24
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        ip = pkt[link_len:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 15) * 4
        total = struct.unpack("!H", ip[2:4])[0]
        tcp = ip[ihl:total]
        if len(tcp) < 20:
            continue
        sport, dport, seq = struct.unpack("!HHI", tcp[:8])
        doff = (tcp[12] >> 4) * 4
        out.append((sport, dport, seq, tcp[13], tcp[doff:]))
    return out


def client_streams(packets, port):
    """The first SEED_BYTES of every captured connection's client->server stream to `port`,
    reassembled by sequence number (a connection whose SYN was not captured is skipped)."""
    isn, bufs = {}, {}
    for sport, dport, seq, flags, payload in packets:
        if dport != port:
            continue
        if flags & 0x02:  # SYN
            isn[sport] = seq
            bufs[sport] = bytearray()
            continue
        if sport not in isn or not payload:
            continue
        at = (seq - isn[sport] - 1) % (1 << 32)
        if at >= SEED_BYTES:
            continue
        b = bufs[sport]
        end = min(at + len(payload), SEED_BYTES)
        if len(b) < end:
            b.extend(b"\0" * (end - len(b)))
        b[at:end] = payload[:end - at]
    streams = sorted({bytes(b) for b in bufs.values() if b}, key=len, reverse=True)
    return streams[:MAX_SEEDS]


# --- mutation: zzuf over a file of concatenated seeds, cut back into inputs ------------------

def mutated_batches(seeds, total, seed_base, workdir):
    """Yields lists of inputs, BATCH at a time: each zzuf run (its own -s seed, a ratio zzuf
    picks in 0.0001..0.02) mutates BATCH copies of the seeds laid end to end; zzuf's default
    bit-flip mode keeps lengths, so the output cuts back at the same offsets. Every other
    input gets its first 64 bytes back (a ZMTP greeting, a CAF handshake header, an HTTP
    request line) so that mutations also reach the parsers behind the handshake."""
    path = os.path.join(workdir, f"seeds-{seed_base}.bin")
    sent, run = 0, 0
    while sent < total:
        n = min(BATCH, total - sent)
        chosen = [seeds[(sent + i) % len(seeds)] for i in range(n)]
        with open(path, "wb") as f:
            for s in chosen:
                f.write(s)
        out = subprocess.run(["zzuf", "-c", "-s", str(seed_base + run), "-r", "0.0001:0.02",
                              "cat", path], capture_output=True, check=True).stdout
        inputs, at = [], 0
        for i, s in enumerate(chosen):
            m = out[at:at + len(s)]
            at += len(s)
            if i % 2:
                m = s[:ZMTP_GREETING] + m[ZMTP_GREETING:]
            inputs.append(m)
        yield inputs
        sent += n
        run += 1


# --- sending ---------------------------------------------------------------------------------

async def send_one(port, data, tally):
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
    except (OSError, asyncio.TimeoutError):
        tally["connect_failed"] += 1
        return
    try:
        writer.write(data)
        await asyncio.wait_for(writer.drain(), 5)
        answered = False
        deadline = time.monotonic() + HOLD_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                tally["held_open"] += 1
                break
            chunk = await asyncio.wait_for(reader.read(65536), left)
            if not chunk:
                tally["closed_by_node"] += 1
                break
            answered = True
        if answered:
            tally["answered"] += 1
    except asyncio.TimeoutError:
        tally["held_open"] += 1
    except (ConnectionResetError, BrokenPipeError):
        tally["closed_by_node"] += 1
    except OSError:
        tally["closed_by_node"] += 1
    finally:
        if random.random() < 0.5:
            writer.transport.abort()  # RST, as a hostile peer may
        else:
            writer.close()
    tally["sent"] += 1


async def fuzz_port(port, seeds, total, seed_base, workdir, tally):
    """Sends `total` inputs to `port`, CONCURRENCY at a time; the latest ones stay in
    tally["recent"] so a failure can be replayed."""
    queue = asyncio.Queue(maxsize=CONCURRENCY * 4)
    recent = tally.setdefault("recent", collections.deque(maxlen=64))

    async def worker():
        while True:
            data = await queue.get()
            if data is None:
                return
            await send_one(port, data, tally)

    workers = [asyncio.create_task(worker()) for _ in range(CONCURRENCY)]
    loop = asyncio.get_running_loop()
    batches = mutated_batches(seeds, total, seed_base, workdir)
    queued = 0
    while True:
        batch = await loop.run_in_executor(None, next, batches, None)
        if batch is None:
            break
        for data in batch:
            recent.append(data)
            await queue.put(data)
        queued += len(batch)
        if total >= 10000 and queued % (total // 10) < len(batch):  # the long form's progress
            print(f"  port {port}: {tally['sent']} of {total} sent", flush=True)
    for _ in workers:
        await queue.put(None)
    await asyncio.gather(*workers)


async def fuzz_all(targets, total, workdir):
    tallies = {}
    jobs = []
    for i, (port, t) in enumerate(sorted(targets.items())):
        tally = dict(sent=0, closed_by_node=0, held_open=0, answered=0, connect_failed=0)
        tallies[port] = tally
        jobs.append(fuzz_port(port, t["seeds"], total, 1000000 * (i + 1), workdir, tally))
    await asyncio.gather(*jobs)
    return tallies


# --- the nodes' own refusal counters ---------------------------------------------------------

REFUSAL_KEYS = re.compile(r"bad|malformed|refused|rejected|invalid|oversize|limit")


def refusal_counters(http):
    """node -> {counter: value} of every refusal-like counter in the nodes' stats."""
    code, raw = api(http, "/api/v1/nodes")
    out = {}
    if code != 200:
        return out

    def walk(prefix, v, acc):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(prefix + "." + k if prefix else k, x, acc)
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and REFUSAL_KEYS.search(prefix):
            acc[prefix] = v

    body = json.loads(raw)
    for n in body if isinstance(body, list) else body.get("nodes", []):
        acc = {}
        walk("", n.get("stats", {}), acc)
        out[n.get("name", "?")] = acc
    return out


def secure_settings(moerl, workdir):
    """--set options of a cluster that carries credentials, as one off loopback must: a
    per-run CA and one node certificate (openssl CLI), a plane secret (`moerl secret init`)."""
    pki = os.path.join(workdir, "pki")
    os.makedirs(pki, exist_ok=True)
    q = dict(cwd=pki, check=True, capture_output=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=moerl-fuzz-ca"], **q)
    subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node.key",
                    "-out", "node.csr", "-subj", "/CN=node"], **q)
    subprocess.run(["openssl", "x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey",
                    "ca.key", "-CAcreateserial", "-out", "node.pem", "-days", "1"], **q)
    subprocess.run([moerl, "secret", "init", os.path.join(pki, "plane.secret")], **q)
    return [a for kv in ("node.tls=true", f"node.tls_certificate={pki}/node.pem",
                         f"node.tls_key={pki}/node.key", f"node.tls_ca={pki}/ca.pem",
                         f"node.plane_secret_file={pki}/plane.secret") for a in ("--set", kv)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("moerl")
    ap.add_argument("--inputs", type=int, default=1000, help="inputs per port")
    ap.add_argument("--config", help="moerl up --config (configs/multi-turn.yaml adds env nodes)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--keep", help="keep the run's logs and the capture in this directory")
    ap.add_argument("--secure", action="store_true",
                    help="the cluster as off loopback: CAF over TLS (a CA and certificate made "
                         "here with the openssl CLI) and CURVE on the ZeroMQ planes")
    ap.add_argument("--skip", default="",
                    help="regex: ports whose description matches are not fuzzed")
    args = ap.parse_args()
    for tool in ("zzuf", "tcpdump", "ss"):
        if not shutil.which(tool):
            skip(f"{tool} is not installed (scripts/install-deps.sh installs it)")
    moerl = os.path.abspath(args.moerl)

    tmp = tempfile.mkdtemp(prefix="moerl-fuzz-")
    workdir = args.keep or tmp
    os.makedirs(workdir, exist_ok=True)
    console = f"tcp://127.0.0.1:{free_port()}"
    http = f"127.0.0.1:{free_port()}"
    pcap = os.path.join(workdir, "capture.pcap")
    # Capture from before the first node starts, so every connection's opening is in it.
    dump = subprocess.Popen(["tcpdump", "-i", "lo", "-U", "-n", "-s", str(SEED_BYTES + 128),
                             "-c", "400000", "-w", pcap, "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = dump.stderr.readline()
    if "listening" not in first:
        dump.kill()
        skip("tcpdump cannot capture on lo: " + first.strip())
    extra = ["--config", os.path.abspath(args.config)] if args.config else []
    if args.secure:
        extra += secure_settings(moerl, workdir)
    run = up_run(moerl, workdir, os.path.join(workdir, "run"), "--console", console, "--set",
                 "console.http_address=" + http, *extra, timeout_s=86400)
    ok = False
    try:
        wait_for("iteration 3", lambda: run.find(r"iteration ([3-9]|\d\d+)/"))
        # Traffic of the two consoles, so they are in the capture too.
        for verb in ("status", "nodes", "ledger"):
            console_call(moerl, console, verb)
        for path in ("/api/v1/status", "/api/v1/nodes", "/metrics", "/"):
            api(http, path)
        api(http, "/api/v1/actions", token=OPERATOR, method="POST",
            body='{"action":"drain","node":"no-such-node"}')
        time.sleep(2)
        dump.send_signal(signal.SIGINT)
        dump.wait(timeout=30)

        pgid = run.p.pid
        names = nodes_of(pgid)
        ports = listening_ports(set(names))
        packets = read_pcap(pcap)
        coord_port = int(run.find(r"coordinator at [\d.]+:(\d+)").group(1))
        targets = {}
        for port, pid in ports.items():
            what = names[pid]
            if port == coord_port:
                what += " CAF middleman"
            elif f":{port}" in console:
                what += " admin console (ZeroMQ)"
            elif f":{port}" in http:
                what += " HTTP console"
            if args.skip and re.search(args.skip, what):
                print(f"  {port}: {what}, not fuzzed (--skip)")
                continue
            seeds = client_streams(packets, port)
            if not seeds:
                sys.exit(f"FAIL: no connection to port {port} ({what}) in the capture")
            targets[port] = {"what": what, "seeds": seeds}
        print(f"{len(targets)} listening ports, {len(packets)} packets captured:")
        for port, t in sorted(targets.items()):
            print(f"  {port}: {t['what']}, {len(t['seeds'])} seeds "
                  f"({min(map(len, t['seeds']))}..{max(map(len, t['seeds']))} bytes)")

        before = status(http)
        refusals_before = refusal_counters(http)
        t0 = time.monotonic()
        tallies = asyncio.run(fuzz_all(targets, args.inputs, workdir))
        elapsed = time.monotonic() - t0
        # The last inputs each port got, for a replay if the verdict below fails.
        for port, t in tallies.items():
            with open(os.path.join(workdir, f"last-inputs-{port}.bin"), "wb") as f:
                for data in t.pop("recent"):
                    f.write(struct.pack("<I", len(data)) + data)

        # The verdict: every node process still the one that started, every port still
        # listening, the accounting intact, and the job still training.
        alive = nodes_of(pgid)
        died = sorted(names[p] for p in names if p not in alive)
        assert not died, f"nodes died during the fuzzing: {died}\n" + "\n".join(run.lines[-40:])
        assert set(alive) == set(names), f"nodes replaced: {alive} vs {names}"
        still = listening_ports(set(alive))
        assert set(targets) <= set(still), f"ports gone: {set(targets) - set(still)}"
        after = wait_for("status after the fuzzing", lambda: status(http))
        trained = after["accounting"]["trained"]
        wait_for("training after the fuzzing",
                 lambda: (status(http) or after)["accounting"]["trained"] > trained)
        final = status(http)
        a = final["accounting"]
        assert a["lost"] == 0 and a["duplicated"] == 0 and final["invariant_ok"], a
        refusals_after = refusal_counters(http)
        print(f"{args.inputs} inputs per port in {elapsed:.0f} s; "
              f"trained {before['accounting']['trained']} -> {a['trained']}, lost 0, dup 0")
        for port, t in sorted(tallies.items()):
            assert t["sent"] + t["connect_failed"] == args.inputs, (port, t)
            print(f"  {port} {targets[port]['what']}: {t}")
        print("node refusal counters after the fuzzing (before in brackets):")
        for node, counters in sorted(refusals_after.items()):
            if counters:
                prev = refusals_before.get(node, {})
                print("  " + node + ": " + ", ".join(
                    f"{k} {v} ({prev.get(k, 0)})" for k, v in sorted(counters.items())))
        # Connections that could not be made are refusals only while the port stayed up (the
        # listen backlog full); the assertion above checked it did.
        if args.json:
            with open(args.json, "w") as f:
                json.dump({
                    "inputs_per_port": args.inputs,
                    "elapsed_s": elapsed,
                    "ports": {str(p): {"what": targets[p]["what"], **tallies[p]} for p in tallies},
                    "node_refusal_counters": refusals_after,
                    "accounting": a,
                    "provenance": {"loadavg": os.getloadavg(), "zzuf": subprocess.run(
                        ["zzuf", "-V"], capture_output=True, text=True).stdout.splitlines()[0],
                        "nproc": os.cpu_count(), "config": args.config or "embedded defaults"},
                }, f, indent=2)
        ok = True
        print("PASS")
    finally:
        if dump.poll() is None:
            dump.kill()
        run.stop()
        if not ok:
            print("\n".join(run.lines[-30:]))
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
