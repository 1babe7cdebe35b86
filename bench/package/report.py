"""report.md of a package, written from its summary.json alone (every number is a run's)."""

import os

MAX_ROWS = 60  # figures per benchmark in the report; every figure is in summary.json and raw/


def fmt(x):
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1e5:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.3g}" if a < 10 else f"{x:.1f}"
    return f"{x:.3g}"


def mean_sd(v):
    if v["n"] == 1:
        return fmt(v["mean"]) + " (1 run)"
    return f"{fmt(v['mean'])} ± {fmt(v['stddev'])}"


def load(v):
    return "/".join(f"{x:.2f}" for x in v)


def write(summary, pngs, out_dir):
    pk = summary["package"]
    lines = [
        "# moerl benchmark package",
        "",
        f"`moerl bench package` ({pk['mode']} form, {pk['repeats']} repeats per benchmark, "
        f"{pk['scenario_repeats']} per scenario), {pk['started_utc']} to {pk['finished_utc']}, "
        f"{pk['wall_s']:.0f} s on {pk['cpus']} CPUs.",
        "",
        f"- git commit: `{pk['git_commit']}`{' (tracked files modified)' if pk['git_dirty'] else ''}",
        f"- load average (1/5/15 min): {load(pk['load_start'])} at the start, "
        f"{load(pk['load_end'])} at the end; per run below. The machine is shared: a load above "
        f"the CPU count means the figures include waiting for a core.",
        "- Every figure is the mean ± sample standard deviation over the repeats of that "
        "benchmark in this package (each repeat a fresh process); p50/p99 are each run's own "
        "percentiles, averaged. The baseline column is the benchmark's own baseline measured in "
        "the same run (its rule: bench/package/figures.py BASELINES).",
        "- Raw JSON: `raw/<group>-<name>-<repeat>.json`, one per run; `summary.json` is what "
        "this report and the plots were made from.",
        "",
        "## Peers and model",
        "",
    ]
    for name, p in summary["peers"].items():
        what = {"mpi": "MPI `MPI_Alltoallv` peer (bench/ep, `moerl bench ep --peer mpi`; "
                       "bench/python_ep/mpi_alltoallv.c in the torch row)",
                "torch": "torch.distributed `all_to_all_single` peer (bench/python_ep)"}[name]
        lines.append(f"- {what}: {'ran' if p['present'] else 'ABSENT'} ({p['detail']})")
    m = summary["model"]
    if m.get("ran"):
        lines.append("- Scale model (bench/model/scale_model.py): ran; its report is "
                     "[model/model.md](model/model.md)")
        mdir = os.path.join(out_dir, m["dir"])
        for f in sorted(os.listdir(mdir)) if os.path.isdir(mdir) else []:
            if f.endswith(".png"):
                lines.append(f"  ![{f}](model/{f})")
    else:
        lines.append(f"- Scale model: not run ({m.get('why', '?')})")
    if summary.get("scenarios_left_out"):
        lines.append(f"- Scenarios not run in this form: {', '.join(summary['scenarios_left_out'])} "
                     "(the full package runs them all; CI runs each short form as sims_short_*)")
    lines += ["", "## Runs", "",
              "| run | exit | wall s | load before | load after | JSON |", "|---|---|---|---|---|---|"]
    for r in summary["runs"]:
        lines.append(f"| {r['group']} {r['name']} #{r['repeat']} | {r['rc']} | {r['wall_s']:.1f} | "
                     f"{load(r['load_before'])} | {load(r['load_after'])} | "
                     f"{r.get('raw', r.get('error', ''))} |")
    failed = [r for r in summary["runs"] if "error" in r]
    if failed:
        lines += ["", "**Failed runs**:", ""]
        for r in failed:
            tail = r.get("stderr_tail", "").strip().splitlines()[-3:]
            lines.append(f"- {r['group']} {r['name']} #{r['repeat']}: {r['error']} "
                         f"(`{' / '.join(tail)[:300]}`)")
    if pngs:
        lines += ["", "## Plots", ""]
        for p in pngs:
            lines.append(f"![{p}]({p})")
    for g in summary["groups"]:
        title = {"bench": f"`moerl bench {g['name']}`", "peer": f"peer: {g['name']}",
                 "scenario": f"scenario `{g['name']}` (short form)"}[g["group"]]
        lines += ["", f"## {title}", ""]
        if not g["figures"]:
            lines.append("No figures: every run failed (see Runs).")
            continue
        cmd = next((r["command"] for r in summary["runs"]
                    if r["group"] == g["group"] and r["name"] == g["name"]), [])
        lines.append(f"Command: `{' '.join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd))}` "
                     f"({g['repeats_ok']} runs with JSON).")
        if g["planes"]:
            lines += ["", "Planes and transports (from the runs' JSON):", ""]
            lines += [f"- {p}" for p in g["planes"]]
        prov = g.get("provenance") or {}
        if prov:
            keep = {k: prov[k] for k in ("commit", "build_type", "compiler", "caf", "gpu", "blas")
                    if k in prov}
            lines += ["", "Provenance: " + ", ".join(f"{k} {v}" for k, v in keep.items())]
        lines += ["", "| figure | mean ± sd | min .. max | baseline (same run) | baseline mean ± sd |",
                  "|---|---|---|---|---|"]
        for row in g["figures"][:MAX_ROWS]:
            v = row["value"]
            b = row.get("baseline", "")
            bv = mean_sd(row["baseline_value"]) if "baseline_value" in row else ""
            lines.append(f"| {row['figure']} | {mean_sd(v)} | {fmt(v['min'])} .. {fmt(v['max'])} | "
                         f"{b} | {bv} |")
        if len(g["figures"]) > MAX_ROWS:
            lines.append(f"\n{len(g['figures']) - MAX_ROWS} more figures in summary.json and raw/.")
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
