"""bench/job_ep/up_vs_learn.py in a short form (one pair of 30 iterations), so the issue-27
comparison keeps running: both commands run through the real binary and the JSON holds both
runs with provenance, CPU seconds, load averages and the accounting. Structure only: the
figures are the benchmark's to report. MOERL_BINARY names the binary."""

import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "job_ep", "up_vs_learn.py")
MOERL = os.environ.get("MOERL_BINARY", "")


def test_one_short_pair_writes_both_runs_with_provenance(tmp_path):
    assert os.access(MOERL, os.X_OK), f"set MOERL_BINARY (got {MOERL!r})"
    out = tmp_path / "uvl.json"
    p = subprocess.run(["/usr/bin/python3", SCRIPT, "--pairs", "1", "--iterations", "30",
                        "--binary", MOERL, "--out", str(out)],
                       capture_output=True, text=True, timeout=150)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    j = json.loads(out.read_text())
    assert j["provenance"]["commit"]
    assert sorted(r["kind"] for r in j["runs"]) == ["learn", "up"]
    for r in j["runs"]:
        assert r["elapsed_s"] > 0 and r["cpu_user_s"] > 0, r
        assert r["load_before"] >= 0
    up = next(r for r in j["runs"] if r["kind"] == "up")
    assert up["lost"] == 0 and up["duplicated"] == 0, up
    assert up["steps"] > 0 and 0 <= up["staleness_mean"] <= 1, up
    assert up["steady_ms_per_iteration"] > 0, up
    learn = next(r for r in j["runs"] if r["kind"] == "learn")
    assert learn["ms_per_iteration"] > 0, learn
    pace = j["ms_per_iteration_ratio_up_to_learn"]["per_pair"]
    assert pace == [up["steady_ms_per_iteration"] / learn["ms_per_iteration"]], (pace, up, learn)
    assert up["replacements"] >= 0 and up["group_reformations"] >= 0, up
    assert 0 <= up["steps_off_size"] < up["steps"], up


def test_a_failing_command_names_itself_and_its_log(tmp_path):
    p = subprocess.run(["/usr/bin/python3", SCRIPT, "--pairs", "1", "--iterations", "30",
                        "--binary", MOERL, "--out", str(tmp_path / "x.json"),
                        "--set", "policy.d_model=-3"], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "exited" in p.stderr and ".log" in p.stderr, p.stderr
