"""Validation on this machine: the model configured as the default `moerl up` predicts the
iteration time of the real runs kept in bench/model/reference/<sitting>/ (measure_box.sh).
The prediction uses the benchmark JSON of the sittings (medians over them) and the shared
bench files named in inputs.json, never the runs' own timings."""

import json
import os
import statistics

import calibrate
from costs_box import BoxCosts
from iteration import Job, Run

REFERENCE = os.path.join(calibrate.HERE, "reference")
# The error the validation claims (and tests): the predicted median iteration time within
# this factor of the measured one in every sitting, either way. Wide because this machine is
# shared: the same benchmark moves 2-5x between sittings minutes apart, and moerl up's runs
# 2x (README.md, "Validation").
STATED_FACTOR = 2.0


def sittings():
    return sorted(d for d in os.listdir(REFERENCE)
                  if os.path.exists(os.path.join(REFERENCE, d, "up_report.json")))


def measured(sitting):
    with open(os.path.join(REFERENCE, sitting, "up_report.json")) as f:
        report = json.load(f)
    ends = [it["end_unix_ms"] for it in report["iterations"]]
    periods = [(b - a) / 1000.0 for a, b in zip(ends, ends[1:])]
    with open(os.path.join(REFERENCE, sitting, "load.txt")) as f:
        load = [line.split() for line in f if line.strip()]
    return {"iterations": len(ends), "median_s": statistics.median(periods),
            "mean_s": statistics.mean(periods), "load": {l[0]: float(l[2]) for l in load},
            "commit": report.get("provenance", {}).get("commit")}


def predict(iterations=100):
    inputs = calibrate.load_inputs()
    v = calibrate.values(inputs)
    job = Job(iterations=iterations, units_per_iteration=v["box_units_per_iteration"],
              groups_per_unit=v["box_groups_per_unit"], group_size=v["box_group_size"],
              lease_units=v["box_lease_batch"], claim_groups=v["box_trainer_batch_groups"],
              max_staleness=v["max_staleness"])
    run = Run(job, BoxCosts(v), rollouts=1, rollout_instances_each=2,
              shared_host_cores=v["box_cores"])
    fig = run.run()
    periods = fig["iteration_s"][1:]  # the first includes the start
    return {"median_s": statistics.median(periods), "mean_s": statistics.mean(periods),
            "inputs": {k: inputs[k]["value"] for k in inputs if k.startswith("box_")}}


def validate():
    rows = []
    p = predict()
    for s in sittings():
        m = measured(s)
        rows.append({"sitting": s, "measured": m, "predicted": p,
                     "error": (p["median_s"] - m["median_s"]) / m["median_s"]})
    return {"stated_factor": STATED_FACTOR, "sittings": rows, "predicted": p,
            "max_abs_error": max(abs(r["error"]) for r in rows) if rows else None,
            "median_abs_error": statistics.median(abs(r["error"]) for r in rows) if rows else None}


def within(row):
    ratio = row["predicted"]["median_s"] / row["measured"]["median_s"]
    return 1.0 / STATED_FACTOR <= ratio <= STATED_FACTOR


if __name__ == "__main__":
    out = validate()
    for r in out["sittings"]:
        print(r["sitting"], "measured", round(r["measured"]["median_s"], 4), "predicted",
              round(r["predicted"]["median_s"], 4), "error", round(r["error"], 3), r["measured"]["load"])
