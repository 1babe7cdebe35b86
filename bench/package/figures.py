"""The figures of a benchmark's JSON, as the package's report gives them (bench/package/README.md).

A benchmark's JSON is its own; this module reads any of them the same way: numeric leaves are
flattened into paths (list entries named by their identifying keys, e.g. `modes[mode=ll]`),
the figures are the leaves whose names say they are one (p50/p99, rates, bandwidths, ratios,
recovery and iteration times), and a figure's baseline is the path a per-bench rule maps it to
when that path exists in the same run's JSON. Nothing here measures or invents a number.
"""

import math
import re
import statistics

# Subtrees that hold settings, environment or raw samples, never a figure.
SKIP_KEYS = {"provenance", "config", "options", "policy", "load_average_start",
             "load_average_end", "host_load_average", "load_average", "shape", "command",
             "transport_mix", "total_us_spread", "targets", "targets_goal", "books"}
# Keys that name a list entry (a mode, an operation, a path), so repeats line up by meaning.
ID_KEYS = ("name", "mode", "op", "path", "k", "bytes", "ranks", "readers", "kind", "node",
           "tokens", "impl", "implementation", "source", "transport", "version_bytes", "units")
# Leaf names that are figures. `median` and `p50` of a {min, median, max, runs} summary take
# the summary's own name (ledger's units_per_s.median -> units_per_s).
FIGURE = re.compile(
    r"(^|_)(p50|p99)(_us|_ms|_s)?$|^(p50|p99)_us_per_unit$|_per_s$|^units_per_s$|gbps$|gflops$"
    r"|_over_|_vs_|^ratio_|^(baseline_)?(mean_)?iteration_s$|^(baseline_)?trainer_stall_(s|fraction)$"
    r"|^train_step_s$|^train_step_cpu_s$|^generate_group_s$"
    r"|^recovery_s$|_s_p50$|_s_p99$|^all_dead_s$|^back_to_full_s$|^steps_per_s$")
SUMMARY_CHILD = {"median", "p50"}
# String leaves that say which plane or transport carried a run (the report's provenance).
PLANE_KEYS = re.compile(r"transport|provider|fabric|plane|link|mpi_library|journal$|requester"
                        r"|^store$|^tls$|^path$|expert_exchange")


def _entry_label(entry, index):
    if isinstance(entry, dict):
        if isinstance(entry.get("name"), str):
            return f"[name={entry['name']}]"
        parts = [f"{k}={entry[k]}" for k in ID_KEYS
                 if k in entry and isinstance(entry[k], (str, int, float))
                 and not isinstance(entry[k], bool)]
        if parts:
            return "[" + ",".join(parts) + "]"
    return f"[{index}]"


def flatten(doc, prefix=""):
    """(path, number) for every numeric leaf outside SKIP_KEYS; lists of over 64 skipped."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            # A {runs: [...], repeats: N} summary's runs are the samples behind its figures.
            if key in SKIP_KEYS or (key == "runs" and "repeats" in doc):
                continue
            yield from flatten(value, f"{prefix}.{key}" if prefix else key)
    elif isinstance(doc, list):
        if len(doc) > 64:
            return
        for i, value in enumerate(doc):
            yield from flatten(value, prefix + _entry_label(value, i))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        if math.isfinite(float(doc)):
            yield prefix, float(doc)


def strings(doc, pattern, prefix=""):
    """(path, text) of every string leaf whose key matches `pattern` (the planes' provenance)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            path = f"{prefix}.{key}" if prefix else key
            if isinstance(value, str) and pattern.search(key) and value:
                yield path, value
            elif isinstance(value, (dict, list)) and key != "provenance":
                yield from strings(value, pattern, path)
    elif isinstance(doc, list) and len(doc) <= 64:
        for i, value in enumerate(doc):
            yield from strings(value, pattern, prefix + _entry_label(value, i))


def figures(doc):
    """{path: value} of the figures of one run's JSON."""
    out = {}
    for path, value in flatten(doc):
        leaf = re.split(r"[.\]]", path)[-1]
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        if leaf in SUMMARY_CHILD and parent and FIGURE.search(re.split(r"[.\]]", parent)[-1]):
            out[parent] = value
        elif "[" in leaf or leaf in {"min", "max", "mean", "samples", "n"} or "target" in leaf:
            continue
        elif FIGURE.search(leaf) and not re.search(r"\.runs\[\d+\]$", path):
            out[path] = value
    return out


# Per benchmark: (pattern, replacement) rules mapping a figure's path to its baseline's, tried
# in order; the first whose result is a figure of the same run is the baseline.
BASELINES = {
    "ep": [(r"modes\[mode=(normal|ll)\]", "modes[mode=baseline]")],
    "torch": [(r"impl=moerl_(normal|low_latency)\]", "impl=torch_all_to_all]")],
    "control": [(r"k=\d+\]", "k=1]")],
    "env": [(r"^netns\.", "local.")],
    "job-ep": [(r"results\[path=[^\]]*\]", "results[path=single-rank,ranks=1]")],
    "ledger": [(r"^lease_cycle_journaled_[a-z_]+\.", "lease_cycle_in_memory.")],
    "scenario": [(r"^(mean_iteration_s|trainer_stall_s|trainer_stall_fraction)$", r"baseline_\1")],
    "fleet": [(r"^(kill|notice)\.", "steady.")],
    # A checkpoint cache or the fan-out tree beside every reader pulling from the store.
    "weights": [(r"path=(cache|fanout),readers=(\d+),transport=\w+",
                 r"path=store_local,readers=\2,transport=file")],
}


def baseline_of(bench, path, run_figures):
    for pattern, repl in BASELINES.get(bench, []):
        candidate = re.sub(pattern, repl, path)
        if candidate != path and candidate in run_figures:
            return candidate
    return None


def summarize(values):
    """n, mean, stddev (sample; 0 for one run), min, max of one figure over the repeats."""
    n = len(values)
    return {"n": n, "mean": statistics.fmean(values),
            "stddev": statistics.stdev(values) if n > 1 else 0.0,
            "min": min(values), "max": max(values), "runs": values}


def aggregate(bench, docs):
    """The figures of `docs` (one JSON per repeat) with their baselines, over the repeats."""
    per_run = [figures(d) for d in docs]
    paths = []
    for f in per_run:
        paths.extend(p for p in f if p not in paths)
    out = []
    for path in paths:
        values = [f[path] for f in per_run if path in f]
        row = {"figure": path, "value": summarize(values)}
        bases = [f[b] for f in per_run if (b := baseline_of(bench, path, f)) is not None
                 and path in f]
        if bases:
            row["baseline"] = baseline_of(bench, path, next(f for f in per_run if path in f))
            row["baseline_value"] = summarize(bases)
        out.append(row)
    return out
