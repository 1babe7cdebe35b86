#include "zmq/plane_context.h"

#include "common/loopback.h"
#include "common/status_try.h"
#include "zmq/connection_limit.h"
#include "zmq/frame_limit.h"

namespace moerl::zmq {

namespace {

// The one rule of every ZeroMQ plane: with a plane secret the plane is under CURVE (on
// loopback too, so a loopback client and a 0.0.0.0 server of one cluster agree); without one
// it stays plain, which only an address on loopback may.
result<std::optional<plane_keys>> keys_for(const config& cfg, const std::string& host,
                                           const std::string& what) {
  const std::string secret_file = cfg.get_string("node.plane_secret_file");
  if (secret_file.empty()) {
    if (!is_loopback_host(host))
      return error(errc::invalid_config,
                   what + " is " + host +
                       " (not loopback) and node.plane_secret_file is not set: the ZeroMQ "
                       "planes would be open to anyone who reaches this address; give every "
                       "node of the cluster the same secret file (`moerl secret init FILE` "
                       "makes one)");
    return std::optional<plane_keys>();
  }
  ASSIGN_OR_RETURN(auto keys, load_plane_keys(secret_file));
  return std::optional<plane_keys>(std::move(keys));
}

}  // namespace

void set_listener_limits(const config& cfg) {
  set_max_frame_bytes(cfg.get_int("node.max_frame_bytes"));
  set_max_connections_per_peer(cfg.get_int("node.zmq_max_connections_per_peer"));
}

result<std::shared_ptr<zmq_context>> make_plane_context(const config& cfg) {
  ASSIGN_OR_RETURN(auto keys, keys_for(cfg, cfg.get_string("node.host"), "node.host"));
  set_listener_limits(cfg);
  return zmq_context::create(std::move(keys));
}

result<std::optional<plane_keys>> admin_plane_keys(const config& cfg, const std::string& endpoint) {
  std::string host = endpoint;
  if (const size_t scheme = host.find("://"); scheme != std::string::npos)
    host = host.substr(scheme + 3);
  if (const size_t colon = host.rfind(':'); colon != std::string::npos) host.resize(colon);
  return keys_for(cfg, host, "the admin plane's host in " + endpoint);
}

}  // namespace moerl::zmq
