// Whether an address a node listens on is reachable only from this machine. Loopback-only
// runs may stay plain (console tokens at their defaults, ZeroMQ planes without CURVE); any
// other address, 0.0.0.0 included, must carry credentials.
#pragma once

#include <string>

#include "common/config.h"

namespace moerl {

inline bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

// Whether the control plane (CAF) runs TLS: asked for (node.tls), implied by any of its files
// (node.tls_certificate, node.tls_key, node.tls_ca), or required because node.host is not
// loopback. Like the plane secret's rule (zmq/plane_context.h) there is no switch to forget:
// off loopback a node without the files refuses to start (actors/caf_setup.cpp names them).
inline bool control_plane_tls(const config& cfg) {
  return cfg.get_bool("node.tls") || !cfg.get_string("node.tls_certificate").empty() ||
         !cfg.get_string("node.tls_key").empty() || !cfg.get_string("node.tls_ca").empty() ||
         !is_loopback_host(cfg.get_string("node.host"));
}

}  // namespace moerl
