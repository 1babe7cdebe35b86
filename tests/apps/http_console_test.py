#!/usr/bin/env python3
"""The coordinator's HTTP console (issue 15) during a real `moerl up`: every /api/v1/ route,
auth (no/wrong token 401, viewer acting 403), agreement with the ZeroMQ console, bad input
(unknown path, wrong method, bad JSON, a huge body, garbage, a slow client) answered with a
JSON 4xx while the job keeps its accounting, /metrics clean under `promtool check metrics`,
the Chrome trace's format, and the dashboard in headless Chromium (DevTools protocol): it shows
the live iteration and the accounting, an operator's inject click lands in the interruption
log, a viewer's is refused. Screenshots go to ARTIFACTS (argv[2]).

    http_console_test.py MOERL ARTIFACTS_DIR

Every wait is a liveness bound (the run must get there at all), not a timing check."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import websocket  # Debian python3-websocket

SMALL = ["--set", "policy.d_model=16", "--set", "policy.num_heads=2", "--set", "policy.ffn_dim=8",
         "--set", "grpo.prompts_per_iteration=8"]
BOUND_S = 120
VIEWER, OPERATOR = "moerl-viewer", "moerl-operator"  # console.*_token built-in defaults


def wait_for(what, fn):
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.2)
    sys.exit(f"FAIL: no {what} within {BOUND_S} s")


class http:
    def __init__(self, address, scheme="http", context=None):
        self.base = scheme + "://" + address
        self.context = context  # an ssl.SSLContext for https

    def call(self, path, token=None, method="GET", body=None, headers=None):
        h = dict(headers or {})
        if token:
            h["Authorization"] = "Bearer " + token
        data = body.encode() if isinstance(body, str) else body
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.context) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def json(self, path, token=VIEWER, **kw):
        code, _, raw = self.call(path, token, **kw)
        return code, json.loads(raw)


def expect_error(h, code, path, token=VIEWER, **kw):
    got, headers, raw = h.call(path, token, **kw)
    assert got == code, (path, kw.get("method"), got, raw[:300])
    body = json.loads(raw)
    assert "error" in body and body["error"]["message"], body
    return body["error"]


class up_run:
    """An endless `moerl up` (until `timeout_s`) whose output is kept; shared by the console,
    terminal and live-port fuzz tests."""

    def __init__(self, moerl, cwd, run_dir, *extra, timeout_s=900):
        # Its own session: the nodes inherit its process group, so the end of the test can
        # stop the whole cluster with one killpg.
        self.p = subprocess.Popen(
            [moerl, "up", "--no-interrupt", "--iterations", "100000", "--timeout", str(timeout_s),
             "--run-dir", run_dir, *SMALL, *extra],
            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        self.lines = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line.rstrip("\n"))

    def find(self, pattern):
        for line in list(self.lines):
            m = re.search(pattern, line)
            if m:
                return m
        if self.p.poll() is not None:
            sys.exit("FAIL: moerl up exited early:\n" + "\n".join(self.lines[-40:]))
        return None

    def stop(self):
        members = set()
        try:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                members |= _group_members(self.p.pid)  # replacements started meanwhile too
                try:
                    os.killpg(self.p.pid, sig)
                except ProcessLookupError:
                    return
                try:
                    self.p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            _remove_shm_of_dead(members)


def _group_members(pgid):
    """The pids of process group `pgid`."""
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.getpgid(int(d)) == pgid:
                    out.add(int(d))
            except (ProcessLookupError, PermissionError):
                pass
    return out


def _remove_shm_of_dead(pids):
    """/dev/shm as the run found it: a node SIGKILLed with its group (`moerl up`, which reaps
    what its killed nodes leave, went first) leaves its fabric regions and weight copies
    (<pid>:...); remove those of every member that no longer runs (a zombie counts as gone)."""
    def gone(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True

    deadline = time.monotonic() + 5
    for pid in pids:
        while not gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not gone(pid):
            continue  # still running: not ours to clean
        for name in os.listdir("/dev/shm"):
            if name.startswith(f"{pid}:"):
                try:
                    os.remove(os.path.join("/dev/shm", name))
                except FileNotFoundError:
                    pass


def check_api(h, zmq, moerl):
    # Auth: every data route needs a token; a wrong one is the same as none.
    for path in ("/api/v1/status", "/metrics", "/api/v1/trace"):
        got, headers, _ = h.call(path)
        assert got == 401 and "Bearer" in headers.get("WWW-Authenticate", ""), (path, got)
        expect_error(h, 401, path, token="wrong")
    expect_error(h, 403, "/api/v1/actions", token=VIEWER, method="POST",
                 body='{"action":"drain","node":"rollout-0"}')
    # The page's files need none and are the embedded ones.
    for path, kind in (("/", "text/html"), ("/app.js", "javascript"), ("/style.css", "text/css")):
        got, headers, raw = h.call(path)
        assert got == 200 and kind in headers["Content-Type"] and raw, (path, got)
    assert b"/api/v1/dashboard" in h.call("/app.js")[2]

    views = {}
    for v in ("status", "nodes", "report", "iterations", "interruptions", "ledger", "snapshot",
              "autoscale", "trace", "planes", "whoami", "dashboard"):
        code, views[v] = h.json("/api/v1/" + v)
        assert code == 200, (v, code, views[v])
    assert h.json("/api/v1/whoami", OPERATOR)[1] == {"role": "operator"}
    assert views["whoami"] == {"role": "viewer"}
    st = views["status"]
    for k in ("iteration", "iterations", "queue_depth", "leases", "accounting", "invariant_ok"):
        assert k in st, k
    roles = {n["role"] for n in views["nodes"]}
    assert {"trainer", "rollout", "buffer", "reward", "weights"} <= roles, roles
    it = views["iterations"]
    assert it["task"] == "sort" and "reward_random" in it and it["iterations"], it.keys()
    last = it["iterations"][-1]
    for k in ("iteration", "mean_reward", "staleness", "t_generate", "t_reward", "t_buffer",
              "t_train", "t_weights", "t_checkpoint", "end_unix_ms"):
        assert k in last, (k, last)
    led = views["ledger"]
    assert sum(led["by_state"].values()) == led["num_units"] > 0, led["by_state"]
    snap = views["snapshot"]
    assert set(snap) == {"status", "nodes", "iterations", "interruptions", "ledger", "groups"}, snap.keys()
    # moerl up's trainer and rollouts are 2-member groups (up/up_run.cpp).
    assert {g["role"] for g in snap["groups"]} >= {"trainer", "rollout"}, snap["groups"]
    for g in snap["groups"]:
        assert len(g["members"]) == g["size"] and g["incarnation"] >= 1, g
    # Weights come from the checkpoint cache over shared memory by default, and say so.
    w = views["planes"]["weights"]
    assert "checkpoint cache" in w["transport"] and "shared memory" in w["path"], w
    assert set(views["dashboard"]) == {"snapshot", "autoscale", "trace"}, views["dashboard"].keys()
    scale = views["autoscale"]
    assert scale["desired_replicas"]["rollout"] >= 1 and "formula" in scale, scale

    # The ZeroMQ console's verbs agree: same views, and the iteration it saw lies between two
    # HTTP reads of it.
    for verb in ("status", "nodes", "iterations", "interruptions", "ledger", "snapshot"):
        code, before = h.json("/api/v1/" + verb)
        assert code == 200, (verb, code, before)
        r = subprocess.run([moerl, "console", "--connect", zmq, verb, "--json"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (verb, r.stdout, r.stderr)
        z = json.loads(r.stdout)
        code, after = h.json("/api/v1/" + verb)
        assert code == 200, (verb, code, after)
        if isinstance(z, dict):
            assert set(z) == set(before) == set(after), (verb, set(z) ^ set(before))
        else:
            assert isinstance(before, list) and isinstance(after, list), verb
    a, b = h.json("/api/v1/status")[1], None
    z = json.loads(subprocess.run([moerl, "console", "--connect", zmq, "status", "--json"],
                                  capture_output=True, text=True, timeout=60).stdout)
    b = h.json("/api/v1/status")[1]
    assert a["accounting"]["trained"] <= z["accounting"]["trained"] <= b["accounting"]["trained"]

    # Trace: Chrome trace-event JSON as Perfetto reads it.
    tr = views["trace"]
    ev = tr["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert len(lanes) == len(views["nodes"]), (lanes, len(views["nodes"]))
    xs = [e for e in ev if e["ph"] == "X"]
    assert xs and {"buffer", "train", "generate"} <= {e["name"] for e in xs}, {e["name"] for e in xs}
    for e in xs:
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)), e
        assert e["dur"] >= 0 and e["pid"] == 1 and e["tid"] in lanes, e
    trainer_lane = [t for t, n in lanes.items() if "(trainer)" in n]
    assert any(e["tid"] in trainer_lane and e["name"] == "train" for e in xs)
    json.dumps(tr)  # serialisable as-is


def check_bad_requests(h):
    expect_error(h, 404, "/api/v1/nope")
    expect_error(h, 404, "/nothing/here")
    expect_error(h, 405, "/api/v1/status", method="POST", body="{}")
    expect_error(h, 405, "/api/v1/actions", method="DELETE")
    expect_error(h, 405, "/metrics", method="PUT", body="x")
    for body in ("not json", "[1,2]", '{"action": 5}', ""):
        expect_error(h, 400, "/api/v1/actions", token=OPERATOR, method="POST", body=body)
    e = expect_error(h, 400, "/api/v1/actions", token=OPERATOR, method="POST",
                     body='{"action":"inject","kind":"meteor","node":"rollout-0"}')
    assert "spot|rebalance|kill|sigterm" in e["message"], e
    e = expect_error(h, 400, "/api/v1/actions", token=OPERATOR, method="POST", body='{"action":"drain"}')
    assert "NODE" in e["message"], e
    e = expect_error(h, 404, "/api/v1/actions", token=OPERATOR, method="POST",
                     body='{"action":"drain","node":"no-such-node"}')
    assert "no-such-node" in e["message"], e
    e = expect_error(h, 400, "/api/v1/actions", token=OPERATOR, method="POST",
                     body='{"action":"drain","node":"rollout-0","deadline_s":-3}')
    assert "deadline" in e["message"], e
    e = expect_error(h, 413, "/api/v1/actions", token=OPERATOR, method="POST", body="x" * (1 << 20))
    assert "too large" in e["message"], e
    # Garbage on the socket and a client that never finishes its request: the first gets a
    # 400, the second holds only its own connection while others are served.
    host, port = h.base[len("http://"):].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"\x16\x03\x01 garbage that is not HTTP\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 400"), "garbage request"
    slow = socket.create_connection((host, int(port)), timeout=30)
    slow.sendall(b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\n")  # headers never end
    assert h.json("/api/v1/status")[0] == 200
    slow.close()


def check_metrics(h):
    code, headers, raw = h.call("/metrics", VIEWER)
    assert code == 200 and headers["Content-Type"].startswith("text/plain"), code
    text = raw.decode()
    for name in ("moerl_iteration", "moerl_samples_dispatched_total", "moerl_samples_trained_total",
                 "moerl_samples_duplicated_total", "moerl_accounting_invariant_ok", "moerl_queue_depth_units",
                 "moerl_leases", "moerl_buffer_resident_samples", "moerl_nodes", "moerl_iteration_phase_seconds",
                 "moerl_node_restarts_total", "moerl_samples_per_second", "moerl_desired_replicas",
                 "moerl_weights_versions_served_total", "moerl_interruptions_total", "moerl_reward_mean"):
        assert re.search(r"^# TYPE %s " % name, text, re.M), name
    assert re.search(r'^moerl_desired_replicas\{role="rollout"\} \d', text, re.M)
    # Every running trainer node counts (moerl up's trainer is a group of 2 node processes).
    trainers = sum(1 for n in h.json("/api/v1/nodes")[1]
                   if n["role"] == "trainer" and n["state"] == "running")
    assert trainers >= 1
    assert re.search(r'^moerl_nodes\{role="trainer",state="running"\} %d$' % trainers, text, re.M)
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), (r.stdout, r.stderr)


class browser:
    """Headless Chromium driven over the DevTools protocol (one page)."""

    def __init__(self, profile):
        self.p = subprocess.Popen(
            ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--disable-background-networking", "--remote-debugging-port=0",
             "--user-data-dir=" + profile, "--window-size=1280,2200", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        port_file = os.path.join(profile, "DevToolsActivePort")
        wait_for("DevToolsActivePort", lambda: os.path.exists(port_file) and open(port_file).read().count("\n") >= 1)
        port = open(port_file).read().split()[0]
        targets = wait_for("a page target", lambda: [t for t in json.load(
            urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=10)) if t["type"] == "page"])
        # No Origin header: Chromium refuses a DevTools websocket whose Origin it was not told
        # to allow (403; Debian's chromium 150 on a fresh machine did, the 156 here did not).
        self.ws = websocket.create_connection(targets[0]["webSocketDebuggerUrl"], timeout=60,
                                              suppress_origin=True)
        self.next_id = 0

    def cmd(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]

    def eval(self, js):
        r = self.cmd("Runtime.evaluate", expression=js, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{js}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def load(self, url):
        # Through about:blank: a URL that differs only in its fragment would not reload.
        self.cmd("Page.navigate", url="about:blank")
        wait_for("about:blank", lambda: self.eval("location.href") == "about:blank")
        self.cmd("Page.navigate", url=url)
        wait_for("the page", lambda: self.eval("!!document.getElementById('live')"))

    def screenshot(self, path):
        import base64
        data = self.cmd("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        # Chromium's own shutdown ends its helper processes too; killing the browser process
        # alone left them writing into the profile while the test removed it. Its process
        # group is killed after in case the shutdown did not finish.
        try:
            self.cmd("Browser.close")
            self.p.wait(timeout=30)
        except Exception:
            pass
        self.ws.close()
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()


def check_page_views(b, h):
    """The views issue 30 found wrong or missing: every node row reads as figures (no
    "undefined"; a trainer group's non-leader says it steps with its leader), the planes say
    where weights come from, the groups have a table, the autoscaling signal is a table no
    wider than the page."""
    details = b.eval("Object.fromEntries([...document.querySelectorAll('#nodes-table tbody tr')]"
                     ".map(r => [r.dataset.node, r.cells[6].textContent]))")
    for node, text in details.items():
        assert "undefined" not in text and "NaN" not in text, (node, text)
    assert "rank 1" in details["trainer-1"] and "leader" in details["trainer-1"], details["trainer-1"]
    assert re.search(r"batches \d+", details["trainer-0"]), details["trainer-0"]
    planes = b.eval("Object.fromEntries([...document.querySelectorAll('#planes tbody tr')]"
                    ".map(r => [r.cells[0].textContent, r.cells[1].textContent]))")
    assert "checkpoint cache" in planes["weights"] and "shared memory" in planes["weights"], planes
    groups = h.json("/api/v1/snapshot")[1]["groups"]
    wait_for("the groups table", lambda: b.eval("document.querySelectorAll('#groups-table tbody tr').length") == len(groups))
    rows = b.eval("[...document.querySelectorAll('#groups-table tbody tr')].map(r => [r.dataset.group, r.cells[2].textContent, r.cells[3].textContent])")
    for g, (name, members, incarnation) in zip(groups, rows):
        assert name == g["name"] and all(m in members for m in g["members"]), (g, name, members)
        assert int(incarnation) >= 1, incarnation
    scale = b.eval("Object.fromEntries([...document.querySelectorAll('#autoscale-table tbody tr')]"
                   ".map(r => [r.cells[0].textContent, r.cells[1].textContent]))")
    assert len(scale) >= 10 and int(scale["desired rollout replicas"]) >= 1, scale
    assert "formula: rollout = " in b.eval("document.getElementById('autoscale-formula').textContent")
    assert b.eval("document.getElementById('autoscale-table').getBoundingClientRect().right <= innerWidth")
    assert b.eval("document.documentElement.scrollWidth <= document.documentElement.clientWidth"), \
        "the page is wider than the window"


def check_page(h, artifacts, tmp):
    b = browser(os.path.join(tmp, "chromium"))
    try:
        b.cmd("Page.enable")
        b.load(h.base + "/#token=" + OPERATOR)
        polls = lambda: b.eval("+(document.getElementById('live') || {dataset: {}}).dataset.polls || 0")
        wait_for("two page polls", lambda: polls() >= 2)
        assert b.eval("document.getElementById('role').textContent") == "operator"
        assert b.eval("location.hash") == "", "the token stays out of the address bar"
        shown = int(b.eval("document.getElementById('iteration').textContent").split("/")[0])
        now = h.json("/api/v1/status")[1]["iteration"]
        assert 0 < shown <= now, (shown, now)
        # Live: the shown iteration moves on without a reload.
        wait_for("the page's iteration to advance", lambda: int(
            b.eval("document.getElementById('iteration').textContent").split("/")[0]) > shown)
        trained = int(b.eval("document.querySelector('#accounting-trained td:last-child').textContent"))
        assert trained > 0
        assert b.eval("document.getElementById('invariant').textContent") == "invariant holds", (
            b.eval("document.getElementById('invariant-equation').textContent"),
            b.eval("document.getElementById('live').textContent"), h.json("/api/v1/status")[1])
        names = sorted(n["name"] for n in h.json("/api/v1/nodes")[1])
        shown = sorted(b.eval("[...document.querySelectorAll('#nodes-table tbody tr')].map(r => r.dataset.node)"))
        assert shown == names, (shown, names, b.eval("document.getElementById('live').textContent"))
        assert b.eval("document.querySelectorAll('#timeline-svg rect').length") > 0
        check_page_views(b, h)
        b.screenshot(os.path.join(artifacts, "dashboard-operator.png"))
        # An operator's click: a Spot notice to a rollout node shows in the interruption log.
        target = b.eval("document.querySelector(\"#nodes-table tr[data-node^='rollout'] button[data-action='spot']\").dataset.node")
        b.eval(f"document.querySelector(\"#nodes-table tr[data-node='{target}'] button[data-action='spot']\").click()")
        wait_for("the action's answer", lambda: "sent to" in b.eval("document.getElementById('action-result').textContent"))
        wait_for("the interruption in the page's log", lambda: b.eval(
            f"[...document.querySelectorAll('#interruptions-table tbody tr')].some(r => r.cells[0].textContent === '{target}')"))
        recs = h.json("/api/v1/interruptions")[1]
        assert any(r["node"] == target for r in recs), recs
        b.screenshot(os.path.join(artifacts, "dashboard-after-inject.png"))
        # A viewer sees no action buttons, and an action sent anyway is refused (403).
        b.eval("sessionStorage.clear()")
        b.load(h.base + "/#token=" + VIEWER)
        wait_for("the viewer's page", lambda: b.eval("document.getElementById('role').textContent") == "viewer" and polls() >= 1)
        assert b.eval("document.querySelectorAll('#nodes-table td.op button').length") == 0 or \
            b.eval("getComputedStyle(document.querySelector('#nodes-table td.op')).display") == "none"
        assert not b.eval("document.body.classList.contains('operator')")
        b.eval(f"act({{action: 'drain', node: '{target}'}})")
        wait_for("the viewer's refusal", lambda: b.eval("document.getElementById('action-result').textContent").startswith("refused: 403"))
        b.screenshot(os.path.join(artifacts, "dashboard-viewer.png"))
        # A wrong token: the page asks for one.
        b.eval("sessionStorage.clear()")
        b.load(h.base + "/#token=wrong")
        wait_for("the login form", lambda: b.eval("!document.getElementById('login').hidden"))
        assert "refused" in b.eval("document.getElementById('login-error').textContent")
    finally:
        b.close()


def main(moerl, artifacts):
    os.makedirs(artifacts, exist_ok=True)
    for tool in ("promtool", "chromium"):
        assert shutil.which(tool), f"{tool} missing: run scripts/install-deps.sh"
    with tempfile.TemporaryDirectory() as tmp:
        # The run's logs stay with the screenshots (a failure's evidence).
        run_dir = os.path.join(artifacts, "runs")
        shutil.rmtree(run_dir, ignore_errors=True)
        up = up_run(moerl, tmp, run_dir)
        try:
            dash = wait_for("the dashboard line", lambda: up.find(r"dashboard at http://([^/]+)/"))
            zmq = wait_for("the console line", lambda: up.find(r"console at (tcp://\S+)")).group(1)
            h = http(dash.group(1))
            wait_for("three iterations", lambda: h.json("/api/v1/status")[1].get("iteration", 0) >= 3)
            check_api(h, zmq, moerl)
            trained_before = h.json("/api/v1/status")[1]["accounting"]["trained"]
            check_bad_requests(h)
            check_metrics(h)
            check_page(h, artifacts, tmp)
            # The job went on through all of it with its accounting intact.
            wait_for("more training", lambda: h.json("/api/v1/status")[1]["accounting"]["trained"] > trained_before)
            st = h.json("/api/v1/status")[1]
            a = st["accounting"]
            assert st["invariant_ok"] and st["invariant_violations"] == 0, st
            assert a["lost"] == 0 and a["duplicated"] == 0, a
            assert a["dispatched"] == a["committed"] + a["in_flight"] + sum(a["dropped"].values()), a
        finally:
            up.stop()
    print("http console checks passed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
