#!/usr/bin/env python3
"""moerl's scale model: `python3 bench/model/scale_model.py --out DIR [--quick]`.

Writes DIR/model.json (every output, the inputs used with their sources, provenance),
DIR/model.md (the answer, tables, validation) and DIR/throughput.png, DIR/ettr.png,
DIR/weights.png. `moerl bench package` calls exactly this. --quick: fewer sweep points and
seeds (well under a minute on 2 cores)."""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import plots  # noqa: E402  (matplotlib)
except ImportError as e:
    sys.exit(f"scale_model: {e}: the plots need matplotlib (Debian: python3-matplotlib, "
             "scripts/install-deps.sh; run it with /usr/bin/python3)")
import answer  # noqa: E402
import calibrate  # noqa: E402
import report  # noqa: E402
import sweeps  # noqa: E402
import validate  # noqa: E402


def provenance(started):
    try:
        commit = subprocess.run(["git", "-C", calibrate.REPO, "describe", "--always", "--dirty",
                                 "--abbrev=12"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"git_commit": commit,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "host": platform.node(), "seconds": time.time() - started}


def build(quick):
    started = time.time()
    inputs = calibrate.load_inputs()
    v = calibrate.values(inputs)
    out = {"quick": quick, "inputs": inputs}
    out["fleets"] = sweeps.fleets(v)
    out["answer"] = answer.waterfall(v, quick)
    out["answer_variants"] = {
        "S3 pull instead of fan-out": answer.waterfall(v, quick, weights="store"),
        "pplx-garden EFA latencies instead of UCCL-EP": answer.waterfall(v, quick, table="ep_ll_efa_pplx"),
        "no environment execution": answer.waterfall(dict(v, env_seconds_per_sample=0.0), quick),
    }
    out["throughput"] = sweeps.throughput(v, quick)
    out["ettr"] = {f"replacement {r:g} s": sweeps.ettr(v, quick, replacement_s=r)
                   for r in ([v["replacement_s"]] if quick else [300, v["replacement_s"], 1200])}
    out["ettr"][f"replacement {v['replacement_s']:g} s, warm spare trainer instance"] = \
        sweeps.ettr(v, quick, trainer_spare=True)
    out["weights"] = sweeps.weights(v, quick)
    out["validation"] = validate.validate()
    out["provenance"] = provenance(started)
    return out


def write(out, directory):
    os.makedirs(directory, exist_ok=True)
    plots.throughput(out["throughput"], out["answer"]["published_gain"],
                     os.path.join(directory, "throughput.png"))
    plots.ettr(out["ettr"], os.path.join(directory, "ettr.png"))
    plots.weights(out["weights"], os.path.join(directory, "weights.png"))
    out["provenance"]["seconds"] = out["provenance"]["seconds"]
    with open(os.path.join(directory, "model.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    with open(os.path.join(directory, "model.md"), "w") as f:
        f.write(report.markdown(out))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for model.json, model.md, *.png")
    parser.add_argument("--quick", action="store_true", help="fewer sweep points and seeds")
    args = parser.parse_args(argv)
    try:
        out = build(args.quick)
    except (ValueError, KeyError, OSError) as e:
        print(f"scale_model: {e}", file=sys.stderr)
        return 2
    write(out, args.out)
    a = out["answer"]["steps"]
    print(f"scale_model: wrote {args.out}/model.md ({out['provenance']['seconds']:.1f} s); "
          f"at 48 instances the specialised EP layer keeps {100 * a[-2]['gain']:+.1f}% on the "
          f"rollout side and {100 * a[-1]['gain']:+.1f}% end to end of the published +40%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
