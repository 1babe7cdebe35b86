#!/usr/bin/env python3
"""The slow-environment curve (issue 14): `moerl up --config configs/multi-turn.yaml` once per
env.step_latency_ms in the sweep, each for --iterations iterations, and from each run's report
the mean iteration time and the environment's share of the rollout work,
t_env / (t_env + t_generate + t_reward) (worker-seconds, summed over the iterations after the
first, whose time includes start-up). Prints JSON with each run's provenance (from its report).

  bench/env/slow_env_curve.py MOERL [--latencies 0,5,20,50] [--iterations 20] [--out FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def one_run(moerl, config, latency_ms, iterations, work):
    run_dir = os.path.join(work, f"lat{latency_ms}")
    os.makedirs(run_dir)
    t0 = time.time()
    subprocess.run([moerl, "up", "--config", config, "--iterations", str(iterations),
                    "--no-interrupt", "--set", f"env.step_latency_ms={latency_ms}",
                    "--set", f"store.url={run_dir}/store"],
                   cwd=run_dir, check=True, stdout=subprocess.DEVNULL)
    wall = time.time() - t0
    runs = os.path.join(run_dir, "moerl-runs")
    report = json.load(open(os.path.join(runs, sorted(os.listdir(runs))[-1], "report.json")))
    its = report["iterations"][1:]
    ends = [it["end_unix_ms"] for it in report["iterations"]]
    iteration_s = [(b - a) / 1000 for a, b in zip(ends, ends[1:])]
    t_env = sum(it.get("t_env", 0) for it in its)
    t_gen = sum(it.get("t_generate", 0) for it in its)
    t_rew = sum(it.get("t_reward", 0) for it in its)
    return {"env_step_latency_ms": latency_ms,
            "iterations": len(report["iterations"]),
            "wall_s": round(wall, 2),
            "mean_iteration_s": sum(iteration_s) / len(iteration_s),
            "t_env_s": t_env, "t_generate_s": t_gen, "t_reward_s": t_rew,
            "t_env_share": t_env / (t_env + t_gen + t_rew),
            "env_ms_per_step_mean": sum(it.get("env_ms_per_step", 0) for it in its) / len(its),
            "step_latency_ms": report["env"]["step_latency_ms"],
            "mean_reward_last": report["reward_curve"][-1]["mean_reward"],
            "accounting": {k: report["accounting"][k] for k in ("lost", "duplicated")},
            "load_average": list(os.getloadavg()),
            "provenance": report["provenance"]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("moerl")
    p.add_argument("--config", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "..", "..", "configs", "multi-turn.yaml"))
    p.add_argument("--latencies", default="0,5,20,50")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--out")
    a = p.parse_args()
    moerl, config = os.path.abspath(a.moerl), os.path.abspath(a.config)
    with tempfile.TemporaryDirectory(prefix="moerl-slow-env-") as work:
        runs = [one_run(moerl, config, float(x), a.iterations, work)
                for x in a.latencies.split(",")]
    base = runs[0]["mean_iteration_s"]
    for r in runs:
        r["iteration_s_over_first"] = r["mean_iteration_s"] / base
    out = {"bench": "slow_env_curve", "config": config, "runs": runs}
    text = json.dumps(out, indent=2)
    if a.out:
        open(a.out, "w").write(text + "\n")
    print(text)


if __name__ == "__main__":
    sys.exit(main())
