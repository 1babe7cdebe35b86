"""The scale model's simulation core and iteration protocol, on cases computed by hand."""

import math

import pytest

import calibrate
import costs_cluster as cc
from des import Host, Simulator
from iteration import Job, Run, Spot


def test_events_run_in_time_order_and_ties_in_scheduling_order():
    sim, seen = Simulator(), []
    sim.schedule(2.0, seen.append, "a")
    sim.schedule(1.0, seen.append, "b")
    sim.schedule(1.0, seen.append, "c")
    cancelled = sim.schedule(0.5, seen.append, "x")
    Simulator.cancel(cancelled)
    sim.run()
    assert seen == ["b", "c", "a"]
    assert sim.now == 2.0
    with pytest.raises(ValueError):
        sim.schedule(-1.0, seen.append, "past")


def test_host_shares_its_cores_between_jobs():
    sim, done = Simulator(), {}
    one_core = Host(sim, 1)
    one_core.submit(1.0, 1, lambda: done.setdefault("a", sim.now))
    one_core.submit(1.0, 1, lambda: done.setdefault("b", sim.now))
    two_cores = Host(sim, 2)
    two_cores.submit(1.0, 1, lambda: done.setdefault("c", sim.now))
    two_cores.submit(1.0, 1, lambda: done.setdefault("d", sim.now))
    sim.run()
    assert done == {"a": 2.0, "b": 2.0, "c": 1.0, "d": 1.0}


def test_host_job_arriving_midway_slows_the_first():
    sim, done = Simulator(), {}
    host = Host(sim, 1)
    host.submit(1.0, 1, lambda: done.setdefault("first", sim.now))
    sim.schedule(0.5, lambda: host.submit(0.25, 1, lambda: done.setdefault("second", sim.now)))
    sim.run()
    # 0.5 s alone, then both at half speed: the second's 0.25 s takes 0.5 s (until 1.0),
    # the first has 0.25 s left at 1.0 and finishes alone at 1.25.
    assert done == {"second": 1.0, "first": 1.25}


class FixedCosts:
    """Powers of two, so every time below is exact in floating point."""
    generate_threads = 1
    train_threads = 1
    lease_retry_s = 0.125

    def generate(self, samples):
        return 1.0

    def ledger_op(self):
        return 0.125

    def claim_op(self):
        return 0.125

    def reward(self, samples):
        return 0.0

    def train(self, samples):
        return 2.0

    def publish(self):
        return 0.5

    def redistribute(self, index, count):
        return 0.25

    def join_weights(self, count):
        return 0.0625

    def trainer_restore(self):
        return 0.0


def hand_job():
    return Job(iterations=3, units_per_iteration=2, groups_per_unit=1, group_size=1,
               lease_units=2, claim_groups=2, max_staleness=1)


def test_one_rollout_fixed_costs_gives_the_hand_computed_iteration_times():
    # t=0.125 lease iteration 1 (iteration 2 opens), generate until 1.125, committed 1.25;
    # claim until 1.375, train until 3.375, publish: version 1 at 3.875. Iteration 2 was
    # generated 1.25-2.25 and committed at 2.375: claim 4.0, train 6.0, version 2 at 6.5.
    # Iteration 3 opens at 3.875 (version 1); the waiting rollout's ask lands then, it waits
    # for version 1 (needs >= 3-1-1) until 4.125, generates until 5.125: version 3 at 9.125.
    run = Run(hand_job(), FixedCosts(), rollouts=1)
    fig = run.run()
    assert [e["end_s"] for e in run.iteration_log] == [3.875, 6.5, 9.125]
    assert fig["accounting"]["committed_units"] == 6
    assert fig["samples_generated"] == 6


def test_interruption_returns_the_leased_units_and_counts_the_lost_work():
    run = Run(hand_job(), FixedCosts(), rollouts=1,
              spot=Spot(rate_per_hour=0.0, notice_s=0.25, replacement_s=1.0))
    records = []
    # At 0.5 the rollout is 0.375 s into its 1 s batch: 0.625 s left > the 0.25 s notice.
    run.sim.at(0.5, lambda: records.append(run.notice(run.rollouts[0])))
    fig = run.run()
    assert records[0]["returned_units"] == 2
    assert records[0]["lost_work_s"] == 0.375
    assert fig["accounting"]["returned_units"] == 2
    # every unit committed exactly once: none lost, none twice
    assert fig["accounting"]["committed_units"] == 6
    assert fig["iterations_done"] == 3


def test_a_batch_that_fits_in_the_notice_finishes_and_returns_nothing():
    run = Run(hand_job(), FixedCosts(), rollouts=1,
              spot=Spot(rate_per_hour=0.0, notice_s=1.0, replacement_s=1.0))
    records = []
    run.sim.at(0.5, lambda: records.append(run.notice(run.rollouts[0])))
    fig = run.run()
    assert records[0]["returned_units"] == 0 and records[0]["lost_work_s"] == 0.0
    assert fig["accounting"]["committed_units"] == 6


def test_random_interruptions_keep_the_books():
    v = calibrate.values(calibrate.load_inputs())
    from scenarios import simulate
    fig = simulate(v, "seed", iterations=20, spot_rate=0.3, seed=3)
    acct = fig["accounting"]
    assert fig["interruptions"], "a 30%/h rate over hours must interrupt"
    assert fig["iterations_done"] == 20
    assert acct["committed_units"] == acct["opened_units"]
    assert acct["leased_units"] == acct["opened_units"] + acct.get("returned_units", 0)


def test_fanout_grows_with_log_fleet_and_store_pull_with_fleet():
    v = calibrate.values(calibrate.load_inputs())
    shard = 64e9
    fan = [cc.fanout_s(v, shard, 2 ** k) for k in range(1, 11)]
    steps = [b - a for a, b in zip(fan, fan[1:])]
    # doubling the fleet adds one tree level: the same small increment each time
    assert max(steps) == pytest.approx(min(steps), rel=1e-9) and steps[0] > 0
    assert fan[-1] < 1.01 * fan[0]
    store = [cc.store_get_s(v, shard, 2 ** k) for k in range(4, 11)]
    for a, b in zip(store, store[1:]):
        assert b == pytest.approx(2 * a)  # past the per-instance limit: linear in the fleet
    prefix = v["s3_get_per_s_per_prefix"] * v["s3_range_bytes"]
    assert store[-1] == pytest.approx(1024 * shard / prefix)
    assert math.isclose(cc.fanout_efficiency(v), 62.5e9 / 400e9 / 1.3)


def test_trainer_notice_abandons_a_step_that_cannot_publish_in_time_and_redoes_it():
    # The step runs 1.375-3.375; a notice at 2.0 leaves 1.375 s + 0.5 s publish > 0.25 s:
    # abandoned (0.625 s lost), the group is back at 3.0 with its claimed groups, steps
    # 3.0-5.0, version 1 at 5.5. Iteration 2 (committed at 2.375): 5.625-7.625, version 2
    # at 8.125. Iteration 3 opens at 5.5; the rollout's ask lands at 5.625, version 1 arrives
    # at 5.75, generation until 6.75; its step 8.25-10.25, version 3 at 10.75.
    run = Run(hand_job(), FixedCosts(), rollouts=1,
              spot=Spot(rate_per_hour=0.0, notice_s=0.25, replacement_s=1.0))
    records = []
    run.sim.at(2.0, lambda: records.append(run.notice(run.trainer)))
    fig = run.run()
    assert records[0]["lost_work_s"] == 0.625
    assert [e["end_s"] for e in run.iteration_log] == [5.5, 8.125, 10.75]
    assert fig["accounting"]["committed_units"] == 6
