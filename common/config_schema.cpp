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
  };
  return schema;
}

}  // namespace moerl
