"""Runs the iteration simulation for one p5en scenario and returns its figures."""

import statistics

from costs_cluster import ClusterCosts, Shape
from iteration import Job, Run, Spot


def fleet(v, size):
    """(trainer instances, rollout instances) for 'seed' (16 + 32) or 'large' (1,024 GPUs
    as 128 p5en split 1:2 like the seed)."""
    if size == "seed":
        return v["seed_trainer_instances"], v["seed_rollout_instances"]
    instances = v["large_accelerators"] // v["gpus_per_instance"]
    trainers = round(instances / 3)
    return trainers, instances - trainers


def simulate(v, size="seed", ep="specialised", iterations=4, spot_rate=0.0, seed=1,
             rollout_only=False, weights_free=False, trainer_spare=False,
             **shape_args):
    trainers, rollouts = fleet(v, size)
    tokens = shape_args.pop("tokens_per_gpu", None)
    shape = Shape(v, trainers, rollouts, ep=ep, tokens_per_gpu=1, **shape_args)
    if tokens is None:  # the job's samples spread over the rollout GPUs
        tokens = max(1, round(v["samples_per_iteration"] / (shape.replicas * shape.ep_gpus)))
    shape.tokens_per_gpu = tokens
    costs = ClusterCosts(shape)
    costs.train_free = rollout_only
    costs.weights_free = weights_free
    g = v["group_size"]
    wave_units = max(1, shape.wave_samples // g)
    job = Job(iterations=iterations, units_per_iteration=wave_units * shape.replicas,
              groups_per_unit=1, group_size=g, lease_units=wave_units,
              claim_groups=wave_units * shape.replicas, max_staleness=v["max_staleness"])
    spot = None
    if spot_rate > 0:
        spot = Spot(spot_rate, v["spot_notice_s"], v["replacement_s"], seed,
                    trainer_replacement_s=v["spot_notice_s"] if trainer_spare else None)
    run = Run(job, costs, rollouts=shape.replicas, trainer_instances=trainers,
              rollout_instances_each=shape.instances_per_replica, spot=spot)
    fig = run.run()
    samples = job.units_per_iteration * g
    periods = fig["iteration_s"]
    steady = periods[1:] if len(periods) > 1 else periods
    fig.update({
        "size": size, "ep": ep, "trainer_instances": trainers,
        "rollout_instances": shape.rollout_instances, "replicas": shape.replicas,
        "tokens_per_gpu": tokens, "samples_per_iteration": samples,
        "iteration_s_median": statistics.median(steady),
        "samples_per_s": samples * len(periods) / fig["wall_s"],
        "samples_per_s_steady": samples / statistics.mean(steady),
        "wave_s": costs.wave_s(tokens), "train_s": ClusterCosts(shape).train(samples),
        "redistribute_s": costs.redistribute(0, shape.replicas), "publish_s": costs.publish(),
    })
    return fig
