"""Step costs of moerl's default job on this machine (the validation profile).

Every figure is an input measured by moerl's own benchmarks (inputs.json, kind "bench"): the
generation of one prompt group and the trainer step from `moerl bench job-ep`, a version's
delivery from `moerl bench weights`, the coordinator's lease round trip from `moerl bench
fleet`, the durable ledger write from `moerl bench ledger`, a local ZeroMQ hop from `moerl
bench env`. The run's processes share the machine's cores (des.Host), which is where the
default run's generation and training slow each other down.
"""


class BoxCosts:
    def __init__(self, v):
        self.v = v
        self.generate_threads = v["box_generate_threads"]
        self.train_threads = v["box_train_threads"]
        self.group_size = v["box_group_size"]
        # One decode step of one prompt group, EP dispatch and combine included (the bench
        # times the whole group's generation through the 2-rank fabric group).
        self.decode_step_s = v["box_generate_group_s"] / v["box_decode_steps"]
        self.steps = int(v["box_decode_steps"])
        self.lease_retry_s = v["lease_retry_s"]

    def generate(self, samples):
        groups = samples / self.group_size
        return groups * sum(self.decode_step_s for _ in range(self.steps))

    def ledger_op(self):
        # A lease, unit report or trainer claim: a round trip to the coordinator and its fsync.
        return self.v["box_lease_rtt_s"] + self.v["box_ledger_fsync_s"]

    def claim_op(self):
        # The trainer asks a buffer shard for groups (a hop), then claims them (durable).
        return self.v["box_hop_s"] + self.ledger_op()

    def reward(self, samples):
        # rollout -> reward node -> buffer shard: two ZeroMQ hops (the verifier costs us).
        return 2 * self.v["box_hop_s"]

    def train(self, samples):
        return self.v["box_train_step_s"] * samples / 128.0  # the bench's step is 128 samples

    def publish(self):
        return self.v["box_publish_s"]

    def redistribute(self, index, count):
        return self.v["box_redistribute_s"]

    def join_weights(self, count):
        return self.v["box_redistribute_s"]

    def trainer_restore(self):
        return 0.0
