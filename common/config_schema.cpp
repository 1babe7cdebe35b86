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
      {"node.name", t::string, "", "node name shown in the console; empty: role-<random suffix>", ""},
      {"node.host", t::string, "127.0.0.1", "address this node listens on for the control plane", ""},
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
      {"actors.units_per_iteration", t::integer, "8", "work units the coordinator opens per iteration", ""},
      {"actors.groups_per_unit", t::integer, "2", "prompt groups in one work unit", ""},
      {"actors.samples_per_group", t::integer, "4", "responses generated per prompt (GRPO group size)", ""},
      {"actors.work_rounds", t::integer, "400", "rounds of the test work per response (its cost and length)", ""},
      {"actors.lease_timeout_ms", t::integer, "15000", "a lease not reported within this expires back to pending", ""},
      {"actors.rollout_workers", t::integer, "2", "rollout actors per rollout node (supervised one-for-one)", ""},
      {"actors.trainer_ranks", t::integer, "2", "ranks of the trainer group (supervised one-for-all)", ""},
      {"actors.restart_intensity", t::integer, "5", "restarts allowed within actors.restart_period_ms before a supervisor gives up", ""},
      {"actors.restart_period_ms", t::integer, "10000", "sliding window of the restart intensity limit", ""},
      {"actors.restart_backoff_ms", t::integer, "100", "first restart delay; doubles per restart in the window", ""},
      {"actors.restart_backoff_max_ms", t::integer, "5000", "upper bound of the restart delay", ""},
      {"actors.drain_margin_ms", t::integer, "2000", "drain finishes units only if they end this long before the deadline", ""},
      {"actors.sigterm_grace_ms", t::integer, "30000", "deadline a SIGTERM implies (the kubelet's default grace period)", ""},
      {"actors.trainer_batch_groups", t::integer, "2", "prompt groups per trainer batch", ""},

      // ---- console (admin plane) --------------------------------------------------
      {"console.address", t::string, "tcp://127.0.0.1:7411",
       "ZeroMQ address the coordinator's console listens on; `moerl console` connects here by default", ""},
      {"console.token", t::string, "moerl-local", "shared token every console request must carry", ""},
      {"console.timeout_ms", t::integer, "5000", "how long `moerl console` waits for a reply", ""},

      // ---- imds (EC2 interruption notices) ------------------------------------------
      {"imds.enabled", t::boolean, "false", "poll EC2 IMDSv2 for spot/rebalance notices", ""},
      {"imds.endpoint", t::string, "http://169.254.169.254", "IMDS base URL (tests point it at a local server)", ""},
      {"imds.poll_interval_ms", t::integer, "1000", "IMDS poll period", ""},
      {"imds.request_timeout_ms", t::integer, "1000", "timeout of one IMDS HTTP call", ""},
      {"imds.token_ttl_s", t::integer, "21600", "IMDSv2 session token lifetime requested", ""},
      {"imds.rebalance_grace_ms", t::integer, "120000", "deadline assumed for a rebalance recommendation (it carries none)", ""},

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

      // ---- store (durable plane) ------------------------------------------------
      {"store.url", t::string, "./moerl-data",
       "object store for checkpoints, datasets and run records: a directory, file:///dir or s3://bucket/prefix", ""},
      {"store.local_fsync", t::boolean, "true",
       "local store: fsync each object and its directory on put (off only for scratch data)", ""},
      {"store.s3_endpoint", t::string, "",
       "S3 endpoint URL, path-style addressing; empty: https://s3.<store.s3_region>.amazonaws.com", ""},
      {"store.s3_region", t::string, "us-east-1", "S3 signing region (SigV4 scope)", ""},
      {"store.multipart_threshold_bytes", t::integer, "67108864",
       "S3 objects larger than this are uploaded as multipart uploads", ""},
      {"store.multipart_part_bytes", t::integer, "16777216",
       "S3 multipart part size, at least 5242880; grows if an object would need over 10000 parts", ""},
      {"store.s3_timeout_ms", t::integer, "120000", "limit on one S3 HTTP request, transfer included", ""},
      {"store.s3_max_retries", t::integer, "3",
       "retries of an S3 request after a network error or HTTP 5xx, with exponential backoff", ""},
  };
  return schema;
}

}  // namespace moerl
