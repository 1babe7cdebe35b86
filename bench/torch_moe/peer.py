#!/usr/bin/env python3
"""The peer figure of python/WORKERS.md ("Bring your own model"): the example's PyTorch MoE
policy and GRPO loop as one plain PyTorch process (`python3 -m moerl.examples.torch_moe
--standalone`, no moerl) against the same loop under moerl (`moerl up --config
configs/torch-moe.yaml`: two Python rollout workers, the Python reward and trainer, the mid-run
Spot notice), run one after the other on the same machine, PAIRS times alternating which goes
first. Both are timed from their process launch to the first 10-iteration mean reward >= 0.9 of
max (the standalone's iterations, moerl's versions), so moerl's start-up (node processes,
four Python workers importing torch) counts, as the standalone's import does.

  bench/torch_moe/peer.py BUILD_DIR [PAIRS] > result.json

Prints one JSON document: each run's figures, the ratios per pair, the load average before
each run and the provenance (`moerl version --json`)."""
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def standalone(build):
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
    t0 = time.time()
    r = subprocess.run(["/usr/bin/python3", "-m", "moerl.examples.torch_moe", "--standalone"],
                       capture_output=True, text=True, env=env, timeout=600, check=True)
    wall = time.time() - t0
    last = json.loads(r.stdout.strip().splitlines()[-1])
    start_up = wall - last["wall_s"]  # interpreter, torch import, model build
    return {"what": "standalone", "process_wall_s": round(wall, 2),
            "to_90_from_launch_s": round(start_up + last["reached_90"]["seconds"], 2),
            "iterations_to_90": last["reached_90"]["iteration"],
            "samples_per_s": round(last["samples_per_s"]), "start_up_s": round(start_up, 2)}


def moerl_up(build):
    with tempfile.TemporaryDirectory(prefix="moerl-peer-") as tmp:
        t0 = time.time()
        subprocess.run([os.path.join(build, "bin", "moerl"), "up", "--config",
                        os.path.join(ROOT, "configs", "torch-moe.yaml"), "--run-dir", tmp,
                        "--console", "tcp://127.0.0.1:17511",
                        "--set", "console.http_address=127.0.0.1:17512"],
                       capture_output=True, text=True, timeout=600, check=True)
        wall = time.time() - t0
        rep = json.load(open(glob.glob(os.path.join(tmp, "*", "report.json"))[0]))
    js = next(n["stats"]["job"] for n in rep["nodes"]
              if isinstance(n.get("stats", {}).get("job"), dict)
              and n["stats"]["job"].get("trainer") == "external")
    curve, its = js["reward_curve"], js["iterations"]
    out = {"what": "moerl up", "process_wall_s": round(wall, 2),
           "version_1_from_launch_s": round(its[0]["end_unix_ms"] / 1000 - t0, 2),
           "samples_per_s": round(sum(p["samples"] for p in curve) / rep["wall_s"]),
           "lost": rep["accounting"]["lost"], "duplicated": rep["accounting"]["duplicated"],
           "interruptions": len(rep["interruptions"])}
    for i in range(10, len(curve) + 1):
        if sum(p["mean_reward"] for p in curve[i - 10:i]) / 10 >= 0.9 * js["reward_max"]:
            out["versions_to_90"] = curve[i - 1]["iteration"]
            out["to_90_from_launch_s"] = round(its[i - 1]["end_unix_ms"] / 1000 - t0, 2)
            out["to_90_from_version_1_s"] = round(
                (its[i - 1]["end_unix_ms"] - its[0]["end_unix_ms"]) / 1000, 2)
            break
    return out


def main():
    build = os.path.abspath(sys.argv[1])
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    runs, ratios = [], []
    for p in range(pairs):
        pair = {}
        for kind in (("standalone", "moerl") if p % 2 == 0 else ("moerl", "standalone")):
            load = os.getloadavg()[0]
            r = standalone(build) if kind == "standalone" else moerl_up(build)
            r.update(pair=p + 1, load_average_before=round(load, 2))
            runs.append(r)
            pair[kind] = r
            print(json.dumps(r), file=sys.stderr, flush=True)
        if "to_90_from_launch_s" in pair["moerl"]:
            ratios.append(round(pair["moerl"]["to_90_from_launch_s"] /
                                pair["standalone"]["to_90_from_launch_s"], 2))
    prov = json.loads(subprocess.run([os.path.join(build, "bin", "moerl"), "version", "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    print(json.dumps({"bench": "torch_moe_peer", "date_utc": time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "pairs": pairs, "runs": runs,
        "ratio_to_90_from_launch_per_pair": ratios, "cores": os.cpu_count(),
        "provenance": prov}, indent=1))


if __name__ == "__main__":
    main()
