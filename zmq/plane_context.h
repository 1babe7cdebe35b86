// The ZeroMQ context of a node, secured as its config requires: with node.plane_secret_file
// set, every plane socket uses CURVE keys derived from the secret; without it the planes stay
// plain, which only a node listening on loopback may do. A node on any other address (pods bind
// 0.0.0.0) without the secret refuses to start and names the key it lacks: there is no switch
// to forget.
#pragma once

#include <memory>
#include <optional>

#include "common/config.h"
#include "common/error.h"
#include "zmq/context.h"

namespace moerl::zmq {

// Sets the listener limits below first.
result<std::shared_ptr<zmq_context>> make_plane_context(const config& cfg);

// The limits of every ZeroMQ server socket this process binds from now on, from the config:
// node.max_frame_bytes (zmq/frame_limit.h) and node.zmq_max_connections_per_peer
// (zmq/connection_limit.h). For a process whose server sockets do not come from
// make_plane_context's context (the coordinator's admin console).
void set_listener_limits(const config& cfg);

// The same rule for the admin plane, for the console's server and its clients alike, on the
// host of `endpoint` ("tcp://HOST:PORT"): the cluster's keys when node.plane_secret_file is
// set; none on loopback without it (tokens still apply); an error naming the key otherwise.
result<std::optional<plane_keys>> admin_plane_keys(const config& cfg, const std::string& endpoint);

}  // namespace moerl::zmq
