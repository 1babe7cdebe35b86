// One place that turns moerl's config into a CAF 0.17.6 actor_system_config and that opens
// control-plane connections, so every node gets the settings CAF-0.17-NOTES asks for:
//   - middleman heartbeats on (both default to 0 = off, so a frozen peer is never noticed);
//   - a handshake-safe heartbeat interval (connects are retried, see connect_with_retry);
//   - TLS through caf_openssl when node.tls is set (mutual auth with the cluster's own CA).
#pragma once

#include <cstdint>
#include <string>

#include <caf/actor_system_config.hpp>
#include <caf/fwd.hpp>

#include "common/error.h"

namespace moerl {
class config;
}

namespace moerl::actors {

struct control_plane_options {
  int64_t heartbeat_interval_ms = 500;
  int64_t connection_timeout_ms = 3000;
  int64_t request_timeout_ms = 5000;
  bool tls = false;
  std::string tls_certificate, tls_key, tls_ca;
  // CAF scheduler workers. A node's role loops are blocking actors with threads of their own;
  // the pool runs only event-based actors (supervisor, group links, the coordinator), so one
  // worker serves a node and it can sleep until work comes (see node_caf_config). Processes
  // multiplexing many simulated nodes (bench fleet) ask for more.
  size_t scheduler_threads = 1;
  // Bounds on the TLS handshakes a published port runs (actors/tls_acceptor.h).
  int64_t tls_handshake_timeout_ms = 5000;
  int64_t tls_max_pending_handshakes = 512;
  int64_t tls_max_pending_per_peer = 64;
  int control_nice = 0;  // node.control_nice: the TLS acceptor's priority outside a storm

  // Validates: heartbeat > 0, timeout > heartbeat, request timeout > 0, TLS files readable.
  static result<control_plane_options> from_config(const config& cfg);
};

class node_caf_config : public caf::actor_system_config {
 public:
  explicit node_caf_config(const control_plane_options& o);
  control_plane_options opts;
};

// Publishes `a` on host:port (port 0 picks one); returns the bound port. With TLS the port is
// served by moerl's own acceptor (actors/tls_acceptor.h), not caf_openssl's.
result<uint16_t> publish_actor(caf::actor_system& sys, const control_plane_options& o,
                               const caf::actor& a, const std::string& host, uint16_t port);

// Connects to the actor published at host:port, retrying until `give_up_ms` has passed
// (with heartbeats on, a handshake pending at a heartbeat tick fails early; see notes §5).
result<caf::actor> connect_with_retry(caf::actor_system& sys, const control_plane_options& o,
                                      const std::string& host, uint16_t port, int64_t give_up_ms);

// What an actor failed with, for people: the text it was failed with (fail_actor, the
// supervisor's give-up) when its error carries one string, else CAF's rendering.
std::string error_text(caf::actor_system& sys, const caf::error& e);

// "host:port" -> (host, port); errors name the text.
result<std::pair<std::string, uint16_t>> parse_host_port(const std::string& text);

}  // namespace moerl::actors
