#!/usr/bin/env python3
"""The run report page (issue 30): `moerl up` leaves report.html beside report.json, and
`moerl report` draws it again from report.json or puts two runs side by side. Two short real
runs (the first with the default Spot interruption and so a replacement, the second without);
each page is opened in headless Chromium, which runs the page's inline script: its DOM after
load must hold the plots (the reward curve's points, one per iteration; the phase bars; the
staleness bars) and the tables (interruption, replacement, accounting, groups), and its
screenshot must show the reward curve's pixels. The page must fetch nothing. Bad input (no
report, garbled JSON, JSON that is not a report, a report whose strings hold "</script>") gets
a clear error naming the file, or is shown as text.

    report_html_test.py MOERL ARTIFACTS_DIR

Every wait is a liveness bound, not a timing check."""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_console_test import SMALL  # noqa: E402

ITERATIONS = 80   # the default Spot notice goes to a rollout node at iteration 10; its replacement
                  # starts 1 s after the node leaves, and 30 iterations could end before it
RUN_BOUND_S = 300  # liveness bound of one run on a loaded machine
REWARD_MEAN_RGB = (0x1b, 0x4f, 0x8a)  # report.js's REWARD_MEAN_COLOUR


def run_up(moerl, cwd, run_dir, *extra):
    r = subprocess.run([moerl, "up", "--iterations", str(ITERATIONS), "--run-dir", run_dir, *SMALL, *extra],
                       cwd=cwd, capture_output=True, text=True, timeout=RUN_BOUND_S)
    assert r.returncode == 0, (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    m = re.search(r"report in (\S+)/report\.html", r.stdout)
    assert m, r.stdout[-3000:]
    return os.path.join(cwd, m.group(1)), r.stdout


def chromium(args, profile):
    """Headless Chromium on a file:// page; its own profile, no network beyond the file."""
    return subprocess.run(["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-extensions", "--disable-background-networking",
                           "--user-data-dir=" + profile, "--window-size=1280,2400", *args],
                          capture_output=True, text=True, timeout=120)


def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG (what Chromium writes)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return w, h, rows


def open_page(page, profile, shot):
    """The page's DOM once its script ran, and its screenshot's count of reward-curve pixels."""
    url = "file://" + os.path.abspath(page)
    r = chromium(["--dump-dom", url], profile)
    assert r.returncode == 0 and "<html" in r.stdout, (r.returncode, r.stderr[-2000:])
    r2 = chromium(["--screenshot=" + shot, url], profile)
    assert r2.returncode == 0 and os.path.exists(shot), (r2.returncode, r2.stderr[-2000:])
    _, _, rows = png_pixels(shot)
    return r.stdout, sum(row.count(REWARD_MEAN_RGB) for row in rows)


def path_points(dom, cls):
    """The number of points of each <path class=cls> (its M and L commands)."""
    out = []
    for tag in re.findall(r'<path [^>]*class="%s"[^>]*>' % cls, dom):
        d = re.search(r' d="([^"]*)"', tag).group(1)
        assert int(re.search(r'data-points="(\d+)"', tag).group(1)) == len(re.findall(r"[ML]", d)), tag
        out.append(len(re.findall(r"[ML]", d)))
    return out


def table_rows(dom, cls):
    """The text of each body row of <table class=cls> in the first run's column."""
    m = re.search(r'<table class="%s">.*?<tbody>(.*?)</tbody>' % cls, dom, re.S)
    assert m, cls
    return [re.sub(r"<[^>]+>", "|", row) for row in re.findall(r"<tr>(.*?)</tr>", m.group(1), re.S)]


def check_one_run(dom, report, pixels):
    assert 'data-drawn="1"' in dom, "the page's script did not finish"
    # The trainer may step once more while the run settles (policy_version ITERATIONS + 1).
    n = len(report["reward_curve"])
    assert n >= ITERATIONS, n
    assert path_points(dom, "reward-raw") == [n] and path_points(dom, "reward-mean") == [n]
    assert len(re.findall(r'class="phase"', dom)) >= n, "phase bars"
    assert path_points(dom, "wall") == [n - 1]
    stale = sum(1 for p in report["reward_curve"] if p["staleness"] > 0)
    assert len(re.findall(r'class="staleness-bar"', dom)) == stale > 0
    # One marker per interruption and per replacement, and a table row for each.
    inter, repl = report["interruptions"], report["replacements"]
    assert len(re.findall(r'class="marker"', dom)) == len(inter) + len(repl), (inter, repl)
    rows = table_rows(dom, "interruptions")
    assert len(rows) == len(inter) and all(i["node"] in r for i, r in zip(inter, rows)), rows
    rows = table_rows(dom, "replacements")
    assert len(rows) == len(repl) and all(p["replacement"] in r for p, r in zip(repl, rows)), rows
    acct = {r.strip("|").split("|")[0]: r.strip("|").split("|")[-1] for r in table_rows(dom, "accounting")}
    for k in ("dispatched", "committed", "trained", "lost", "duplicated"):
        assert acct[k] == str(report["accounting"][k]), (k, acct)
    assert "invariant holds" in dom
    groups = table_rows(dom, "groups")
    assert len(groups) == len(report["groups"]) >= 2, groups
    for g, row in zip(report["groups"], groups):
        assert g["name"] in row and all(m in row for m in g["members"]), (g, row)
    check_versions(dom, report)
    assert pixels > 200, f"the screenshot shows {pixels} pixels of the reward curve"
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="(https?:)?//', dom), "the page fetches"


def check_versions(dom, report):
    """The policy-version table: one row per version (evenly sampled to at most 24, the first
    and last always in), each with its shard counts (published, checkpoint), coordinator bytes,
    publish and redistribution times and the source mix the rollout nodes' fetches add up to."""
    versions = report["weights"]["versions"]
    assert versions, "the run published no policy versions"
    rows = [re.split(r"\|+", r.strip("|")) for r in table_rows(dom, "versions")]
    assert len(rows) == min(len(versions), 24), (len(rows), len(versions))
    by_version = {str(v["version"]): v for v in versions}
    assert rows[0][0] == str(versions[0]["version"]) and rows[-1][0] == str(versions[-1]["version"])
    read = 0
    for row in rows:
        v = by_version[row[0]]
        assert row[1] == str(v["num_shards"]) and row[2] == str(v["checkpoint_shards"]), (row, v)
        # Each shard's bytes as its member pushed it: together at least the version (issue 27).
        assert len(v["shard_bytes"]) == v["num_shards"], v
        assert v["shard_bytes_max"] == max(v["shard_bytes"]) and row[10] != "-", (row, v)
        assert sum(v["shard_bytes"]) >= v["bytes"], v
        # The trainer group's control messages for the version, never its bytes.
        assert 0 < v["coordinator_bytes"] < 64 * 1024, v
        assert row[4] != "-" and row[5] != "-", row
        if v["num_readers"]:
            read += 1
            assert row[6] != "-" and row[7] != "-", row
            # Each node that holds it read the whole version from somewhere.
            assert sum(v["bytes_from"].values()) >= v["bytes"] > 0, v
            assert re.match(r"(cache|peer|store) \d+%", row[9]), row
    assert read > 0, "no rollout node's redistribution in the version table"


def check_bad_input(moerl, tmp, good):
    def refused(args, *words):
        r = subprocess.run([moerl, "report", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (args, r.returncode, r.stdout, r.stderr)
        assert all(w in r.stderr for w in words), (args, r.stderr)
    missing = os.path.join(tmp, "no-such-run")
    refused([missing], missing, "cannot read")
    empty_dir = os.path.join(tmp, "empty-run")
    os.makedirs(empty_dir)
    refused([empty_dir], empty_dir + "/report.json", "No such file")
    garbled = os.path.join(tmp, "garbled.json")
    with open(garbled, "w") as f:
        f.write(open(good).read()[:500])  # cut mid-way, as a full disk leaves it
    refused([garbled], garbled, "not JSON")
    other = os.path.join(tmp, "other.json")
    with open(other, "w") as f:
        json.dump({"traceEvents": []}, f)
    refused([good, other], other, "not a run report")
    # A page that cannot be written: the error names the path, and nothing is left half-written.
    out = os.path.join(tmp, "no-such-dir", "page.html")
    r = subprocess.run([moerl, "report", good, "--out", out], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and out + ": cannot write" in r.stderr, (r.returncode, r.stderr)
    assert not [f for f in os.listdir(tmp) if ".html" in f], "a refused report wrote a page"


def main(moerl, artifacts):
    assert shutil.which("chromium"), "chromium missing: run scripts/install-deps.sh"
    os.makedirs(artifacts, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(artifacts, "runs")
        shutil.rmtree(run_dir, ignore_errors=True)
        profile = os.path.join(tmp, "chromium")
        # 1. The page moerl up wrote, with the Spot interruption and its replacement.
        a, out = run_up(moerl, tmp, run_dir)
        page = os.path.join(a, "report.html")
        report = json.load(open(os.path.join(a, "report.json")))
        # The end summary: the figures first, then where the report is.
        assert re.search(r"finished after [\d.]+ s: iteration %d/%d, reward [\d.]+ over the last 10 .*"
                         r"samples/s, lost 0, dup 0, dropped \d+, invariant holds; 1 interruption\(s\), "
                         r"1 node\(s\) replaced" % (report["policy_version"], ITERATIONS), out), out[-2000:]
        assert report["interruptions"] and report["replacements"], "the default run was not interrupted"
        dom, pixels = open_page(page, profile, os.path.join(artifacts, "report-up.png"))
        check_one_run(dom, report, pixels)
        # 2. moerl report RUN_DIR draws it again from report.json alone.
        os.remove(page)
        r = subprocess.run([moerl, "report", a], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and page in r.stdout, (r.stdout, r.stderr)
        dom, pixels = open_page(page, profile, os.path.join(artifacts, "report-again.png"))
        check_one_run(dom, report, pixels)
        # 3. Two runs side by side: the second without the interruption.
        b, _ = run_up(moerl, tmp, run_dir, "--no-interrupt")
        both = os.path.join(tmp, "both.html")
        r = subprocess.run([moerl, "report", a, os.path.join(b, "report.json"), "--out", both],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (r.stdout, r.stderr)
        dom, pixels = open_page(both, profile, os.path.join(artifacts, "report-compare.png"))
        assert 'data-drawn="2"' in dom and len(re.findall(r'<article class="run" data-run="\d"', dom)) == 2
        curves = [len(json.load(open(os.path.join(d, "report.json")))["reward_curve"]) for d in (a, b)]
        assert path_points(dom, "compare-mean") == curves, (path_points(dom, "compare-mean"), curves)
        assert path_points(dom, "reward-mean") == curves
        assert os.path.basename(a) in dom and os.path.basename(b) in dom
        assert pixels > 200
        # 4. A report's strings are text: "</script>" in one does not end the data early.
        hostile = dict(report, run_id='</script><b id="injected">x</b>')
        path = os.path.join(tmp, "hostile.json")
        with open(path, "w") as f:
            json.dump(hostile, f)
        r = subprocess.run([moerl, "report", path, "--out", os.path.join(tmp, "hostile.html")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        dom, _ = open_page(os.path.join(tmp, "hostile.html"), profile, os.path.join(tmp, "hostile.png"))
        # As text it serialises escaped (&lt;b ...); as an element it would be <b id=...>.
        assert 'data-drawn="1"' in dom and '<b id="injected">' not in dom, "a report's string became HTML"
        assert "&lt;/script&gt;&lt;b id=" in dom, "the hostile run id is not shown as text"
        # A failed run's report (what local_job writes when the console stopped answering:
        # the accounting as it stood, no curve) still draws, and says why it failed first.
        failed = {"accounting": dict(report["accounting"], invariant_ok=False), "failed_node": "trainer-0",
                  "failure_cause": "No space left on device", "failure": "trainer-0 gave up"}
        path = os.path.join(tmp, "failed.json")
        with open(path, "w") as f:
            json.dump(failed, f)
        r = subprocess.run([moerl, "report", path, "--out", os.path.join(tmp, "failed.html")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        dom, _ = open_page(os.path.join(tmp, "failed.html"), profile, os.path.join(tmp, "failed.png"))
        assert 'data-drawn="1"' in dom and "no iterations in this report" in dom, "a failed run's page"
        assert re.search(r'<p class="failure error">FAILED: trainer-0 gave up: No space left on device', dom)
        assert '<span class="badge invariant bad">INVARIANT BROKEN</span>' in dom
        for f in ("both.html", "hostile.html", "failed.html"):
            os.remove(os.path.join(tmp, f))
        # 5. Bad input.
        check_bad_input(moerl, tmp, os.path.join(a, "report.json"))
    print("report page checks passed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
