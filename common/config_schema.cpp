// Every configuration key moerl understands, declared once: type, default, meaning.
// Keys have exactly two levels, "section.name". README's configuration reference is
// printed from this table by `moerl config keys --markdown` (a test checks it is current).
// Components add their keys to their own section below; keep sections together.
#include "common/config.h"

namespace moerl {

const std::vector<key_spec>& config_schema() {
  using t = key_type;
  static const std::vector<key_spec> schema = {
      // ---- log ------------------------------------------------------------------
      {"log.level", t::string, "info", "log level; MOERL_LOG_LEVEL overrides it",
       "trace|debug|info|warn|error|critical|off"},

      // ---- node -----------------------------------------------------------------
      {"node.name", t::string, "", "node name shown in the console; empty: role-<random suffix>",
       ""},
      {"node.host", t::string, "127.0.0.1", "address this node listens on for the control plane",
       ""},
      {"node.port", t::integer, "0", "control-plane port of this node (0: pick a free port)", ""},
      {"node.heartbeat_interval_ms", t::integer, "500",
       "CAF middleman heartbeat interval (middleman.heartbeat-interval); 0 is refused", ""},
      {"node.connection_timeout_ms", t::integer, "3000",
       "CAF middleman connection timeout: a silent peer is declared down after this", ""},
      {"node.request_timeout_ms", t::integer, "5000", "timeout on every remote request", ""},
      {"node.tls", t::boolean, "false", "TLS (caf_openssl) on the control plane", ""},
      {"node.tls_certificate", t::string, "", "PEM certificate of this node (node.tls)", ""},
      {"node.tls_key", t::string, "", "PEM private key of this node (node.tls)", ""},
      {"node.tls_ca", t::string, "", "PEM CA file; peers must present a certificate it signed", ""},

      // ---- actors (runtime: work, supervision, drain) ----------------------------
      {"actors.iterations", t::integer, "3",
       "policy iterations a run makes before the coordinator reports done", ""},
      {"actors.units_per_iteration", t::integer, "8",
       "work units the coordinator opens per iteration", ""},
      {"actors.groups_per_unit", t::integer, "2",
       "prompt groups in one work unit (<= ledger.max_groups_per_unit)", ""},
      {"actors.work_rounds", t::integer, "400",
       "rounds of the test work per response (its cost and length)", ""},
      {"actors.rollout_workers", t::integer, "2",
       "rollout actors per rollout node (supervised one-for-one)", ""},
      {"actors.trainer_ranks", t::integer, "2",
       "ranks of the trainer group (supervised one-for-all)", ""},
      {"actors.restart_intensity", t::integer, "5",
       "restarts allowed within actors.restart_period_ms before a supervisor gives up", ""},
      {"actors.restart_period_ms", t::integer, "10000",
       "sliding window of the restart intensity limit", ""},
      {"actors.restart_backoff_ms", t::integer, "100",
       "first restart delay; doubles per restart in the window", ""},
      {"actors.restart_backoff_max_ms", t::integer, "5000", "upper bound of the restart delay", ""},
      {"actors.drain_margin_ms", t::integer, "2000",
       "drain finishes units only if they end this long before the deadline", ""},
      {"actors.sigterm_grace_ms", t::integer, "30000",
       "deadline a SIGTERM implies (the kubelet's default grace period)", ""},
      {"actors.trainer_batch_groups", t::integer, "2",
       "prompt groups per trainer batch (one policy version step each)", ""},
      {"actors.trainer_flush_ms", t::integer, "1500",
       "a trainer holding a partial iteration steps on it after this long without a batch", ""},
      {"actors.heartbeat_misses", t::integer, "8",
       "heartbeats (node.heartbeat_interval_ms) a node may miss before the coordinator declares it "
       "dead",
       ""},
      {"actors.lease_batch", t::integer, "1",
       "leases a rollout worker asks for in one request (1: one lease per request); the "
       "coordinator grants at most this many per request",
       ""},

      // ---- console (admin plane) --------------------------------------------------
      {"console.address", t::string, "tcp://127.0.0.1:7411",
       "ZeroMQ address the coordinator's console listens on; `moerl console` connects here by "
       "default",
       ""},
      {"console.token", t::string, "moerl-local", "shared token every console request must carry",
       ""},
      {"console.timeout_ms", t::integer, "5000", "how long `moerl console` waits for a reply", ""},

      // ---- cluster (the local cluster of `moerl up`: its pod controllers) ------------
      {"cluster.restart_delay_ms", t::integer, "1000",
       "`moerl up` replaces a node that exited after this long; doubles per replacement of the "
       "same node",
       ""},
      {"cluster.restart_backoff_max_ms", t::integer, "8000",
       "upper bound of cluster.restart_delay_ms's doubling", ""},
      {"cluster.max_restarts", t::integer, "5",
       "replacements of one node before `moerl up` ends the job as failed", ""},

      // ---- imds (EC2 interruption notices) ------------------------------------------
      {"imds.enabled", t::boolean, "false", "poll EC2 IMDSv2 for spot/rebalance notices", ""},
      {"imds.endpoint", t::string, "http://169.254.169.254",
       "IMDS base URL (tests point it at a local server)", ""},
      {"imds.poll_interval_ms", t::integer, "1000", "IMDS poll period", ""},
      {"imds.request_timeout_ms", t::integer, "1000", "timeout of one IMDS HTTP call", ""},
      {"imds.token_ttl_s", t::integer, "21600", "IMDSv2 session token lifetime requested", ""},
      {"imds.rebalance_grace_ms", t::integer, "120000",
       "deadline assumed for a rebalance recommendation (it carries none)", ""},

      // ---- ledger (work units, leases, journal; ledger/LEDGER.md) ------------------
      {"ledger.lease_timeout_ms", t::integer, "30000",
       "a lease not renewed or committed within this expires and its unit is re-leased", ""},
      {"ledger.group_size", t::integer, "8", "samples generated per prompt group (GRPO group size)",
       ""},
      {"ledger.max_groups_per_unit", t::integer, "4",
       "upper bound on prompt groups in one work unit (keeps a unit inside a Spot notice)", ""},
      {"ledger.snapshot_every", t::integer, "1024",
       "journal records between two ledger snapshots in the object store", ""},
      {"ledger.store_prefix", t::string, "ledger",
       "object-store key prefix of the ledger journal and snapshots", ""},

      // ---- buffer (experience-buffer shards and the sample plane) -----------------
      {"buffer.capacity_samples", t::integer, "4096",
       "samples one buffer shard holds (staged + ready); leases and credits respect it", ""},
      {"buffer.capacity_bytes", t::integer, "268435456",
       "estimated sample bytes one buffer shard holds", ""},
      {"buffer.max_staleness", t::integer, "1",
       "a sample more than this many policy versions old is dropped at admission (stale_policy)",
       ""},
      {"buffer.credits_per_producer", t::integer, "64",
       "sample-plane credits a shard grants one producer at most (in-transit bound)", ""},
      {"buffer.max_frame_bytes", t::integer, "16777216",
       "sample-plane frames larger than this are dropped", ""},

      // ---- fabric (expert plane) ------------------------------------------------
      {"fabric.provider", t::string, "auto",
       "libfabric provider; auto prefers efa > shm > tcp;ofi_rxm. MOERL_FABRIC_PROVIDER overrides",
       "auto|efa|shm|tcp;ofi_rxm|tcp"},
      {"fabric.require_provider", t::boolean, "false",
       "fail at start when fabric.provider is not available instead of falling back", ""},
      {"fabric.op_timeout_ms", t::integer, "10000",
       "an EP operation or collective that does not complete within this fails on every rank", ""},
      {"fabric.reorder_shim", t::boolean, "false",
       "route writes through the reorder/delay/split/re-deliver shim (testing)", ""},

      // ---- policy (the MoE network, its optimiser and sampling) -------------------
      {"policy.d_model", t::integer, "64", "width of the residual stream", ""},
      {"policy.num_layers", t::integer, "2", "number of attention + MoE blocks", ""},
      {"policy.num_heads", t::integer, "4", "attention heads; must divide policy.d_model", ""},
      {"policy.num_experts", t::integer, "4",
       "experts per MoE layer (split over expert-parallel ranks)", ""},
      {"policy.top_k", t::integer, "2", "experts each token visits", ""},
      {"policy.ffn_dim", t::integer, "64", "hidden width of each expert's SwiGLU FFN", ""},
      {"policy.max_seq_len", t::integer, "32", "longest prompt + completion (position table size)",
       ""},
      {"policy.aux_loss_coef", t::number, "0.01", "weight of the Switch load-balance loss (0: off)",
       ""},
      {"policy.seed", t::integer, "1", "seed of the initial weights", ""},
      {"policy.num_threads", t::integer, "1", "CPU threads of the kernels' pool (0: one per core)",
       ""},
      {"policy.temperature", t::number, "1.0", "sampling temperature; logprobs are taken at it too",
       ""},
      {"policy.learning_rate", t::number, "0.001", "Adam learning rate", ""},
      {"policy.adam_beta1", t::number, "0.9", "Adam first-moment decay", ""},
      {"policy.adam_beta2", t::number, "0.99", "Adam second-moment decay", ""},
      {"policy.grad_clip", t::number, "1.0", "max global gradient L2 norm (0: no clipping)", ""},

      // ---- task (what the policy learns and how it is rewarded) --------------------
      {"task.name", t::string, "sort", "verifiable task", "sort|add"},
      {"task.difficulty", t::integer, "3",
       "sort: digits to sort (1..16); add: digits per operand (1..8)", ""},
      {"task.reward", t::string, "verifier",
       "reward source: the task's verifier or a learned reward model", "verifier|learned"},
      {"task.reward_model_path", t::string, "",
       "learned reward model checkpoint file (task.reward=learned)", ""},

      // ---- grpo (the policy-gradient algorithm) ------------------------------------
      {"grpo.group_size", t::integer, "8",
       "samples per prompt (G); advantages are normalised inside a group", ""},
      {"grpo.prompts_per_iteration", t::integer, "16",
       "prompts per policy iteration (batch = this x G samples)", ""},
      {"grpo.iterations", t::integer, "800", "policy iterations of a run", ""},
      {"grpo.epochs", t::integer, "1", "optimiser passes over each iteration's batch", ""},
      {"grpo.clip_eps", t::number, "0.2", "PPO clip range of the importance ratio", ""},
      {"grpo.kl_coef", t::number, "0.0",
       "weight of the KL penalty to the initial (reference) policy; 0: off", ""},
      {"grpo.seed", t::integer, "1", "seed of prompt generation and sampling", ""},

      // ---- job (the main job: what the runtime runs) -------------------------------
      {"job.kind", t::string, "grpo",
       "grpo: GRPO on the MoE policy (job/); modpow: the deterministic test work of actors/",
       "grpo|modpow"},
      {"job.store_prefix", t::string, "job",
       "object-store prefix of the run's weight versions and checkpoints (moerl up: runs/<id>/job)",
       ""},
      {"job.checkpoint_every", t::integer, "10",
       "durable checkpoint every this many policy versions (0: never)", ""},
      {"job.resume_from", t::string, "",
       "job.store_prefix of an earlier run to resume from its last committed checkpoint", ""},
      {"job.rollout_ep_ranks", t::integer, "2",
       "expert-parallel rank threads per rollout worker (fabric EP group; 1: single-rank replica)",
       ""},
      {"job.trainer_ep_ranks", t::integer, "2",
       "expert-parallel rank threads of the trainer (fabric EP group + dense all-reduce; 1: single "
       "rank)",
       ""},

      // ---- store (durable plane) ------------------------------------------------
      {"store.url", t::string, "./moerl-data",
       "object store for checkpoints, datasets and run records: a directory, file:///dir or "
       "s3://bucket/prefix",
       ""},
      {"store.local_fsync", t::boolean, "true",
       "local store: fsync each object and its directory on put (off only for scratch data)", ""},
      {"store.s3_endpoint", t::string, "",
       "S3 endpoint URL, path-style addressing; empty: https://s3.<store.s3_region>.amazonaws.com",
       ""},
      {"store.s3_region", t::string, "us-east-1", "S3 signing region (SigV4 scope)", ""},
      {"store.multipart_threshold_bytes", t::integer, "67108864",
       "S3 objects larger than this are uploaded as multipart uploads", ""},
      {"store.multipart_part_bytes", t::integer, "16777216",
       "S3 multipart part size, at least 5242880; grows if an object would need over 10000 parts",
       ""},
      {"store.s3_upload_concurrency", t::integer, "4",
       "parts of one S3 multipart upload sent at once, each on its own connection (1..64)", ""},
      {"store.s3_timeout_ms", t::integer, "120000",
       "limit on one S3 HTTP request, transfer included", ""},
      {"store.s3_max_retries", t::integer, "3",
       "retries of an S3 request after a network error or HTTP 5xx, with exponential backoff", ""},
  };
  return schema;
}

}  // namespace moerl
