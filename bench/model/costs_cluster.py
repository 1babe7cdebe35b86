"""Step costs of an RL job on p5en instances (8 H200, EFA), from published figures.

- A decode step on a rollout GPU: reading its weights and the KV cache from HBM (or its
  FLOPs, whichever is longer), then, per MoE layer, one EP dispatch and one combine whose
  latency comes from the published EFA low-latency table for the EP size, split into a fixed
  part and bytes over the table's bandwidth so it scales with the tokens of the step.
- The generic all-to-all does the same exchange `generic_comm_factor` times slower; the factor
  is derived so that, at the published shape (128 tokens per GPU, EP32, the model's own
  shape), the specialised layer's decode is `specialised_over_generic_gain` faster
  (calibrated here, never typed in).
- Training: 6 FLOPs per parameter per token at the published MFU, the EP exchange at the
  published normal-kernel bandwidth, gradient reduction over EFA.
- Weights: the fan-out tree over EFA (moerl's weights.fanout, degree 2, 1 MiB chunks) at the
  efficiency of a published RL weight update, or every rollout instance reading its shard
  from S3 after the trainer wrote it (per-instance and per-prefix limits).
"""

import math

KIB = 1024


class Shape:
    """One scenario: model, hardware split, EP layer and the job's sizes."""

    def __init__(self, v, trainer_instances, rollout_instances, ep="specialised",
                 top_k=None, tokens_per_gpu=None, generation_tokens=None, env_s=None,
                 weights="fanout", params_scale=1.0, table="ep_ll_p5en_uccl"):
        self.v = v
        self.ep = ep
        self.weights = weights
        self.table = table
        self.gpus = v["gpus_per_instance"]
        self.trainer_instances = trainer_instances
        self.ep_gpus = v["rollout_ep_gpus"]
        self.instances_per_replica = max(1, self.ep_gpus // self.gpus)
        self.replicas = rollout_instances // self.instances_per_replica
        self.rollout_instances = self.replicas * self.instances_per_replica
        self.top_k = top_k if top_k is not None else v["model_top_k"]
        self.tokens_per_gpu = tokens_per_gpu if tokens_per_gpu is not None else v["decode_tokens_per_gpu"]
        self.generation_tokens = generation_tokens if generation_tokens is not None else v["generation_tokens"]
        self.env_s = env_s if env_s is not None else v["env_seconds_per_sample"]
        self.params_scale = params_scale
        self.total_params = v["model_total_params"] * params_scale
        self.expert_params = v["model_total_params"] * v["model_expert_params_share"] * params_scale
        self.one_expert = self.expert_params / (v["model_moe_layers"] * v["model_experts"])
        self.dense_params = self.total_params - self.expert_params
        self.active_params = self.dense_params + v["model_moe_layers"] * self.top_k * self.one_expert

    @property
    def wave_samples(self):
        """Sequences one rollout model instance decodes together."""
        return self.tokens_per_gpu * self.ep_gpus


class ClusterCosts:
    """The `costs` interface of iteration.Run for a p5en fleet."""

    generate_threads = 1
    train_threads = 1

    def __init__(self, shape):
        self.s = shape
        self.v = shape.v
        self.lease_retry_s = self.v["lease_retry_s"]
        self.g = generic_comm_factor(self.v, shape.table) if shape.ep == "generic" else 1.0
        self.train_free = False
        self.weights_free = False  # the answer's first steps leave redistribution out

    # --- generation ---------------------------------------------------------------------
    def exchange_s(self, tokens):
        """One MoE layer's dispatch + combine for `tokens` tokens per GPU."""
        return self.g * ll_exchange_s(self.v, self.s.table, self.s.ep_gpus, tokens, self.s.top_k)

    def decode_step_s(self, tokens, context):
        v, s = self.v, self.s
        gpu_bytes = v["h200_hbm_bytes_per_s"] * v["decode_hbm_efficiency"]
        wbytes = v["rollout_weight_bytes_per_param"]
        local_experts = v["model_experts"] / s.ep_gpus * v["model_moe_layers"]
        pairs_per_expert = tokens * s.top_k * s.ep_gpus / v["model_experts"]
        touched = local_experts * min(1.0, pairs_per_expert)
        weight_bytes = (s.dense_params + touched * s.one_expert) * wbytes
        kv_bytes = tokens * context * v["model_kv_bytes_per_token"]
        memory_s = (weight_bytes + kv_bytes) / gpu_bytes
        flop_s = 2 * s.active_params * tokens / v["h200_bf16_flops"]
        return max(memory_s, flop_s) + v["model_moe_layers"] * self.exchange_s(tokens)

    def wave_s(self, tokens):
        """Prefill, then every decode step (the KV cache grows), then the environment."""
        v, s = self.v, self.s
        prompt = v["prompt_tokens"]
        prefill_flops = 2 * s.active_params * tokens * prompt
        prefill = prefill_flops / (v["h200_bf16_flops"] * v["train_mfu"])
        ht = ht_bytes_per_s(v, s.ep_gpus)
        prefill += self.g * v["model_moe_layers"] * tokens * prompt * s.top_k * v["model_hidden"] * 3 / ht
        steps = s.generation_tokens
        segments = min(64, steps)
        decode = 0.0
        for i in range(segments):  # the step time at each segment's middle context
            lo, hi = steps * i // segments, steps * (i + 1) // segments
            decode += (hi - lo) * self.decode_step_s(tokens, prompt + (lo + hi) / 2)
        return prefill + decode + s.env_s

    def generate(self, samples):
        per_gpu = max(1, math.ceil(samples / self.s.ep_gpus))
        return self.wave_s(per_gpu)

    # --- control plane (moerl's, measured; negligible next to the GPU work) --------------
    def ledger_op(self):
        return self.v["box_lease_rtt_s"] + self.v["box_ledger_fsync_s"]

    def claim_op(self):
        return self.ledger_op()

    def reward(self, samples):
        return 2 * self.v["box_hop_s"]

    # --- training ------------------------------------------------------------------------
    def train(self, samples):
        v, s = self.v, self.s
        gpus = s.trainer_instances * s.gpus
        tokens = samples * (v["prompt_tokens"] + s.generation_tokens)
        compute = 6 * s.active_params * tokens / (gpus * v["h200_bf16_flops"] * v["train_mfu"])
        ht = ht_bytes_per_s(v, min(32, gpus))
        # forward dispatch + combine and their backward, BF16 both ways
        exchange = 4 * v["model_moe_layers"] * (tokens / gpus) * s.top_k * v["model_hidden"] * 2 / ht
        efa = v["efa_bits_per_s_per_instance"] / 8
        grads = 2 * s.total_params * 2 / (s.trainer_instances * efa)  # reduce-scatter + gather
        if self.train_free:  # the rollout side alone: the trainer never holds it back
            return 0.0
        step = max(compute, exchange) if v["train_exchange_overlap"] else compute + exchange
        return step + grads

    def publish(self):
        """Until the first copy is available to the rollout side."""
        if self.s.weights == "store" and not self.weights_free:
            return self.store_put_s()
        return 0.0  # the fan-out starts from the trainers' memory

    # --- weights -------------------------------------------------------------------------
    def shard_bytes(self):
        v, s = self.v, self.s
        return s.total_params * v["rollout_weight_bytes_per_param"] / s.instances_per_replica

    def redistribute(self, index, count):
        if self.weights_free:
            return 0.0
        if self.s.weights == "store":
            return store_get_s(self.v, self.shard_bytes(), self.s.rollout_instances)
        return fanout_s(self.v, self.shard_bytes(), self.s.replicas)

    def store_put_s(self):
        v, s = self.v, self.s
        total = s.total_params * v["rollout_weight_bytes_per_param"]
        put_rate = v["s3_put_per_s_per_prefix"] * v["s3_range_bytes"] * v["store_prefixes_per_version"]
        return total / min(s.trainer_instances * v["s3_bytes_per_s_per_instance"], put_rate)

    def join_weights(self, count):
        """A replacement instance reads the current version before it leases."""
        if self.s.weights == "store":
            return self.shard_bytes() / self.v["s3_bytes_per_s_per_instance"]
        return fanout_s(self.v, self.shard_bytes(), 1)

    def trainer_restore(self):
        """A re-formed trainer group reads its checkpoint (weights + Adam state) from S3."""
        v, s = self.v, self.s
        return s.total_params * v["checkpoint_bytes_per_param"] / (
            s.trainer_instances * v["s3_bytes_per_s_per_instance"])


# --- the published tables --------------------------------------------------------------------
def _table_row(v, table, ep):
    rows = v[table]
    sizes = sorted(int(k) for k in rows)
    pick = min(sizes, key=lambda k: (abs(k - ep), k))
    return rows[str(pick)]


def ll_exchange_s(v, table, ep, tokens, top_k):
    """Dispatch (FP8) + combine (BF16) latency for `tokens` per GPU: the table's latency at
    128 tokens and top-8, as a fixed part plus bytes over the table's bandwidth."""
    row = _table_row(v, table, ep)
    hidden = v["model_hidden"]
    total = 0.0
    for phase, elem in (("dispatch", 1), ("combine", 2)):
        lat = row[f"{phase}_us"] * 1e-6
        bw = row.get(f"{phase}_gbps")
        ref_bytes = 128 * 8 * hidden * elem
        if bw:
            fixed = max(0.0, lat - ref_bytes / (bw * 1e9))
            total += fixed + tokens * top_k * hidden * elem / (bw * 1e9)
        else:  # latency only (pplx-garden): scale with bytes from the reference point
            total += lat * (tokens * top_k) / (128 * 8)
    return total


def ht_bytes_per_s(v, ep):
    row = _table_row(v, "ep_ht_p5en_uccl", ep)
    return min(row["dispatch_gbps"], row["combine_gbps"]) * 1e9


def generic_comm_factor(v, table="ep_ll_p5en_uccl"):
    """How much slower a generic all-to-all's exchange is, from the published gain: at the
    reference decode shape, (compute + g * exchange) / (compute + exchange) = gain."""
    ref = Shape(v, 1, v["rollout_ep_gpus"] // v["gpus_per_instance"], ep="specialised",
                tokens_per_gpu=128, table=table)
    c = ClusterCosts(ref)
    context = v["prompt_tokens"] + v["generation_tokens"] / 2
    step = c.decode_step_s(128, context)
    exchange = v["model_moe_layers"] * c.exchange_s(128)
    gain = v["specialised_over_generic_gain"]
    return 1.0 + (gain - 1.0) * step / exchange


def fanout_efficiency(v):
    """Achieved fraction of EFA bandwidth in the published RL weight update (Perplexity)."""
    p = v["published_weight_transfer"]
    inference_instances = p["inference_gpus"] / v["gpus_per_instance"]
    per_instance = p["params"] * v["rollout_weight_bytes_per_param"] / inference_instances
    ideal = per_instance / (v["efa_bits_per_s_per_instance"] / 8)
    return ideal / p["seconds"]


def fanout_s(v, shard_bytes, receivers):
    """A pipelined tree of degree d: every node forwards each chunk to d children, so its
    egress is shared d ways; the last chunk reaches the deepest node depth hops later."""
    d = v["fanout_degree"]
    link = v["efa_bits_per_s_per_instance"] / 8 * fanout_efficiency(v)
    depth = max(1, math.ceil(math.log(receivers * (d - 1) + 1, d))) if d > 1 else receivers
    chunk = v["fanout_chunk_bytes"]
    return shard_bytes * min(d, receivers) / link + depth * chunk * d / link


def store_get_s(v, shard_bytes, readers):
    """Every reader GETs its shard from one version's prefix(es)."""
    per_reader = shard_bytes / v["s3_bytes_per_s_per_instance"]
    prefix_rate = v["s3_get_per_s_per_prefix"] * v["s3_range_bytes"] * v["store_prefixes_per_version"]
    return max(per_reader, readers * shard_bytes / prefix_rate)
