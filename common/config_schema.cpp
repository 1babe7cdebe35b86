// Every configuration key moerl understands, declared once: type, default, meaning and the
// range a component enforces on it; then the rules between keys. config::set and
// config::load check both, so `moerl config check`, `moerl up` and every node refuse a bad
// value the same way (exit 2, naming file, line and key). A component that reads a key may
// check it again, but a range it enforces belongs here first.
// Keys have exactly two levels, "section.name". docs/CONFIG.md's configuration reference is
// printed from this table by `moerl config keys --markdown` (a test checks it is current).
// Components add their keys to their own section below; keep sections together.
#include "common/config.h"

namespace moerl {

const std::vector<key_spec>& config_schema() {
  using t = key_type;
  using r = key_range;
  static const std::vector<key_spec> schema = {
      // ---- log ------------------------------------------------------------------
      {"log.level", t::string, "info", "log level; MOERL_LOG_LEVEL overrides it",
       "trace|debug|info|warn|error|critical|off"},

      // ---- node -----------------------------------------------------------------
      {"node.name", t::string, "", "node name shown in the console; empty: role-<random suffix>",
       ""},
      {"node.host", t::string, "127.0.0.1", "address this node listens on for the control plane",
       ""},
      {"node.plane_secret_file", t::string, "",
       "file holding the cluster's plane secret (>= 32 bytes; `moerl secret init FILE` makes "
       "one): the ZeroMQ planes (samples, reward, env, weights) use CURVE keys derived from it; "
       "required when node.host is not loopback, optional on loopback",
       ""},
      {"node.max_frame_bytes", t::integer, "67108864",
       "largest ZeroMQ message any plane's server socket (samples, reward, env, weight requests, "
       "admin) takes (ZMQ_MAXMSGSIZE): a peer sending a larger one is disconnected before it is "
       "buffered",
       "", r::closed(1024, 2147483647)},
      {"node.zmq_max_connections_per_peer", t::integer, "64",
       "connections one peer address may hold open at once on each ZeroMQ server socket "
       "(samples, reward, env, weight requests, admin); one more is shut down as it is accepted "
       "and counted (a node's stats: zmq_refused_connections); 0: no limit",
       "", r::closed(0, 1048576)},
      {"node.health_file", t::string, "",
       "file the node agent rewrites every heartbeat tick for its pod's probes (`moerl probe`); "
       "empty: none",
       ""},
      {"node.port", t::integer, "0", "control-plane port of this node (0: pick a free port)", "",
       r::closed(0, 65535)},
      {"node.heartbeat_interval_ms", t::integer, "500",
       "CAF middleman heartbeat interval (middleman.heartbeat-interval)", "", r::at_least(1)},
      {"node.connection_timeout_ms", t::integer, "3000",
       "CAF middleman connection timeout: a silent peer is declared down after this", "",
       r::at_least(1)},
      {"node.request_timeout_ms", t::integer, "5000", "timeout on every remote request", "",
       r::at_least(1)},
      {"node.control_nice", t::integer, "-10",
       "nice value of the heartbeat-critical threads (the coordinator process; each node's agent "
       "and CAF I/O and timer threads), so that CPU-bound neighbours at nice 0 do not starve them "
       "(issue 31); needs CAP_SYS_NICE, without it the node logs once and runs as before; 0: "
       "leave them",
       "", r::closed(-20, 19)},
      {"node.tls", t::boolean, "false",
       "TLS (caf_openssl) on the control plane; also on whenever a node.tls_* file is set or "
       "node.host is not loopback (then the three files are required: `moerl ca init DIR`)",
       ""},
      {"node.tls_certificate", t::string, "", "PEM certificate of this node (node.tls)", ""},
      {"node.tls_key", t::string, "", "PEM private key of this node (node.tls)", ""},
      {"node.tls_ca", t::string, "", "PEM CA file; peers must present a certificate it signed", ""},
      {"node.tls_handshake_timeout_ms", t::integer, "5000",
       "a TLS handshake to the coordinator's port not finished by then is closed and counted "
       "(/api/v1/status control_plane.refused.handshake_timeout)",
       "", r::at_least(1)},
      {"node.tls_max_pending_handshakes", t::integer, "512",
       "TLS handshakes the coordinator's port runs at once; a connection over it is closed at "
       "once and counted (too_many_pending)",
       "", r::at_least(1)},
      {"node.tls_max_pending_per_peer", t::integer, "64",
       "TLS handshakes the coordinator's port runs at once from one peer address; more are "
       "closed at once and counted (too_many_from_peer)",
       "", r::at_least(1)},

      // ---- actors (runtime: work, supervision, drain) ----------------------------
      {"actors.iterations", t::integer, "3",
       "policy iterations a run makes before the coordinator reports done", "",
       r::closed(1, 1000000)},
      {"actors.units_per_iteration", t::integer, "8",
       "work units the coordinator opens per iteration", "", r::closed(1, 1000000)},
      {"actors.groups_per_unit", t::integer, "2",
       "prompt groups in one work unit (<= ledger.max_groups_per_unit)", "", r::closed(1, 4096)},
      {"actors.work_rounds", t::integer, "400",
       "rounds of the test work per response (its cost and length)", "", r::closed(1, 4096)},
      {"actors.rollout_workers", t::integer, "2",
       "rollout actors per rollout node (supervised one-for-one)", "", r::at_least(1)},
      {"actors.trainer_ranks", t::integer, "2",
       "ranks of the trainer group (supervised one-for-all)", "", r::at_least(1)},
      {"actors.restart_intensity", t::integer, "5",
       "restarts allowed within actors.restart_period_ms before a supervisor gives up", "",
       r::at_least(0)},
      {"actors.restart_period_ms", t::integer, "10000",
       "sliding window of the restart intensity limit", "", r::at_least(1)},
      {"actors.restart_backoff_ms", t::integer, "100",
       "first restart delay; doubles per restart in the window", "", r::at_least(0)},
      {"actors.restart_backoff_max_ms", t::integer, "5000", "upper bound of the restart delay", "",
       r::at_least(0)},
      {"actors.drain_margin_ms", t::integer, "2000",
       "drain finishes units only if they end this long before the deadline", "", r::at_least(0)},
      {"actors.sigterm_grace_ms", t::integer, "30000",
       "deadline a SIGTERM implies (the kubelet's default grace period)", "", r::at_least(0)},
      {"actors.trainer_batch_groups", t::integer, "2",
       "prompt groups a trainer asks a shard for in one batch (the modpow job steps on each "
       "batch; the GRPO job collects an iteration's groups and asks for no more than it still "
       "needs)",
       "", r::at_least(1)},
      {"actors.trainer_flush_ms", t::integer, "1500",
       "a trainer holding a partial iteration steps on it after this long without a batch", "",
       r::at_least(0)},
      {"actors.trainer_claim_gather_ms", t::integer, "3",
       "after a batch arrives while its step still wants groups, a trainer waits up to this "
       "long for the other shards' batches so that one ledger claim covers them all (0: claim "
       "what has arrived at once)",
       "", r::closed(0, 1000)},
      // ---- trainer group across node processes (actors/node_group_core.h) ------------
      {"trainer.group", t::string, "trainer",
       "name of the trainer group the trainer nodes join (trainer.group_size > 1)", ""},
      {"trainer.group_size", t::integer, "1",
       "trainer node processes forming one trainer group, each with job.trainer_ep_ranks ranks "
       "(1: the trainer is one process)",
       "", r::closed(1, 1024)},
      // ---- rollout expert-parallel groups across node processes (actors/RUNTIME.md) -----
      {"rollout.group", t::string, "rollout-g0",
       "name of the rollout EP group this rollout node joins (rollout.group_size > 1)", ""},
      {"rollout.group_size", t::integer, "1",
       "rollout node processes forming one model instance (an EP group of rollout.group_size x "
       "job.rollout_ep_ranks ranks; member 0 leases and drives, the others follow; 1: every "
       "rollout node is its own instance)",
       "", r::closed(1, 1024)},
      {"rollout.generate_batch_groups", t::integer, "8",
       "prompt groups a rollout worker generates as one batch (the groups of the units one "
       "lease batch, actors.lease_batch, brought): every decode step's expert exchange and a "
       "rollout group's command round carry them all",
       "", r::closed(1, 256)},
      {"trainer.group_form_timeout_ms", t::integer, "30000",
       "a trainer group still missing members after this long reports which (and keeps waiting)",
       "", r::at_least(1)},
      {"actors.heartbeat_misses", t::integer, "8",
       "heartbeats (node.heartbeat_interval_ms) a node may miss before the coordinator declares it "
       "dead",
       "", r::at_least(1)},
      {"actors.lease_batch", t::integer, "1",
       "leases a rollout worker asks for in one request (1: one lease per request); the "
       "coordinator grants at most this many per request",
       "", r::closed(1, 4096)},

      // ---- console (admin plane) --------------------------------------------------
      {"console.address", t::string, "tcp://127.0.0.1:7411",
       "ZeroMQ address the coordinator's console listens on; `moerl console` connects here by "
       "default",
       ""},
      {"console.token", t::string, "moerl-local", "shared token every console request must carry",
       ""},
      {"console.token_file", t::string, "",
       "file holding console.token (a mounted Secret); when set it replaces the value", ""},
      {"console.timeout_ms", t::integer, "5000", "how long `moerl console` waits for a reply", "",
       r::closed(1, 86400000)},
      {"console.http_address", t::string, "127.0.0.1:7412",
       "HOST:PORT the coordinator's HTTP console (dashboard, /api/v1/, /metrics) listens on; "
       "\"\" turns it off",
       ""},
      {"console.viewer_token", t::string, "moerl-viewer",
       "bearer token for the HTTP console's reads (dashboard, /api/v1/ GETs, /metrics)", ""},
      {"console.operator_token", t::string, "moerl-operator",
       "bearer token for the HTTP console's actions (POST /api/v1/actions); also reads", ""},
      {"console.viewer_token_file", t::string, "",
       "file holding console.viewer_token (a mounted Secret); when set it replaces the value", ""},
      {"console.operator_token_file", t::string, "",
       "file holding console.operator_token (a mounted Secret); when set it replaces the value",
       ""},
      {"console.tls_cert", t::string, "",
       "PEM certificate (chain) file: the HTTP console serves HTTPS with it and console.tls_key; "
       "\"\" (both unset) serves plain HTTP",
       ""},
      {"console.tls_key", t::string, "", "PEM private key file of console.tls_cert", ""},
      {"console.http_max_body_bytes", t::integer, "65536",
       "largest request body the HTTP console reads; a larger one gets 413", "",
       r::closed(1, 16777216)},
      {"console.http_requests_per_s", t::integer, "100",
       "requests a second the HTTP console takes from one client address (bursts of twice "
       "that); more get 429 and are counted (/metrics moerl_http_console_refused_total); 0: no "
       "limit",
       "", r::closed(0, 1000000)},
      {"console.http_max_connections", t::integer, "64",
       "connections the HTTP console holds open at once (one worker thread each); one more is "
       "closed as it is accepted and counted (/metrics moerl_http_console_refused_total"
       "{reason=\"too_many_connections\"})",
       "", r::closed(1, 4096)},
      {"console.http_max_connections_per_peer", t::integer, "16",
       "connections the HTTP console holds open at once from one client address; one more is "
       "closed as it is accepted and counted (reason too_many_from_peer)",
       "", r::closed(1, 4096)},

      // ---- cluster (the local cluster of `moerl up`: its pod controllers) ------------
      {"cluster.restart_delay_ms", t::integer, "1000",
       "`moerl up` replaces a node that exited after this long; doubles per replacement of the "
       "same node",
       "", r::closed(0, 600000)},
      {"cluster.restart_backoff_max_ms", t::integer, "8000",
       "upper bound of cluster.restart_delay_ms's doubling", "", r::closed(0, 3600000)},
      {"cluster.max_restarts", t::integer, "5",
       "replacements of one node before `moerl up` ends the job as failed", "",
       r::closed(0, 1000000)},

      // ---- imds (EC2 interruption notices) ------------------------------------------
      {"imds.enabled", t::boolean, "false", "poll EC2 IMDSv2 for spot/rebalance notices", ""},
      {"imds.endpoint", t::string, "http://169.254.169.254",
       "IMDS base URL (tests point it at a local server)", ""},
      {"imds.poll_interval_ms", t::integer, "1000", "IMDS poll period", "", r::at_least(1)},
      {"imds.request_timeout_ms", t::integer, "1000", "timeout of one IMDS HTTP call", "",
       r::at_least(1)},
      {"imds.token_ttl_s", t::integer, "21600", "IMDSv2 session token lifetime requested", "",
       r::closed(1, 21600)},
      {"imds.rebalance_grace_ms", t::integer, "120000",
       "deadline assumed for a rebalance recommendation (it carries none)", "", r::at_least(0)},

      // ---- ledger (work units, leases, journal; ledger/LEDGER.md) ------------------
      {"ledger.lease_timeout_ms", t::integer, "30000",
       "a lease not renewed or committed within this expires and its unit is re-leased", "",
       r::closed(1, 1099511627776)},
      {"ledger.group_size", t::integer, "8", "samples generated per prompt group (GRPO group size)",
       "", r::closed(1, 65536)},
      {"ledger.max_groups_per_unit", t::integer, "4",
       "upper bound on prompt groups in one work unit (keeps a unit inside a Spot notice)", "",
       r::closed(1, 4096)},
      {"ledger.snapshot_every", t::integer, "1024",
       "journal records between two ledger snapshots in the object store", "",
       r::closed(1, 1073741824)},
      {"ledger.store_prefix", t::string, "ledger",
       "object-store key prefix of the ledger journal and snapshots", ""},

      // ---- buffer (experience-buffer shards and the sample plane) -----------------
      {"buffer.capacity_samples", t::integer, "4096",
       "samples one buffer shard holds (staged + ready); leases and credits respect it", "",
       r::at_least(1)},
      {"buffer.capacity_bytes", t::integer, "268435456",
       "estimated sample bytes one buffer shard holds", "", r::at_least(1)},
      {"buffer.max_staleness", t::integer, "1",
       "a sample more than this many policy versions old is dropped at admission (stale_policy)",
       "", r::at_least(0)},
      {"buffer.credits_per_producer", t::integer, "64",
       "sample-plane credits a shard grants one producer at most (in-transit bound)", "",
       r::closed(1, 1048576)},
      {"buffer.max_frame_bytes", t::integer, "16777216",
       "sample-plane frames larger than this are dropped", "", r::at_least(1024)},

      // ---- fabric (expert plane) ------------------------------------------------
      {"fabric.provider", t::string, "auto",
       "libfabric provider; auto prefers efa > shm > tcp;ofi_rxm. MOERL_FABRIC_PROVIDER overrides",
       "auto|efa|shm|tcp;ofi_rxm|tcp"},
      {"fabric.require_provider", t::boolean, "false",
       "fail at start when fabric.provider is not available instead of falling back", ""},
      {"fabric.op_timeout_ms", t::integer, "10000",
       "an EP operation or collective that does not complete within this fails on every rank", "",
       r::at_least(1)},
      {"fabric.reorder_shim", t::boolean, "false",
       "route writes through the reorder/delay/split/re-deliver shim (testing)", ""},
      {"fabric.paths", t::string, "auto",
       "auto: a transport per distance (same process, same host: shared memory; other hosts: "
       "libfabric); fabric: every peer through libfabric",
       "auto|fabric"},

      // ---- policy (the MoE network, its optimiser and sampling) -------------------
      {"policy.d_model", t::integer, "64", "width of the residual stream", "", r::closed(1, 8192)},
      {"policy.num_layers", t::integer, "2", "number of attention + MoE blocks", "",
       r::closed(1, 256)},
      {"policy.num_heads", t::integer, "4", "attention heads; must divide policy.d_model", "",
       r::closed(1, 8192)},
      {"policy.num_experts", t::integer, "4",
       "experts per MoE layer (split over expert-parallel ranks)", "", r::closed(1, 4096)},
      {"policy.top_k", t::integer, "2", "experts each token visits", "", r::closed(1, 4096)},
      {"policy.ffn_dim", t::integer, "64", "hidden width of each expert's SwiGLU FFN", "",
       r::closed(1, 65536)},
      {"policy.max_seq_len", t::integer, "32", "longest prompt + completion (position table size)",
       "", r::closed(2, 4096)},
      {"policy.aux_loss_coef", t::number, "0.01", "weight of the Switch load-balance loss (0: off)",
       "", r::at_least(0)},
      {"policy.seed", t::integer, "1", "seed of the initial weights", ""},
      {"policy.num_threads", t::integer, "1", "CPU threads of the kernels' pool (0: one per core)",
       "", r::closed(0, 256)},
      {"policy.temperature", t::number, "1.0", "sampling temperature; logprobs are taken at it too",
       "", r::above(0)},
      {"policy.learning_rate", t::number, "0.001", "Adam learning rate", "", r::above(0)},
      {"policy.adam_beta1", t::number, "0.9", "Adam first-moment decay", "", r::half_open(0, 1)},
      {"policy.adam_beta2", t::number, "0.99", "Adam second-moment decay", "", r::half_open(0, 1)},
      {"policy.grad_clip", t::number, "1.0", "max global gradient L2 norm (0: no clipping)", "",
       r::at_least(0)},

      // ---- task (what the policy learns and how it is rewarded) --------------------
      {"task.name", t::string, "sort",
       "verifiable task (guess: multi-turn, its episodes run on env nodes)", "sort|add|guess"},
      {"task.difficulty", t::integer, "3",
       "sort: digits to sort (1..16); add: digits per operand (1..8); guess: turn budget (1..9)",
       "", r::closed(1, 16)},
      {"task.reward", t::string, "verifier",
       "reward source: the task's verifier or a learned reward model", "verifier|learned"},
      {"task.reward_model_path", t::string, "",
       "learned reward model checkpoint file (task.reward=learned)", ""},
      {"task.dataset", t::string, "",
       "prompts from this JSONL object in task.dataset_store (job/prompt_dataset.h); \"\": "
       "generated prompts",
       ""},
      {"task.dataset_store", t::string, "",
       "object store holding task.dataset: a directory or s3://bucket/prefix (\"\": store.url)",
       ""},

      // ---- env (the environment plane: env nodes run multi-turn episodes) ----------
      {"env.nodes", t::integer, "0",
       "env nodes `moerl up` starts (a multi-turn task needs at least one)", "", r::closed(0, 64)},
      {"env.workers", t::integer, "4",
       "environment actors per env node (supervised one-for-one; sessions spread over them)", "",
       r::closed(1, 256)},
      {"env.max_sessions", t::integer, "4096",
       "open sessions an env node holds at most; resets past it are refused", "", r::at_least(1)},
      {"env.step_timeout_ms", t::integer, "5000",
       "limit on one reset or step round trip; past it the episode fails (reason timeout)", "",
       r::at_least(1)},
      {"env.step_latency_ms", t::number, "0",
       "emulated environment time per step, mean (a slow simulator or tool call)", "",
       r::at_least(0)},
      {"env.step_latency_dist", t::string, "fixed",
       "distribution of the emulated step time around env.step_latency_ms",
       "fixed|uniform|exponential"},
      {"env.crash_every_steps", t::integer, "0",
       "fault injection: an environment actor crashes after this many steps (0: never)", "",
       r::at_least(0)},

      // ---- external workers (a user's process does a role's work; python/WORKERS.md) --
      {"reward.worker", t::string, "",
       "the reward nodes' scorer: empty: the job's own; python:PKG.MODULE:FUNCTION (a Python "
       "`score(sample) -> float`) or exec:COMMAND (a program serving moerl.worker), started and "
       "restarted by each reward node; attach:/SOCKET/PATH: a worker the user started "
       "(MOERL_WORKER_SOCKET=PATH)",
       ""},
      {"reward.worker_timeout_ms", t::integer, "10000",
       "the longest an external reward worker may take to score one sample: past it the sample "
       "fails and the worker is killed and restarted",
       "", r::at_least(1)},
      {"rollout.worker", t::string, "",
       "the rollout workers' generator: empty: the job's own policy; python:PKG.MODULE:FUNCTION "
       "(a Python function given a moerl.worker.RolloutWorker: `for lease in worker.leases()`) "
       "or exec:COMMAND, one process per rollout worker actor, started and restarted by its "
       "node (attach:/SOCKET/PATH: workers the user started); every sample it submits is checked "
       "against the lease (fencing token, unit, "
       "duplicates, shape) before delivery; with rollout.group_size N > 1 every member node "
       "starts one, the N forming a gloo process group (worker.process_group, worker.rank): rank "
       "0 leases, broadcasts each lease and submits (python/WORKERS.md, \"Rollout groups\")",
       ""},
      {"trainer.worker", t::string, "",
       "the trainer's learning step: empty: the job's own; python:PKG.MODULE:FUNCTION (a Python "
       "function given a moerl.worker.Trainer: `for batch in trainer.batches()`, "
       "`trainer.publish(tensors)`, `trainer.checkpoint(tensors)`) or exec:COMMAND, one process "
       "per trainer node, started and restarted by it (attach:/SOCKET/PATH: a worker the user "
       "started); with trainer.group_size N > 1 every member node starts one, the N forming a "
       "gloo process group (trainer.process_group, trainer.rank; python/WORKERS.md, \"Trainer "
       "groups\")",
       ""},
      {"trainer.worker_timeout_ms", t::integer, "600000",
       "the longest an external trainer may stay silent holding a batch (its training step) "
       "or before asking for its first: past it the worker is killed and the groups it held "
       "are served again",
       "", r::at_least(1)},
      {"env.worker", t::string, "",
       "the env nodes' environments: empty: the job's own; python:PKG.MODULE:FACTORY (a Python "
       "`FACTORY(task)` returning an object with `reset(seed)` and `step(action)`), exec:COMMAND "
       "or attach:/SOCKET/PATH; one process per environment actor (env.workers), each episode "
       "a session in it",
       ""},
      {"env.worker_timeout_ms", t::integer, "5000",
       "the longest an external environment may take for one reset or step: past it the step "
       "fails and the worker is killed and restarted (its episodes fail)",
       "", r::at_least(1)},
      {"worker.python", t::string, "/usr/bin/python3",
       "interpreter of python: workers (reward.worker, rollout.worker, env.worker, trainer.worker)",
       ""},
      {"worker.start_timeout_ms", t::integer, "30000",
       "an external worker that has not said hello this long after its start is killed and "
       "restarted",
       "", r::at_least(1)},
      {"worker.restart_backoff_ms", t::integer, "1000",
       "wait before an external worker that died, hung or failed to start is started again", "",
       r::at_least(0)},

      // ---- grpo (the policy-gradient algorithm) ------------------------------------
      {"grpo.group_size", t::integer, "8",
       "samples per prompt (G); advantages are normalised inside a group", "", r::closed(2, 4096)},
      {"grpo.prompts_per_iteration", t::integer, "16",
       "prompts per policy iteration (batch = this x G samples)", "", r::at_least(1)},
      {"grpo.iterations", t::integer, "800", "policy iterations of a run", "", r::at_least(0)},
      {"grpo.epochs", t::integer, "1", "optimiser passes over each iteration's batch", "",
       r::closed(1, 64)},
      {"grpo.clip_eps", t::number, "0.2", "PPO clip range of the importance ratio", "",
       r::open(0, 1)},
      {"grpo.kl_coef", t::number, "0.0",
       "weight of the KL penalty to the initial (reference) policy; 0: off", "", r::at_least(0)},
      {"grpo.seed", t::integer, "1", "seed of prompt generation and sampling", ""},

      // ---- job (the main job: what the runtime runs) -------------------------------
      {"job.kind", t::string, "grpo",
       "grpo: GRPO on the MoE policy (job/); modpow: the deterministic test work of actors/",
       "grpo|modpow"},
      {"job.device", t::string, "cpu",
       "where the policy's forward, backward, generation and Adam run; cuda runs them on the "
       "device (KV cache included) in `moerl learn` and in moerl up and node roles (every "
       "rollout and trainer rank holds a device policy, the trainer group all-reduces and "
       "broadcasts through NCCL; the expert exchange across ranks stages through host memory "
       "until the expert plane takes device memory: job/ep_policy_group.h). Refused with the "
       "reason without a CUDA build or a visible device, and for groups without NCCL or with "
       "more trainer ranks on a host than devices (job/device.h)",
       "cpu|cuda"},
      {"job.store_prefix", t::string, "job",
       "object-store prefix of the run's weight versions and checkpoints (moerl up: runs/<id>/job)",
       ""},
      {"job.checkpoint_every", t::integer, "10",
       "every job.checkpoint_interval-th policy version is checkpointed (a recreated trainer "
       "resumes from the newest); of those, the multiples of this stay and older others are "
       "removed (0: no checkpoints, a recreated trainer starts from fresh weights)",
       "", r::at_least(0)},
      {"job.checkpoint_interval", t::integer, "0",
       "every this many policy versions are checkpointed (1: every version; 0: half of "
       "job.max_durability_lag, at least 1); at most the lag (1 when that is 0), and best "
       "below it: a checkpoint then has versions to be written in before the trainer waits "
       "for it",
       "", r::at_least(0)},
      {"job.max_durability_lag", t::integer, "16",
       "policy versions the trainer may announce beyond its newest committed checkpoint (written "
       "in the background); when reached, the trainer waits for the store (0: every version is "
       "committed before it is announced)",
       "", r::at_least(0)},
      {"job.resume_from", t::string, "",
       "job.store_prefix of an earlier run to resume from its last committed checkpoint", ""},
      {"job.rollout_ep_ranks", t::integer, "2",
       "expert-parallel rank threads per rollout worker (fabric EP group; 1: single-rank replica)",
       "", r::at_least(1)},
      {"job.trainer_ep_ranks", t::integer, "2",
       "expert-parallel rank threads of the trainer (fabric EP group + dense all-reduce; 1: single "
       "rank)",
       "", r::at_least(1)},

      // ---- weights (the weight plane: checkpoint caches; weights/PROTOCOL.md) ---------
      {"weights.from_cache", t::boolean, "true",
       "the trainer pushes each version to a checkpoint cache and rollouts read it there (the "
       "store only on a miss); false: every version goes through the object store",
       ""},
      {"weights.nodes", t::integer, "1",
       "weights nodes (checkpoint caches) `moerl up` starts; readers choose among them by load", "",
       r::closed(1, 64)},
      {"weights.cache_versions", t::integer, "4",
       "policy versions a weights node holds in memory (the oldest is evicted first)", "",
       r::closed(1, 1024)},
      {"weights.cache_bytes", t::integer, "4294967296",
       "bytes of policy versions a weights node holds in memory", "",
       r::closed(1024, 1099511627776.0)},
      {"weights.chunk_bytes", t::integer, "1048576",
       "bytes per chunk on the weight plane (each chunk carries its sha256)", "",
       r::closed(4096, 268435456)},
      {"weights.same_host_shm", t::boolean, "true",
       "a cache hands a version to readers on its host (same boot, network, mount and pid "
       "namespace, same user) through a sealed memfd, read in one copy, instead of ZeroMQ "
       "chunks; the seals stand in for the reader's whole-version sha256 (an unsealed copy is "
       "hashed)",
       ""},
      {"weights.shard_push", t::string, "zmq",
       "how a trainer pushes a version (or its shard) to a cache: zmq (put chunks over the "
       "cache's socket) or fabric (put_begin, then RMA writes into a region the cache "
       "registered, or stores into its memfd on the same host, then put_commit with the "
       "sha256; weights/PROTOCOL.md \"Fabric puts\"); a fabric put that fails falls back to zmq. "
       "zmq by default: measured (bench/weights/results/weights-push-2026-12-06-64MiB.json) a "
       "64 MiB fabric put is 1.16-1.27x faster on one host or an unshaped link and equal on a "
       "1 Gbit/s one, too little yet for a fabric transport in every trainer and cache process",
       "zmq|fabric"},
      {"weights.fanout", t::boolean, "false",
       "rollout nodes serve the versions they hold (and the one arriving) to other rollout nodes "
       "and read each version through a tree over the rollout nodes present, its root from a "
       "cache (weights/FANOUT.md), instead of each from a cache; the same-host shm path is then "
       "not used (off by default: `moerl up` runs every node on one host, where it is faster)",
       ""},
      {"weights.fanout_degree", t::integer, "2",
       "children per rollout node in the fan-out tree (weights.fanout; 1: a chain)", "",
       r::closed(1, 64)},
      {"weights.request_timeout_ms", t::integer, "2000",
       "a cache that does not answer a request within this is given up on (the reader resumes "
       "from another cache or the store)",
       "", r::closed(10, 600000)},

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
       "S3 objects larger than this are uploaded as multipart uploads", "", r::at_least(1)},
      {"store.multipart_part_bytes", t::integer, "16777216",
       "S3 multipart part size, at least 5242880; grows if an object would need over 10000 parts",
       "", r::at_least(5242880)},
      {"store.s3_upload_concurrency", t::integer, "4",
       "parts of one S3 multipart upload sent at once, each on its own connection (1..64)", "",
       r::closed(1, 64)},
      {"store.s3_timeout_ms", t::integer, "120000",
       "limit on one S3 HTTP request, transfer included", "", r::at_least(1)},
      {"store.s3_max_retries", t::integer, "3",
       "retries of an S3 request after a network error or HTTP 5xx, with exponential backoff", "",
       r::at_least(0)},
  };
  return schema;
}

const std::vector<key_rule>& config_rules() {
  using rel = key_relation;
  static const std::vector<key_rule> rules = {
      // The middleman must hear at least one heartbeat before it calls a peer silent.
      {"node.connection_timeout_ms", rel::greater_than, "node.heartbeat_interval_ms", ""},
      // The coordinator: a unit never exceeds what the ledger admits.
      {"actors.groups_per_unit", rel::at_most, "ledger.max_groups_per_unit", ""},
      // A buffer shard holds at least one whole group.
      {"buffer.capacity_samples", rel::at_least, "ledger.group_size", ""},
      // The model: heads split the residual stream, a token visits distinct experts.
      {"policy.num_heads", rel::divides, "policy.d_model", ""},
      {"policy.top_k", rel::at_most, "policy.num_experts", ""},
      // The add task's operands are at most 8 digits (sort takes up to 16).
      {"task.difficulty", rel::within, "", "task.name=add", key_range::closed(1, 8)},
      // The guess task's turn budget is one digit of its prompt.
      {"task.difficulty", rel::within, "", "task.name=guess", key_range::closed(1, 9)},
      // The GRPO job: experts split evenly over the EP ranks, and every rollout rank
      // generates at least one row of a group.
      {"job.rollout_ep_ranks", rel::divides, "policy.num_experts", "job.kind=grpo"},
      {"job.trainer_ep_ranks", rel::divides, "policy.num_experts", "job.kind=grpo"},
      {"job.rollout_ep_ranks", rel::at_most, "ledger.group_size", "job.kind=grpo"},
      // The local cluster's backoff starts below its ceiling.
      {"cluster.restart_delay_ms", rel::at_most, "cluster.restart_backoff_max_ms", ""},
  };
  return rules;
}

}  // namespace moerl
