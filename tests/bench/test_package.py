"""`moerl bench package` in its CI form (--tiny), so the benchmarks without a smoke test of their
own (kernels, ep, store, policy, job-ep, env: control, fleet, ledger and weights have theirs in
this folder and tests/weights) run end to end through the real binary, and a benchmark that no
longer runs fails the suite (the package exits 1 when any run fails). Then the directory: a
report naming every benchmark, one JSON per run with provenance, PNGs that decode. Structure
only: the figures are the package's to report. MOERL_BINARY names the binary."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "package"))
import figures  # noqa: E402

MOERL = os.environ.get("MOERL_BINARY", "")
CI_BENCHES = ["kernels", "ep", "store", "policy", "job-ep", "env"]


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    assert os.access(MOERL, os.X_OK), f"set MOERL_BINARY (got {MOERL!r})"
    out = tmp_path_factory.mktemp("package") / "report"
    p = subprocess.run([MOERL, "bench", "package", "--tiny", "--benches", ",".join(CI_BENCHES),
                        "--no-peers", "--out", str(out)], capture_output=True, text=True,
                       timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def test_every_benchmark_ran_once_with_json_and_provenance(package):
    summary = json.loads((package / "summary.json").read_text())
    ran = {(r["name"], r["repeat"]): r for r in summary["runs"] if r["group"] == "bench"}
    assert sorted(n for n, _ in ran) == sorted(CI_BENCHES)
    for name in CI_BENCHES:
        run = ran[(name, 1)]
        assert run["rc"] == 0 and "error" not in run, run
        assert len(run["load_before"]) == 3 and len(run["load_after"]) == 3
        doc = json.loads((package / "raw" / f"bench-{name}-1.json").read_text())
        assert "provenance" in doc, name
    groups = {g["name"]: g for g in summary["groups"]}
    for name in CI_BENCHES:
        assert groups[name]["figures"], f"{name}: no figure found in its JSON"
    # The report names the package's own facts and every benchmark.
    report = (package / "report.md").read_text()
    assert summary["package"]["git_commit"] in report
    for name in CI_BENCHES:
        assert f"`moerl bench {name}`" in report
    assert "torch.distributed" in report and "--no-peers" in report  # peers said absent
    assert "Scale model" in report


def test_plots_are_pngs_that_decode(package):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.image as mpimg
    pngs = sorted(p for p in os.listdir(package) if p.endswith(".png"))
    assert "runs.png" in pngs and len(pngs) > len(CI_BENCHES), pngs
    for name in pngs:
        data = (package / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", name
        img = mpimg.imread(str(package / name))
        assert img.shape[0] > 50 and img.shape[1] > 50, (name, img.shape)
        assert f"({name})" in (package / "report.md").read_text()


def test_unknown_benchmark_is_named():
    p = subprocess.run([MOERL, "bench", "package", "--tiny", "--benches", "kernels,nosuch",
                        "--out", "/nonexistent/never-written"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0
    assert "nosuch" in p.stderr


def test_figures_and_baselines_from_a_hand_made_run():
    run = {"provenance": {"commit": "x"}, "config": {"p50_us": 1},
           "modes": [{"mode": "normal", "total_us": {"p50": 10.0, "p99": 30.0, "max": 99}},
                     {"mode": "baseline", "total_us": {"p50": 20.0, "p99": 40.0}}],
           "units_per_s": {"median": 5.0, "min": 4.0, "max": 6.0, "runs": [4.0, 5.0, 6.0]}}
    f = figures.figures(run)
    assert f == {"modes[mode=normal].total_us.p50": 10.0, "modes[mode=normal].total_us.p99": 30.0,
                 "modes[mode=baseline].total_us.p50": 20.0,
                 "modes[mode=baseline].total_us.p99": 40.0, "units_per_s": 5.0}
    other = json.loads(json.dumps(run))
    other["modes"][0]["total_us"]["p50"] = 14.0
    rows = {r["figure"]: r for r in figures.aggregate("ep", [run, other])}
    row = rows["modes[mode=normal].total_us.p50"]
    assert row["value"]["n"] == 2 and row["value"]["mean"] == 12.0
    assert abs(row["value"]["stddev"] - 2.8284271) < 1e-6
    assert row["baseline"] == "modes[mode=baseline].total_us.p50"
    assert row["baseline_value"]["mean"] == 20.0
    assert "baseline" not in rows["units_per_s"]
