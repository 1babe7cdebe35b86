// The address a node tells its peers to connect to. A node bound to a wildcard address
// (node.host 0.0.0.0, as every pod in deploy/ is) must not hand out "tcp://0.0.0.0:PORT":
// a peer in another pod would connect to itself. Kubernetes (and podman) map a pod's
// hostname to the pod's IP in its /etc/hosts, so the hostname's address is the pod IP.
#pragma once

#include <string>

#include "common/error.h"

namespace moerl {

// `bound` ("tcp://HOST:PORT", as ZeroMQ reports a bound socket) with a wildcard HOST
// (0.0.0.0, *, ::) replaced by this host's address: the first IPv4 address its hostname
// resolves to that is not loopback, else its loopback address (peers on this machine still
// connect). Any other endpoint is returned unchanged. errc::invalid_argument names an
// endpoint that is not tcp://HOST:PORT; errc::io_error a hostname that does not resolve.
result<std::string> advertised_endpoint(const std::string& bound);

}  // namespace moerl
