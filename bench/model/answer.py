"""The seed's question: at 48 instances (16 trainer + 32 rollout), how much of the +40%
rollout gain of a specialised EP layer survives once environment execution, weight
redistribution and a 5%/hour Spot interruption rate are counted.

Each step adds one thing to the one before and reports the specialised layer's throughput
over the generic all-to-all's (samples/s, the same simulated fleet)."""

import statistics

from costs_cluster import ClusterCosts, Shape
from scenarios import fleet, simulate


def _gain(v, seeds, iterations, **kw):
    rates = {}
    for ep in ("specialised", "generic"):
        runs = [simulate(v, "seed", ep, iterations=iterations, seed=s, **kw) for s in seeds]
        rates[ep] = statistics.mean(r["samples_per_s"] for r in runs)
    return rates["specialised"] / rates["generic"] - 1.0, rates


def waterfall(v, quick, weights="fanout", table="ep_ll_p5en_uccl"):
    spot_seeds = range(1, (3 if quick else 12) + 1)
    spot_iterations = 30 if quick else 80
    trainers, rollouts = fleet(v, "seed")
    steps = []
    # 1. the decode step alone, at the job's tokens per GPU
    spec = Shape(v, trainers, rollouts, "specialised", tokens_per_gpu=1, table=table)
    tokens = max(1, round(v["samples_per_iteration"] / (spec.replicas * spec.ep_gpus)))
    context = v["prompt_tokens"] + v["generation_tokens"] / 2
    d_spec = ClusterCosts(Shape(v, trainers, rollouts, "specialised", tokens_per_gpu=tokens, table=table))
    d_gen = ClusterCosts(Shape(v, trainers, rollouts, "generic", tokens_per_gpu=tokens, table=table))
    ratio = d_gen.decode_step_s(tokens, context) / d_spec.decode_step_s(tokens, context)
    steps.append({"step": f"decode step alone ({tokens} tokens/GPU, EP{spec.ep_gpus})",
                  "gain": ratio - 1.0})
    common = {"table": table, "weights": weights}
    plan = [
        ("rollout: prefill + decode, no environment, no weight redistribution",
         dict(rollout_only=True, weights_free=True, env_s=0.0)),
        (f"+ environment execution ({v['env_seconds_per_sample']:g} s per sample)",
         dict(rollout_only=True, weights_free=True)),
        (f"+ weight redistribution ({weights})", dict(rollout_only=True)),
        (f"+ Spot interruptions at {v['spot_rate_per_hour']:.0%}/hour per instance "
         f"(notice {v['spot_notice_s']:g} s, replacement {v['replacement_s']:g} s)",
         dict(rollout_only=True, spot_rate=v["spot_rate_per_hour"])),
        ("+ the trainer group (end to end: iterations per hour)",
         dict(spot_rate=v["spot_rate_per_hour"])),
    ]
    for label, kw in plan:
        spot = "spot_rate" in kw
        gain, rates = _gain(v, spot_seeds if spot else [1], spot_iterations if spot else 4,
                            **common, **kw)
        steps.append({"step": label, "gain": gain,
                      "specialised_samples_per_s": rates["specialised"],
                      "generic_samples_per_s": rates["generic"]})
    published = v["specialised_over_generic_gain"] - 1.0
    for s in steps:
        s["share_of_published_gain"] = s["gain"] / published
    return {"published_gain": published, "weights": weights, "table": table,
            "tokens_per_gpu": tokens, "steps": steps}
