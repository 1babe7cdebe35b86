"""Loads inputs.json and resolves the inputs measured by moerl's own benchmarks.

An input of kind "bench" names its JSON file(s) and an extractor below; the value is read at
every run, so a new measurement changes the model's outputs without editing any number here.
A file name may be a glob: the value is then the median over the files it matches (the
validation sittings' benchmarks, bench/model/reference/*/, taken on a shared machine whose
load moves any one sitting 2-5x).
"""

import glob
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _median(values):
    if not values:
        raise ValueError("no values to take the median of")
    return statistics.median(values)


def _job_ep_row(doc, spec, path_prefix):
    for row in doc["results"]:
        if row.get("ranks") == spec.get("ranks") and row["path"].startswith(path_prefix):
            return row
    raise ValueError(f"no '{path_prefix}' row with ranks={spec.get('ranks')}")


EXTRACTORS = {
    "job_ep_generate_group_s":
        lambda d, s: _job_ep_row(d, s, "expert-parallel (rank threads")["generate_group_s"],
    "job_ep_max_new_tokens":
        lambda d, s: _job_ep_row(d, s, "expert-parallel (rank threads")["max_new_tokens"],
    "job_ep_train_member_processes_s":
        lambda d, s: _job_ep_row(d, s, "expert-parallel (member processes")["train_step_s"],
    "weights_deliver_p50_s": lambda d, s: next(
        p["deliver_s"]["p50"] for p in d["paths"]
        if p["path"] == s["path"] and p["transport"] == s["transport"] and p["readers"] == 1),
    "fleet_lease_rtt_p50_s": lambda d, s: d["steady"]["lease_rtt"]["p50_us"] * 1e-6,
    "ledger_fsync_append_p50_s": lambda d, s: _ledger_fsync_append_p50(d),
    "env_local_step_rtt_p50_s": lambda d, s: d["local"]["step_rtt"]["p50_us"] * 1e-6,
}


def _ledger_fsync_append_p50(doc):
    """The journaled cycle with fsync (appended segments): the median over runs of sync p50."""
    cycle = doc["lease_cycle_journaled_fsync"]
    if not cycle.get("fsync") or not cycle.get("journal", "").startswith("appended"):
        raise ValueError("lease_cycle_journaled_fsync is not the fsync + appended cycle")
    return cycle["sync_p50_us"]["median"] * 1e-6


def load_inputs(path=None):
    """Returns {name: entry}, each entry with a resolved 'value'."""
    path = path or os.path.join(HERE, "inputs.json")
    with open(path) as f:
        raw = json.load(f)
    inputs = {}
    for name, entry in raw.items():
        if name.startswith("_"):
            continue
        entry = dict(entry)
        for field in ("unit", "source", "kind"):
            if field not in entry:
                raise ValueError(f"input '{name}' has no {field}")
        if entry["kind"] == "bench":
            entry["value"] = resolve_bench(name, entry["bench"])
        elif "value" not in entry:
            raise ValueError(f"input '{name}' has no value")
        inputs[name] = entry
    return inputs


def bench_files(name, spec):
    files = []
    for pattern in spec["files"]:
        found = sorted(glob.glob(os.path.join(REPO, pattern)))
        if not found:
            raise ValueError(f"input '{name}': no bench file matches {pattern}")
        files += found
    return files


def resolve_bench(name, spec):
    extract = EXTRACTORS.get(spec["extract"])
    if extract is None:
        raise ValueError(f"input '{name}': unknown extractor '{spec['extract']}'")
    values = []
    for full in bench_files(name, spec):
        with open(full) as f:
            values.append(extract(json.load(f), spec))
    return _median(values)


def values(inputs):
    return {k: v["value"] for k, v in inputs.items()}
