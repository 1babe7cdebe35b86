"""bench/job_ep/up_variants.py in a short form (one round of 30 iterations, one variant), so the
knock-out comparison keeps running: the default and the variant run through the real binary,
the variant's overrides reach it, and the JSON holds both runs and their medians with
provenance. Structure only: the figures are the benchmark's to report. MOERL_BINARY names the
binary."""

import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "job_ep", "up_variants.py")
MOERL = os.environ.get("MOERL_BINARY", "")


def test_one_round_runs_the_default_and_the_variant(tmp_path):
    assert os.access(MOERL, os.X_OK), f"set MOERL_BINARY (got {MOERL!r})"
    out = tmp_path / "uv.json"
    p = subprocess.run(["/usr/bin/python3", SCRIPT, "--rounds", "1", "--iterations", "30",
                        "--binary", MOERL, "--out", str(out),
                        "--variant", "no-checkpoints=job.checkpoint_every=0"],
                       capture_output=True, text=True, timeout=150)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    j = json.loads(out.read_text())
    assert j["provenance"]["commit"]
    assert sorted(r["variant"] for r in j["runs"]) == ["default", "no-checkpoints"], j["runs"]
    assert j["variants"]["no-checkpoints"]["overrides"] == ["job.checkpoint_every=0"], j["variants"]
    for r in j["runs"]:
        assert r["steady_ms_per_iteration"] > 0 and r["cpu_s"] > 0, r
        assert r["lost"] == 0 and r["duplicated"] == 0, r
    for s in j["variants"].values():
        assert s["median_steady_ms_per_iteration"] > 0 and s["median_cpu_s"] > 0, s


def test_a_malformed_variant_is_named(tmp_path):
    p = subprocess.run(["/usr/bin/python3", SCRIPT, "--binary", MOERL, "--out",
                        str(tmp_path / "x.json"), "--variant", "no-value=job.checkpoint_every"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "--variant 'no-value=job.checkpoint_every'" in p.stderr, p.stderr
