#!/usr/bin/env python3
"""`moerl bench package`: every benchmark, the scenario short forms and the installed peers,
each repeated, into one directory (report.md, raw/*.json, *.png). See bench/package/README.md.

Started by the C++ subcommand (bench/package/package_bench.cpp), which passes --moerl (its own
binary). Every figure comes from a child run of that binary (`moerl bench NAME --json`,
`moerl sim run FILE --short --json`) or a peer's own script; this file only runs them, keeps
their JSON, and summarises it (figures.py) and plots it (plots.py).
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # nothing written into the source tree
import figures  # noqa: E402

# Each benchmark's forms: `full` is the benchmark's own default (its documented run), `quick`
# a short form whose figures still mean something, `tiny` the CI form (seconds; a smoke run).
BENCHES = [
    {"name": "kernels", "full": ["--runs", "20"],
     "quick": ["--quick", "--runs", "10", "--gemm-runs", "2"],
     "tiny": ["--quick", "--runs", "2", "--gemm-runs", "1", "--warmup", "0"]},
    {"name": "ep", "full": [], "quick": ["--ranks", "2", "--starts", "2", "--iterations", "10"],
     "tiny": ["--ranks", "2", "--starts", "1", "--iterations", "2", "--warmup", "0"]},
    {"name": "control", "full": [],
     "quick": ["--requests", "500", "--nodes", "2", "--batch", "16", "--duration", "1",
               "--repeat", "1"],
     "tiny": ["--requests", "50", "--nodes", "2", "--batch", "16", "--duration", "0.3",
              "--repeat", "1"]},
    {"name": "fleet", "full": [],
     "quick": ["--nodes", "200", "--hosts", "2", "--warmup", "1", "--measure", "3", "--fault", "6",
               "--tick-cost-units", "20000"],
     "tiny": ["--nodes", "20", "--hosts", "1", "--warmup", "1", "--measure", "1", "--no-faults",
              "--tick-cost-units", "2000"]},
    {"name": "ledger", "full": [],
     "quick": ["--units", "5000", "--journaled-units", "200", "--samples", "2048", "--runs", "1",
               "--tick-units", "3000"],
     "tiny": ["--units", "200", "--journaled-units", "20", "--samples", "256", "--runs", "1",
              "--tick-units", "300"]},
    {"name": "store", "full": [],
     "quick": ["--sizes", "4096,1048576", "--reps", "20", "--warmup", "2", "--checkpoint-bytes",
               "16777216", "--checkpoint-parts", "2", "--checkpoint-reps", "2"],
     "tiny": ["--sizes", "4096", "--reps", "5", "--warmup", "1", "--checkpoint-bytes", "1048576",
              "--checkpoint-parts", "2", "--checkpoint-reps", "1"]},
    {"name": "policy", "full": [], "quick": ["--reps", "5", "--warmup", "1"],
     "tiny": ["--reps", "2", "--warmup", "0"], "no_json_flag": True},
    {"name": "job-ep", "full": [], "quick": ["--ranks", "2", "--reps", "3"],
     "tiny": ["--ranks", "2", "--reps", "1"], "no_json_flag": True},
    {"name": "env", "full": [], "quick": ["--requests", "300", "--duration", "1"],
     "tiny": ["--requests", "20", "--duration", "0.2", "--no-netns"]},
    {"name": "weights", "full": [],
     "quick": ["--sizes", "1048576,8388608", "--readers", "1,3", "--reps", "2", "--warmup", "1",
               "--set", "weights.chunk_bytes=262144"],
     "tiny": ["--sizes", "1048576", "--readers", "1", "--reps", "1", "--warmup", "0",
              "--set", "weights.chunk_bytes=262144"]},
]
SCENARIO_DIR = os.path.join(ROOT, "sims", "scenarios")
# --quick's scenarios, one per kind of fault (notice, kill, network, control plane), each with
# its fault-free baseline: all eleven short forms take ~9 min on 2 cores by themselves, past
# --quick's 10-minute budget. The full package runs every shipped scenario.
QUICK_SCENARIOS = ["spot-storm", "hard-kills", "partition", "coordinator-restart"]
TORCH_PEER = os.path.join(ROOT, "bench", "python_ep", "ep_vs_all_to_all.py")
SCALE_MODEL = os.path.join(ROOT, "bench", "model", "scale_model.py")


def load_average():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def git(*args):
    try:
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


class Runner:
    """Runs one child, times it, keeps its JSON (or why there is none) and the load around it."""

    def __init__(self, out_dir, timeout_s):
        self.out_dir = out_dir
        self.raw_dir = os.path.join(out_dir, "raw")
        self.log_dir = os.path.join(out_dir, "logs")
        os.makedirs(self.raw_dir, exist_ok=True)
        os.makedirs(self.log_dir, exist_ok=True)
        self.timeout_s = timeout_s
        self.runs = []

    def run(self, group, name, repeat, argv, json_from=None, env=None):
        tag = f"{group}-{name}-{repeat}"
        raw = os.path.join(self.raw_dir, tag + ".json")
        log = os.path.join(self.log_dir, tag + ".stderr")
        entry = {"group": group, "name": name, "repeat": repeat, "command": argv,
                 "load_before": load_average(), "started_utc": utc_now()}
        print(f"[package] {tag}: {' '.join(argv)}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            with open(log, "w") as err:
                p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, text=True,
                                   timeout=self.timeout_s, env=env, cwd=ROOT)
            entry["rc"] = p.returncode
            stdout = p.stdout
        except subprocess.TimeoutExpired:
            entry["rc"] = "timeout"
            stdout = ""
        entry["wall_s"] = time.monotonic() - t0
        entry["load_after"] = load_average()
        doc = None
        try:
            if json_from:
                with open(json_from) as f:
                    doc = json.load(f)
            else:
                doc = json.loads(stdout)
        except (OSError, ValueError) as e:
            entry["error"] = f"no JSON ({e}); stderr: logs/{tag}.stderr"
        if doc is not None:
            with open(raw, "w") as f:
                json.dump(doc, f, indent=1)
            entry["raw"] = os.path.relpath(raw, self.out_dir)
        if entry["rc"] != 0 and "error" not in entry:
            entry["error"] = f"exit {entry['rc']}; stderr: logs/{tag}.stderr"
        if "error" in entry:
            with open(log) as f:
                tail = f.read()[-600:]
            entry["stderr_tail"] = tail
            print(f"[package] {tag} FAILED: {entry['error']}\n{tail}", file=sys.stderr)
        self.runs.append(entry)
        return doc


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def detect_peers(moerl):
    """Which peers are installed here; for each absent one, why."""
    peers = {}
    mpirun = shutil.which("mpirun")
    peers["mpi"] = ({"present": True, "detail": f"mpirun at {mpirun}"} if mpirun else
                    {"present": False, "detail": "mpirun not found (apt: openmpi-bin)"})
    build_python = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(moerl))),
                                "python")
    env = dict(os.environ, PYTHONPATH=build_python, PYTHONDONTWRITEBYTECODE="1")
    try:
        p = subprocess.run(["/usr/bin/python3", "-c",
                            "import torch, torch.distributed, moerl.ep; print(torch.__version__)"],
                           capture_output=True, text=True, timeout=120, env=env)
        if p.returncode == 0:
            peers["torch"] = {"present": True, "env": env,
                              "detail": f"torch {p.stdout.strip()} (gloo), moerl.ep from "
                                        f"{build_python}"}
        else:
            last = (p.stderr.strip().splitlines() or ["?"])[-1]
            peers["torch"] = {"present": False,
                              "detail": f"/usr/bin/python3 cannot import torch and moerl.ep "
                                        f"({last}); build the moerl_python target, apt "
                                        f"python3-torch"}
    except (OSError, subprocess.SubprocessError) as e:
        peers["torch"] = {"present": False, "detail": str(e)}
    return peers


def write_outputs(summary, out_dir):
    """summary.json, the plots and report.md from the runs' raw JSON (summary["runs"])."""
    docs = {}
    for r in summary["runs"]:
        if r["group"] == "model" or "raw" not in r:
            continue
        with open(os.path.join(out_dir, r["raw"])) as f:
            docs.setdefault((r["group"], r["name"]), []).append(json.load(f))
    seen = []
    for r in summary["runs"]:
        if (r["group"], r["name"]) not in seen and r["group"] != "model":
            seen.append((r["group"], r["name"]))
    summary["groups"] = []
    for group, name in seen:
        ds = docs.get((group, name), [])
        key = "scenario" if group == "scenario" else name
        summary["groups"].append({
            "group": group, "name": name, "repeats_ok": len(ds),
            "figures": figures.aggregate(key, ds) if ds else [],
            "planes": sorted({f"{p}: {v}" for d in ds
                              for p, v in figures.strings(d, figures.PLANE_KEYS)})[:24],
            "provenance": ds[0].get("provenance") if ds else None})
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    import plots   # the PNGs, from the summary only
    import report  # the Markdown report, from the summary only
    report.write(summary, plots.make_all(summary, out_dir), out_dir)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--moerl", required=True, help="the moerl binary whose benchmarks run")
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", choices=["full", "quick", "tiny"], default="full")
    ap.add_argument("--repeats", type=int, required=True)
    ap.add_argument("--benches", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--scenarios", default="",
                    help="comma-separated scenario names, 'none', or '' for every shipped one")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-model", action="store_true")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per child run")
    ap.add_argument("--rewrite", action="store_true",
                    help="only remake summary.json, the plots and report.md of --out from its "
                         "raw JSON (after a change to figures.py, report.py or plots.py)")
    a = ap.parse_args()
    if a.rewrite:
        with open(os.path.join(a.out, "summary.json")) as f:
            write_outputs(json.load(f), a.out)
        return 0
    names = [b["name"] for b in BENCHES]
    chosen = [n for n in a.benches.split(",") if n] or names
    unknown = [n for n in chosen if n not in names]
    if unknown:
        sys.exit(f"moerl bench package: unknown benchmark(s) {unknown}; known: {names}")
    shipped = sorted(f[:-5] for f in os.listdir(SCENARIO_DIR) if f.endswith(".yaml"))
    if a.scenarios == "none":
        scenarios = []
    elif a.scenarios:
        scenarios = a.scenarios.split(",")
        unknown = [s for s in scenarios if s not in shipped]
        if unknown:
            sys.exit(f"moerl bench package: unknown scenario(s) {unknown}; shipped: {shipped}")
    elif a.mode == "quick":
        scenarios = [s for s in QUICK_SCENARIOS if s in shipped]
    elif a.mode == "tiny":
        scenarios = []  # each has its own CTest entry (sims_short_*)
    else:
        scenarios = shipped
    left_out = [s for s in shipped if s not in scenarios]
    moerl = os.path.abspath(a.moerl)
    os.makedirs(a.out, exist_ok=True)
    runner = Runner(a.out, a.timeout)
    t_start = time.monotonic()
    started = utc_now()
    load_start = load_average()

    peers = {"mpi": {"present": False, "detail": "--no-peers"},
             "torch": {"present": False, "detail": "--no-peers"}} if a.no_peers else \
        detect_peers(moerl)

    for b in BENCHES:
        if b["name"] not in chosen:
            continue
        argv = [moerl, "bench", b["name"], *b[a.mode]]
        if not b.get("no_json_flag"):
            argv.append("--json")
        if b["name"] == "ep":
            argv += ["--peer", "mpi" if peers["mpi"]["present"] else "none"]
        for r in range(a.repeats):
            runner.run("bench", b["name"], r + 1, argv)

    if peers["torch"]["present"]:
        shape = (["--ranks", "2", "--tokens", "16,128", "--hidden", "1024", "--experts", "64",
                  "--topk", "8", "--iterations", "5", "--warmup", "1"] if a.mode != "full" else
                 ["--ranks", "2,4", "--tokens", "128,512"])
        for r in range(a.repeats):
            path = os.path.join(runner.raw_dir, f".torch-{r}.json")
            argv = ["/usr/bin/python3", TORCH_PEER, *shape, "--routing", "zipf", "--json", path]
            if peers["mpi"]["present"]:
                argv.append("--mpi")
            runner.run("peer", "torch", r + 1, argv, json_from=path, env=peers["torch"]["env"])
            if os.path.exists(path):
                os.remove(path)

    # A scenario's short form is a whole cluster run with its own fault-free baseline (~1 min
    # on 2 cores): repeated only in the full package, once under --quick to fit its budget.
    scenario_repeats = a.repeats if a.mode == "full" else 1
    for s in scenarios:
        for r in range(scenario_repeats):
            path = os.path.join(runner.raw_dir, f".scenario-{s}-{r}.json")
            argv = [moerl, "sim", "run", os.path.join(SCENARIO_DIR, s + ".yaml"), "--short",
                    "--json", "--report", path]
            runner.run("scenario", s, r + 1, argv, json_from=path)
            if os.path.exists(path):
                os.remove(path)

    model = {"ran": False}
    if a.no_model:
        model["why"] = "--no-model"
    elif not os.path.exists(SCALE_MODEL):
        model["why"] = "bench/model/scale_model.py is not in this tree"
    else:
        model_dir = os.path.join(a.out, "model")
        argv = ["/usr/bin/python3", SCALE_MODEL, "--out", model_dir]
        if a.mode != "full":
            argv.append("--quick")
        d = runner.run("model", "scale_model", 1, argv,
                       json_from=os.path.join(model_dir, "model.json"))
        model = {"ran": d is not None, "dir": "model"}
        if d is None:
            model["why"] = runner.runs[-1].get("error", "no model.json")

    summary = {
        "package": {"mode": a.mode, "repeats": a.repeats, "scenario_repeats": scenario_repeats,
                    "started_utc": started, "finished_utc": utc_now(),
                    "wall_s": time.monotonic() - t_start, "load_start": load_start,
                    "load_end": load_average(), "cpus": os.cpu_count(),
                    "git_commit": git("rev-parse", "HEAD"),
                    "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
                    "moerl": moerl},
        "peers": {k: {"present": v["present"], "detail": v["detail"]} for k, v in peers.items()},
        "model": model,
        "scenarios_left_out": left_out,
        "runs": runner.runs,
    }
    write_outputs(summary, a.out)
    failed = [r for r in runner.runs if "error" in r]
    print(f"[package] wrote {a.out}/report.md ({len(runner.runs)} runs, {len(failed)} failed, "
          f"{summary['package']['wall_s']:.0f} s)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
