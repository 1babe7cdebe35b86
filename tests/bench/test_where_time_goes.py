"""bench/job_ep/where_time_goes.py in a short form, so the per-node breakdown of a default
`moerl up` iteration keeps running: the real binary's nine node processes, /proc counters and
`perf sched` over a short window. Structure only: the figures are the benchmark's to report.
MOERL_BINARY names the binary."""

import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "job_ep", "where_time_goes.py")
MOERL = os.environ.get("MOERL_BINARY", "")
NODES = ["buffer-0", "buffer-1", "coordinator", "reward-0", "rollout-0", "rollout-1",
         "trainer-0", "trainer-1", "weights-0"]


def test_a_short_window_names_every_node_with_its_cpu_and_switches(tmp_path):
    assert os.access(MOERL, os.X_OK), f"set MOERL_BINARY (got {MOERL!r})"
    out = tmp_path / "wtg.json"
    p = subprocess.run(["/usr/bin/python3", SCRIPT, "--iterations", "400", "--warmup-s", "3",
                        "--record-s", "0.5", "--binary", MOERL, "--out", str(out)],
                       capture_output=True, text=True, timeout=150)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    j = json.loads(out.read_text())
    assert j["provenance"]["commit"]
    assert j["iterations_in_window"] > 0 and j["ms_per_iteration"] > 0, j
    assert sorted(n["node"] for n in j["nodes"]) == NODES, j["nodes"]
    for n in j["nodes"]:
        assert n["context_switches_per_iteration"] >= 0 and n["ran_alone_ms_per_iteration"] >= 0
    # The trainer members compute every step: each used CPU inside the window.
    assert all(n["cpu_ms_per_iteration"] > 0 for n in j["nodes"] if n["node"].startswith("trainer"))
    assert all(0 <= f <= 1 for f in j["idle_fraction_per_cpu"].values()), j
    assert 0 <= j["all_cpus_idle_fraction"] <= 1


def test_a_job_that_does_not_start_is_named(tmp_path):
    p = subprocess.run(["/usr/bin/python3", SCRIPT, "--iterations", "400", "--warmup-s", "2",
                        "--binary", MOERL, "--out", str(tmp_path / "x.json"),
                        "--set", "policy.d_model=-3"], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "ended or started no nodes" in p.stderr, p.stderr
