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

result<std::shared_ptr<zmq_context>> make_plane_context(const config& cfg);

// The same rule for the admin plane, for the console's server and its clients alike, on the
// host of `endpoint` ("tcp://HOST:PORT"): the cluster's keys when node.plane_secret_file is
// set; none on loopback without it (tokens still apply); an error naming the key otherwise.
result<std::optional<plane_keys>> admin_plane_keys(const config& cfg, const std::string& endpoint);

}  // namespace moerl::zmq
