"""The RL iteration as a discrete-event simulation: a coordinator leasing work units, rollout
model instances generating them (decode steps with the EP exchange, environment, reward), a
trainer group taking one step per iteration and publishing the version, the version's
redistribution to the rollout instances, and Spot interruptions with notices and replacements.

The costs of each activity come from a `costs` object (costs_box.py for this machine,
costs_cluster.py for p5en fleets); this file is only the protocol, which follows moerl's:
- the coordinator keeps one iteration of work ahead of the trainer: it opens iteration n+1's
  units when the queue ran dry and the trainer has published version n-1
  (actors/coordinator_core.cpp, maybe_open_iteration);
- a rollout instance leases `lease_units` units at a time and generates them as one batch on
  the newest version it holds; a unit of iteration n may be generated on version
  >= n-1-max_staleness (older samples would be dropped at admission), so an instance waits for
  the redistribution of a newer version when it must;
- every lease, unit report and trainer claim is one durable coordinator operation;
- the trainer claims groups as they are ready (up to claim_groups per claim), steps when it
  holds an iteration's worth, publishes, and the version reaches each instance after the
  redistribution time;
- a Spot notice drains the instance's whole model instance (a rollout EP group, or the trainer
  group): the batch in progress finishes if it fits before the reclaim, else it is abandoned
  and its units return to the queue (counted with the work lost); units leased but not
  started return at once. The instance is back when its replacement has joined and holds the
  current version. Lost work is therefore bounded by one lease batch per interrupted instance.
"""

import collections
import random

from des import Host, Simulator


class Unit:
    __slots__ = ("iteration", "index", "attempt")

    def __init__(self, iteration, index):
        self.iteration = iteration
        self.index = index
        self.attempt = 0


class Job:
    """Shape of the job: how many units an iteration has and how they are batched."""

    def __init__(self, iterations, units_per_iteration, groups_per_unit, group_size, lease_units,
                 claim_groups, max_staleness=1):
        self.iterations = iterations
        self.units_per_iteration = units_per_iteration
        self.groups_per_unit = groups_per_unit
        self.group_size = group_size
        self.lease_units = lease_units
        self.claim_groups = claim_groups
        self.max_staleness = max_staleness

    @property
    def samples_per_unit(self):
        return self.groups_per_unit * self.group_size

    @property
    def groups_per_iteration(self):
        return self.units_per_iteration * self.groups_per_unit


class Spot:
    """Spot interruptions: each instance is interrupted at `rate_per_hour` (Poisson)."""

    def __init__(self, rate_per_hour, notice_s, replacement_s, seed=1, trainer_replacement_s=None):
        self.rate_per_hour = rate_per_hour
        self.notice_s = notice_s
        self.replacement_s = replacement_s
        # A warm spare trainer instance joins at the reclaim instead of being launched.
        self.trainer_replacement_s = (replacement_s if trainer_replacement_s is None
                                      else trainer_replacement_s)
        self.seed = seed


class Rollout:
    """One rollout model instance (an EP group over `instances` machines)."""

    def __init__(self, sim, name, host, instances):
        self.sim = sim
        self.name = name
        self.host = host
        self.instances = instances
        self.state = "idle"  # idle, leasing, waiting_work, waiting_weights, generating, down
        self.version = 0
        self.units = []
        self.job_id = None
        self.job_started = 0.0
        self.draining = False
        self.incarnation = 0


class Trainer:
    def __init__(self, host, instances):
        self.host = host
        self.instances = instances
        self.state = "claiming"  # claiming, training, publishing, down
        self.claimed = 0
        self.claim_in_flight = False
        self.job_id = None
        self.draining = False
        self.wait_started = 0.0
        self.step_started = 0.0


class Run:
    """One simulated run; run() returns its figures (per-iteration times, accounting)."""

    def __init__(self, job, costs, rollouts, trainer_instances=1, rollout_instances_each=1,
                 shared_host_cores=None, spot=None, max_time=float("inf")):
        self.sim = Simulator()
        self.job = job
        self.costs = costs
        self.spot = spot
        self.max_time = max_time
        if shared_host_cores is not None:  # one machine: every node shares its cores
            shared = Host(self.sim, shared_host_cores, "box")
            hosts = [shared] * rollouts
            trainer_host = shared
        else:  # each instance's GPUs are its own
            hosts = [Host(self.sim, costs.generate_threads, f"rollout-{i}") for i in range(rollouts)]
            trainer_host = Host(self.sim, costs.train_threads, "trainer")
        self.rollouts = [Rollout(self.sim, f"rollout-{i}", hosts[i], rollout_instances_each)
                         for i in range(rollouts)]
        self.trainer = Trainer(trainer_host, trainer_instances)
        self.pending = collections.deque()
        self.waiters = []
        self.iterations_opened = 0
        self.policy_version = 0
        self.ready_groups = collections.defaultdict(int)  # iteration -> groups committed
        self.done = False
        # figures
        self.iteration_log = []
        self.acct = collections.Counter()
        self.interruptions = []
        self.samples_generated = 0
        self.generate_busy_s = 0.0
        self.open_iteration()

    # --- coordinator -------------------------------------------------------------------
    def open_iteration(self):
        self.iterations_opened += 1
        n = self.iterations_opened
        for u in range(self.job.units_per_iteration):
            self.pending.append(Unit(n, u))
        self.acct["opened_units"] += self.job.units_per_iteration
        self.wake_waiters()

    def maybe_open_iteration(self):
        if self.pending or self.iterations_opened >= self.job.iterations:
            return
        if self.policy_version + 1 >= self.iterations_opened:
            self.open_iteration()

    def request_lease(self, r):
        if r.state == "down" or r.draining:
            return
        r.state = "leasing"
        self.sim.schedule(self.costs.ledger_op(), self.grant_lease, r, r.incarnation)

    def grant_lease(self, r, incarnation):
        if r.incarnation != incarnation or r.state != "leasing":
            return
        if r.draining:  # the notice came while the lease was on its way: take nothing
            r.state = "drained"
            return
        self.maybe_open_iteration()
        if not self.pending:
            # moerl's rollout asks again after a pause (actors/rollout_role.cpp: 20 ms). The
            # failed asks change nothing, so rather than simulating each one the instance is
            # woken at the first ask that will find work (wake_waiters): the same times.
            r.state = "waiting_work"
            r.wait_since = self.sim.now
            self.waiters.append(r)
            return
        n = min(self.job.lease_units, len(self.pending))
        r.units = [self.pending.popleft() for _ in range(n)]
        self.acct["leased_units"] += n
        self.maybe_open_iteration()
        self.start_batch(r)

    def wake_waiters(self):
        """Work became pending: each waiting instance's next ask (every retry + round trip
        after its last empty answer) is granted."""
        period = self.costs.lease_retry_s + self.costs.ledger_op()
        waiters, self.waiters = self.waiters, []
        for r in waiters:
            if r.state != "waiting_work" or r.draining:
                continue
            first = r.wait_since + period  # the first retry's answer
            k = max(0, -(-(self.sim.now - first) // period))
            r.state = "leasing"
            self.sim.at(max(self.sim.now, first + k * period), self.grant_lease, r, r.incarnation)

    # --- rollout -------------------------------------------------------------------------
    def needed_version(self, r):
        newest = max(u.iteration for u in r.units)
        return max(0, newest - 1 - self.job.max_staleness)

    def start_batch(self, r):
        if r.version < self.needed_version(r):
            r.state = "waiting_weights"  # the version's arrival restarts the batch
            return
        r.state = "generating"
        samples = len(r.units) * self.job.samples_per_unit
        r.job_started = self.sim.now
        work = self.costs.generate(samples)
        r.job_id = r.host.submit(work, self.costs.generate_threads, lambda: self.batch_done(r))

    def batch_done(self, r):
        r.job_id = None
        units, r.units = r.units, []
        samples = len(units) * self.job.samples_per_unit
        self.samples_generated += samples
        self.generate_busy_s += self.sim.now - r.job_started
        r.state = "reporting"
        # Reward and the buffer hop happen on other nodes; the unit report is durable.
        delay = self.costs.reward(samples) + self.costs.ledger_op()
        self.sim.schedule(delay, self.units_committed, units)
        if r.draining:
            r.state = "drained"
        else:
            self.request_lease(r)

    def units_committed(self, units):
        for u in units:
            self.ready_groups[u.iteration] += self.job.groups_per_unit
            self.acct["committed_units"] += 1
        self.trainer_try_claim()

    def version_arrives(self, r, version, incarnation):
        if r.incarnation != incarnation or r.state == "down":
            return
        r.version = max(r.version, version)
        if r.state == "waiting_weights":
            self.start_batch(r)

    # --- trainer -------------------------------------------------------------------------
    def trainer_try_claim(self):
        t = self.trainer
        if t.state != "claiming" or t.claim_in_flight or self.done:
            return
        it = self.policy_version + 1
        need = self.job.groups_per_iteration - t.claimed
        available = self.ready_groups[it] - t.claimed
        if available <= 0 or available < min(self.job.claim_groups, need):
            return
        t.claim_in_flight = True
        take = min(self.job.claim_groups, need, available)
        self.sim.schedule(self.costs.claim_op(), self.claim_done, take)

    def claim_done(self, take):
        t = self.trainer
        t.claim_in_flight = False
        if t.state != "claiming":
            return
        t.claimed += take
        if t.claimed >= self.job.groups_per_iteration:
            self.start_step()
        else:
            self.trainer_try_claim()

    def start_step(self):
        t = self.trainer
        t.state = "training"
        t.step_started = self.sim.now
        t.buffer_s = self.sim.now - t.wait_started
        samples = self.job.groups_per_iteration * self.job.group_size
        t.job_id = t.host.submit(self.costs.train(samples), self.costs.train_threads, self.step_done)

    def step_done(self):
        t = self.trainer
        t.job_id = None
        t.state = "publishing"
        t.train_s = self.sim.now - t.step_started
        self.sim.schedule(self.costs.publish(), self.published)

    def published(self):
        t = self.trainer
        if t.state != "publishing":
            return
        self.policy_version += 1
        v = self.policy_version
        self.iteration_log.append({
            "iteration": v, "end_s": self.sim.now, "t_train": t.train_s,
            "t_buffer": t.buffer_s, "t_publish": self.sim.now - t.step_started - t.train_s,
            "t_step_total": self.sim.now - t.wait_started})
        t.claimed = 0
        t.wait_started = self.sim.now
        for i, r in enumerate(self.rollouts):
            self.sim.schedule(self.costs.redistribute(i, len(self.rollouts)), self.version_arrives,
                              r, v, r.incarnation)
        if v >= self.job.iterations:
            self.done = True
            return
        t.state = "down" if t.draining else "claiming"
        self.maybe_open_iteration()
        self.trainer_try_claim()

    # --- Spot ----------------------------------------------------------------------------
    def schedule_interruption(self, rng):
        instances = self.trainer.instances + sum(r.instances for r in self.rollouts)
        rate = self.spot.rate_per_hour * instances / 3600.0
        if rate <= 0:
            return
        self.sim.schedule(rng.expovariate(rate), self.interrupt, rng)

    def interrupt(self, rng):
        self.schedule_interruption(rng)
        if self.done:
            return
        # Pick the instance hit, weighted by how many machines each node spans.
        pick = rng.randrange(self.trainer.instances + sum(r.instances for r in self.rollouts))
        target = self.trainer
        if pick >= self.trainer.instances:
            pick -= self.trainer.instances
            for r in self.rollouts:
                if pick < r.instances:
                    target = r
                    break
                pick -= r.instances
        self.notice(target)

    def notice(self, target):
        """A Spot notice to one of `target`'s machines (the trainer or a rollout instance)."""
        record = {"at_s": self.sim.now, "node": "trainer" if target is self.trainer else target.name,
                  "returned_units": 0, "lost_work_s": 0.0}
        self.interruptions.append(record)
        if target is self.trainer:
            self.trainer_notice(record)
        else:
            self.rollout_notice(target, record)
        return record

    def rollout_notice(self, r, record):
        if r.state == "down" or r.draining:
            record["ignored"] = "already draining or down"
            return
        r.draining = True
        reclaim = self.sim.now + self.spot.notice_s
        if r.state == "generating":
            if self.sim.now + r.host.time_left(r.job_id) > reclaim:
                # cannot finish before the reclaim: abandon it, return its units
                r.host.abort(r.job_id)
                r.job_id = None
                record["lost_work_s"] = self.sim.now - r.job_started
                self.acct["lost_work_s"] += record["lost_work_s"]
                self.return_units(r, record)
                r.state = "drained"
        elif r.units:  # leased, not started (waiting for weights)
            self.return_units(r, record)
            r.state = "drained"
        elif r.state in ("idle", "waiting_work"):
            r.state = "drained"
        back = self.sim.now + max(self.spot.notice_s, self.spot.replacement_s)
        self.sim.at(reclaim, self.rollout_reclaimed, r, record)
        self.sim.at(back, self.rollout_replaced, r)

    def return_units(self, r, record):
        for u in r.units:
            u.attempt += 1
            self.pending.appendleft(u)
        record["returned_units"] += len(r.units)
        self.acct["returned_units"] += len(r.units)
        r.units = []
        self.wake_waiters()

    def rollout_reclaimed(self, r, record):
        if r.job_id is not None:  # still generating at the reclaim: should not happen
            r.host.abort(r.job_id)
            r.job_id = None
            self.return_units(r, record)
        r.state = "down"
        r.incarnation += 1

    def rollout_replaced(self, r):
        r.draining = False
        r.state = "waiting_weights_join"
        inc = r.incarnation
        # The replacement reads the current version before its first lease.
        self.sim.schedule(self.costs.join_weights(len(self.rollouts)), self.rollout_joined, r, inc)

    def rollout_joined(self, r, inc):
        if r.incarnation != inc:
            return
        r.version = self.policy_version
        r.state = "idle"
        self.request_lease(r)

    def trainer_notice(self, record):
        t = self.trainer
        if t.state == "down" or t.draining:
            record["ignored"] = "already draining or down"
            return
        t.draining = True
        reclaim = self.sim.now + self.spot.notice_s
        if t.state == "training":
            if self.sim.now + t.host.time_left(t.job_id) + self.costs.publish() > reclaim:
                t.host.abort(t.job_id)
                t.job_id = None
                record["lost_work_s"] = self.sim.now - t.step_started
                self.acct["lost_work_s"] += record["lost_work_s"]
                t.state = "down"
        elif t.state == "claiming":
            t.state = "down"  # claimed groups stay in the buffer for the re-formed group
        back = self.sim.now + max(self.spot.notice_s, self.spot.trainer_replacement_s) + \
            self.costs.trainer_restore()
        self.sim.at(back, self.trainer_replaced)

    def trainer_replaced(self):
        t = self.trainer
        t.draining = False
        if t.state == "publishing":  # the step finished in the notice; let it publish
            return
        t.state = "claiming"
        t.claim_in_flight = False
        if t.claimed >= self.job.groups_per_iteration:
            self.start_step()
        else:
            self.trainer_try_claim()

    # --- run -----------------------------------------------------------------------------
    def run(self):
        if self.spot is not None and self.spot.rate_per_hour > 0:
            self.schedule_interruption(random.Random(self.spot.seed))
        for r in self.rollouts:
            self.request_lease(r)
        self.sim.run(until=self.max_time, stop=lambda: self.done)
        return self.figures()

    def figures(self):
        ends = [e["end_s"] for e in self.iteration_log]
        periods = [b - a for a, b in zip([0.0] + ends, ends)]
        return {
            "iterations_done": len(ends),
            "wall_s": ends[-1] if ends else self.sim.now,
            "iteration_s": periods,
            "samples_generated": self.samples_generated,
            "accounting": dict(self.acct),
            "interruptions": self.interruptions,
            "events": self.sim.events_run,
        }
