"""The model's sweeps: rollout throughput (specialised EP vs generic all-to-all), ETTR against
the Spot interruption rate, weight redistribution against model and fleet size."""

import statistics

import costs_cluster as cc
from scenarios import fleet, simulate

SIZES = ("seed", "large")


def _points(quick):
    if quick:
        return {
            "top_k": [1, 4, 8, 16],
            "tokens_per_gpu": [8, 32, 128],
            "env_s": [0, 10, 60, 300],
            "generation_tokens": [256, 4096, 16384],
        }
    return {
        "top_k": [1, 2, 4, 6, 8, 12, 16],
        "tokens_per_gpu": [4, 8, 16, 32, 64, 128, 256],
        "env_s": [0, 2, 5, 10, 30, 60, 120, 300],
        "generation_tokens": [256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
    }


def throughput(v, quick):
    """Per swept parameter and fleet size: samples/s of both EP layers, with the rollout side
    alone (trainer never waits on) and end to end (the trainer group included)."""
    out = {}
    iterations = 3 if quick else 5
    for param, values in _points(quick).items():
        rows = []
        for size in SIZES:
            for x in values:
                row = {"size": size, param: x}
                for ep in ("specialised", "generic"):
                    for mode, rollout_only in (("rollout", True), ("end_to_end", False)):
                        f = simulate(v, size, ep, iterations=iterations,
                                     rollout_only=rollout_only, **{param: x})
                        row[f"{mode}_{ep}_samples_per_s"] = f["samples_per_s_steady"]
                        if mode == "end_to_end":
                            row[f"{ep}_iteration_s"] = f["iteration_s_median"]
                            row[f"{ep}_wave_s"] = f["wave_s"]
                            row["train_s"] = f["train_s"]
                for mode in ("rollout", "end_to_end"):
                    row[f"{mode}_gain"] = (row[f"{mode}_specialised_samples_per_s"] /
                                           row[f"{mode}_generic_samples_per_s"] - 1.0)
                rows.append(row)
        out[param] = rows
    return out


def ettr(v, quick, replacement_s=None, rates=None, trainer_spare=False):
    """ETTR = the run's time without interruptions / its time with them, same iterations,
    mean over seeds (the seed fleet, specialised EP, fan-out)."""
    rates = rates or ([0.0, 0.05, 0.1, 0.2] if quick else [0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3])
    seeds = 3 if quick else 12
    iterations = 30 if quick else 80
    w = dict(v)
    if replacement_s is not None:
        w["replacement_s"] = replacement_s
    ideal = simulate(w, "seed", iterations=iterations)
    rows = []
    for rate in rates:
        runs = [simulate(w, "seed", iterations=iterations, spot_rate=rate, seed=s,
                         trainer_spare=trainer_spare)
                for s in range(1, (seeds if rate > 0 else 1) + 1)]
        ratios = [ideal["wall_s"] / r["wall_s"] for r in runs]
        rows.append({
            "rate_per_hour": rate, "ettr_mean": statistics.mean(ratios),
            "ettr_min": min(ratios), "ettr_max": max(ratios), "seeds": len(runs),
            "interruptions_mean": statistics.mean(len(r["interruptions"]) for r in runs),
            "returned_units_mean": statistics.mean(
                r["accounting"].get("returned_units", 0) for r in runs),
            "lost_work_s_mean": statistics.mean(r["accounting"].get("lost_work_s", 0.0) for r in runs),
            "hours": statistics.mean(r["wall_s"] for r in runs) / 3600,
        })
    return {"iterations": iterations, "replacement_s": w["replacement_s"],
            "trainer_spare": trainer_spare,
            "ideal_wall_s": ideal["wall_s"], "rows": rows}


def weights(v, quick):
    """Redistribution time of one version to every rollout instance: the fan-out tree vs
    every instance pulling its shard from S3 (after the trainer's PUT)."""
    params = [7e9, 70e9, 671e9, 2e12] if quick else [7e9, 30e9, 70e9, 235e9, 671e9, 1e12, 2e12]
    instances = [4, 8, 16, 32, 64, 128, 256] if quick else [4, 8, 16, 32, 64, 128, 256, 512, 1024]
    per_replica = max(1, v["rollout_ep_gpus"] // v["gpus_per_instance"])
    rows = []
    for p in params:
        shard = p * v["rollout_weight_bytes_per_param"] / per_replica
        for n in instances:
            replicas = max(1, n // per_replica)
            put = p * v["rollout_weight_bytes_per_param"] / min(
                v["seed_trainer_instances"] * v["s3_bytes_per_s_per_instance"],
                v["s3_put_per_s_per_prefix"] * v["s3_range_bytes"] * v["store_prefixes_per_version"])
            rows.append({"params": p, "rollout_instances": n, "shard_bytes": shard,
                         "fanout_s": cc.fanout_s(v, shard, replicas),
                         "store_s": put + cc.store_get_s(v, shard, n),
                         "store_get_s": cc.store_get_s(v, shard, n), "store_put_s": put})
    return {"fanout_efficiency": cc.fanout_efficiency(v), "rows": rows}


def fleets(v):
    return {size: dict(zip(("trainer_instances", "rollout_instances"), fleet(v, size)))
            for size in SIZES}
