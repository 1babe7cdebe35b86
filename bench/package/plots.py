"""The package's PNG plots (matplotlib, Agg), drawn from summary.json alone.

- one per group with p50/p99 latency figures: each figure's mean with its stddev over the
  repeats as an error bar, beside its same-run baseline where it has one (log scale);
- one per group with rates (per second, GB/s): the same, linear within the group;
- scenarios.png: each scenario's mean iteration time and trainer stall beside its baseline;
- runs.png: every run's wall time, coloured by the load average before it.
"""

import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LATENCY = re.compile(r"(p50|p99)(_us|_ms|_s)?$|_p(50|99)_us$")
RATE = re.compile(r"_per_s$|gbps$|gflops$|^units_per_s$")
MAX_BARS = 16


def _short(path):
    # The identifying keys' names are the long part of a label; their values say enough.
    for key in ("version_bytes=", "transport=", "readers=", "bytes=", "mode=", "name=", "path=",
                "impl=", "op=", "ranks=", "tokens="):
        path = path.replace(key, "")
    return path if len(path) <= 64 else "…" + path[-63:]


def _bars(ax, rows, log):
    labels = [_short(r["figure"]) for r in rows]
    y = range(len(rows))
    means = [r["value"]["mean"] for r in rows]
    sds = [r["value"]["stddev"] for r in rows]
    ax.barh([i + 0.2 for i in y], means, height=0.4, xerr=sds, label="figure", color="#3b75af")
    bm = [r["baseline_value"]["mean"] if "baseline_value" in r else 0 for r in rows]
    bs = [r["baseline_value"]["stddev"] if "baseline_value" in r else 0 for r in rows]
    if any(bm):
        ax.barh([i - 0.2 for i in y], bm, height=0.4, xerr=bs, label="baseline (same run)",
                color="#e1812c")
        ax.legend(fontsize=7)
    ax.set_yticks(list(y))
    ax.set_yticklabels(labels, fontsize=6)
    ax.invert_yaxis()
    if log and all(m > 0 for m in means):
        ax.set_xscale("log")


def _plot(rows, title, xlabel, path, log):
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.32 * len(rows)))
    _bars(ax, rows, log)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def make_all(summary, out_dir):
    made = []
    for g in summary["groups"]:
        figs = g["figures"]
        n = summary["package"]["repeats"] if g["group"] != "scenario" else \
            summary["package"]["scenario_repeats"]
        for kind, rx, unit, log in (("latency", LATENCY, None, True),
                                    ("rates", RATE, "per second / GB/s", False)):
            # A row that is another row's baseline is drawn beside that row, not again.
            bases = {r.get("baseline") for r in figs}
            rows = [r for r in figs if rx.search(r["figure"]) and r["figure"] not in bases]
            rows = rows[:MAX_BARS]
            if not rows:
                continue
            if unit is None:  # one unit per plot: the most common of the latency rows
                units = [m.group(2) or "" for r in rows
                         if (m := re.search(r"(p50|p99)(_us|_ms|_s)?", r["figure"]))]
                u = max(set(units), key=units.count) if units else "_us"
                rows = [r for r in rows if r["figure"].endswith(u) or f"{u}." in r["figure"]
                        or (u == "_us" and "_us." in r["figure"])] or rows
                unit = {"_us": "µs", "_ms": "ms", "_s": "s"}.get(u, "")
            name = f"{g['group']}-{g['name']}-{kind}.png"
            _plot(rows, f"{g['group']} {g['name']}: {kind} (mean ± sd over {n} runs)",
                  unit, os.path.join(out_dir, name), log)
            made.append(name)
    scen = [g for g in summary["groups"] if g["group"] == "scenario" and g["figures"]]
    if scen:  # every scenario's iteration time and trainer stall beside its fault-free run
        fig, axes = plt.subplots(1, 2, figsize=(10, 1.5 + 0.4 * len(scen)))
        for ax, fig_name, unit in ((axes[0], "mean_iteration_s", "mean iteration s"),
                                   (axes[1], "trainer_stall_s", "trainer stall s")):
            rows = []
            for g in scen:
                row = next((r for r in g["figures"] if r["figure"] == fig_name), None)
                if row:
                    rows.append(dict(row, figure=g["name"]))
            if rows:
                _bars(ax, rows, log=False)
            ax.set_xlabel(unit, fontsize=8)
        fig.suptitle("scenario short forms: fault run vs its fault-free baseline "
                     f"({summary['package']['scenario_repeats']} run each)", fontsize=9)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "scenarios.png"), dpi=80)
        plt.close(fig)
        made.append("scenarios.png")
    runs = summary["runs"]
    if runs:
        fig, ax = plt.subplots(figsize=(8, 1.2 + 0.22 * len(runs)))
        loads = [r["load_before"][0] for r in runs]
        cmap = plt.get_cmap("viridis")
        top = max(loads + [1.0])
        ax.barh(range(len(runs)), [r["wall_s"] for r in runs],
                color=[cmap(x / top) for x in loads])
        ax.set_yticks(range(len(runs)))
        ax.set_yticklabels([f"{r['group']} {r['name']} #{r['repeat']}" for r in runs], fontsize=6)
        ax.invert_yaxis()
        ax.set_xlabel("wall s (colour: 1-min load average before the run, max "
                      f"{top:.1f})", fontsize=8)
        ax.set_title("every run of the package", fontsize=9)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "runs.png"), dpi=80)
        plt.close(fig)
        made.append("runs.png")
    return made
