#!/usr/bin/env python3
"""The HTTP console over TLS (issue 15: console.tls_cert / console.tls_key). With a
self-signed certificate this test makes (openssl CLI), `moerl up` prints an https:// dashboard,
and python's urllib and curl, trusting only that certificate, read the API and /metrics; a
plain-HTTP request to the TLS port fails and the console keeps serving. A bad certificate
setting is refused before anything starts, with exit 2 and words naming the key and file.

Every wait is a liveness bound, not a timing check."""
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_console_test import SMALL, VIEWER, http, up_run, wait_for  # noqa: E402


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificate(tmp):
    """cert.pem / key.pem for 127.0.0.1, and other-key.pem that is not its key."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", "key.pem", "-out", "cert.pem", cwd=tmp)
    openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "other-key.pem",
            cwd=tmp)
    with open(os.path.join(tmp, "not-pem.txt"), "w") as f:
        f.write("not a certificate\n")
    return {n: os.path.join(tmp, n) for n in ("cert.pem", "key.pem", "other-key.pem", "not-pem.txt")}


def check_refused(moerl, tmp, files):
    cases = [
        (["console.tls_cert=/nonexistent/cert.pem", "console.tls_key=" + files["key.pem"]],
         r"console\.tls_cert: cannot read '/nonexistent/cert\.pem': No such file"),
        (["console.tls_cert=" + files["cert.pem"]], r"console\.tls_cert and console\.tls_key go together"),
        (["console.tls_cert=" + files["not-pem.txt"], "console.tls_key=" + files["key.pem"]],
         r"console\.tls_cert: '.*not-pem\.txt' is not a PEM certificate"),
        (["console.tls_cert=" + files["cert.pem"], "console.tls_key=" + files["other-key.pem"]],
         r"console\.tls_key '.*other-key\.pem' is not the key of console\.tls_cert"),
    ]
    for sets, words in cases:
        argv = [moerl, "up", "--iterations", "2", "--run-dir", "refused"]
        for kv in sets:
            argv += ["--set", kv]
        r = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (sets, r.returncode, r.stdout[-1000:], r.stderr[-1000:])
        assert re.search(words, r.stderr), (sets, r.stderr)
        assert "coordinator" not in r.stdout, ("nothing started", r.stdout)
        print(f"refused with exit 2: {r.stderr.strip()}", flush=True)


def main(moerl):
    assert shutil.which("openssl") and shutil.which("curl"), "openssl/curl missing: run scripts/install-deps.sh"
    with tempfile.TemporaryDirectory() as tmp:
        files = make_certificate(tmp)
        check_refused(moerl, tmp, files)
        up = up_run(moerl, tmp, os.path.join(tmp, "runs"), "--set", "console.tls_cert=" + files["cert.pem"],
                    "--set", "console.tls_key=" + files["key.pem"])
        try:
            dash = wait_for("the https dashboard line", lambda: up.find(r"dashboard at https://([^/]+)/"))
            address = dash.group(1)
            h = http(address, "https", ssl.create_default_context(cafile=files["cert.pem"]))
            wait_for("an iteration", lambda: h.json("/api/v1/status")[1].get("iteration", 0) >= 1)
            code, _, _ = h.call("/api/v1/status", token="wrong")
            assert code == 401, code
            # curl, trusting only the test's certificate.
            r = subprocess.run(["curl", "-sS", "--fail", "--cacert", files["cert.pem"], "-H",
                                "Authorization: Bearer " + VIEWER, f"https://{address}/metrics"],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0 and "\nmoerl_iteration " in r.stdout, (r.returncode, r.stderr)
            # Without trusting it the handshake is refused; plain HTTP gets no HTTP answer.
            r = subprocess.run(["curl", "-sS", "-o", "/dev/null", f"https://{address}/"],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 60, ("an untrusted certificate", r.returncode, r.stderr)
            try:
                urllib.request.urlopen(f"http://{address}/api/v1/status", timeout=30).read()
                sys.exit("FAIL: plain HTTP was answered on the TLS port")
            except Exception as e:  # the server drops a connection that does not speak TLS
                print(f"plain HTTP on the TLS port: {type(e).__name__}", flush=True)
            before = h.json("/api/v1/status")[1]["iteration"]
            wait_for("the job going on over https", lambda: h.json("/api/v1/status")[1]["iteration"] > before)
            st = h.json("/api/v1/status")[1]
            assert st["invariant_ok"] and st["accounting"]["lost"] == 0, st
            print(f"https console served {address}: status, 401, /metrics by curl; iteration {st['iteration']}",
                  flush=True)
        finally:
            up.stop()
    print("http console TLS checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
